"""``store/schedules.py``, the one writer of Schedule, Limit and Runbook rows for the
services: each statement writes the columns it names, with every type they hold, and only
those; a refused insert raises Django's ``IntegrityError`` as a save did."""

from __future__ import annotations

from datetime import date, timedelta

import pytest
from django.db import IntegrityError, transaction

from django_jobs import store
from django_jobs.models import Limit, Runbook, Schedule, ScheduleStatus
from django_jobs.store import _sql, schedules

from .factories import T0, ScheduleFactory

pytestmark = pytest.mark.django_db

# Schedule columns no record change writes, and who does: the key (never changes), the
# planner (last_scheduled_at), claims (running_occurrence), disable and enable.
NOT_A_RECORD_CHANGE = {
    "id",
    "tenant",
    "key",
    "created_at",
    "idempotency_scope",
    "last_scheduled_at",
    "running_occurrence",
    "enabled",
    "disabled_by",
    "disabled_reason",
    "disabled_at",
    "paused_by_tenant",
}


def test_a_record_change_writes_every_other_column_of_the_schedule() -> None:
    """A column added to Schedule is either written by a record change or named above."""
    columns = {f.column for f in Schedule._meta.concrete_fields}
    assert set(schedules.COLUMNS["write_records"]) == columns - NOT_A_RECORD_CHANGE | {"id"}


def test_no_column_a_statement_binds_is_taken_for_a_choice_value() -> None:
    """``load_queries`` turns each ``%(<name>)s`` of ``_sql.VALUES`` into a literal: a column
    of that name would be written with the literal, not the row's value."""
    for statement, names in schedules.COLUMNS.items():
        assert not set(names) & set(_sql.VALUES), statement


def test_write_records_writes_each_value_as_the_row_holds_it() -> None:
    """Every type of column (text, interval, instant, date, JSON, small integer) round-trips
    through the one statement, for two rows at once."""
    one, two = (
        ScheduleFactory.create(),
        ScheduleFactory.create(timing_kind="cron", cron="0 9 * * *"),
    )
    later = T0 + timedelta(days=2)
    one.interval, one.max_delay, one.args, one.priority = (
        timedelta(hours=2),
        timedelta(0),
        {"a": [1]},
        7,
    )
    one.status, one.decider, one.decide_by = ScheduleStatus.DRAFT, "cfo", date(2026, 4, 1)
    one.calendar, one.parked_field, one.parked_reason = {"dates": ["2026-12-25"]}, "cron", "x"
    one.parked_at, one.next_due_at, one.updated_at, one.retired_at = later, None, later, None
    two.cron, two.time_zone, two.zone_reason, two.origin = (
        "0 10 * * *",
        "Europe/Paris",
        "why",
        "code",
    )
    two.next_due_at, two.updated_at, two.retired_at = later, later, later
    store.write_records([one, two])
    for written in (one, two):
        row = Schedule.objects.get(pk=written.pk)
        for name in schedules.COLUMNS["write_records"]:
            assert getattr(row, name) == getattr(written, name), name


def test_disable_writes_no_column_but_its_own() -> None:
    schedule = ScheduleFactory.create(next_due_at=T0)
    schedule.enabled, schedule.disabled_by, schedule.disabled_reason = False, "alice", "why"
    schedule.disabled_at = schedule.updated_at = T0 + timedelta(minutes=1)
    schedule.next_due_at, schedule.cron = None, "changed in memory only"
    store.write_disabled(schedule)
    row = Schedule.objects.get(pk=schedule.pk)
    assert (row.enabled, row.disabled_by, row.disabled_reason) == (False, "alice", "why")
    assert (row.next_due_at, row.cron) == (T0, "")


def test_a_key_already_taken_raises_djangos_integrity_error() -> None:
    """``enqueue()`` relies on it: two first enqueues of a job in one tenant race to create
    its policy record, and the loser reads the winner's."""
    taken = ScheduleFactory.create()
    again = Schedule(**{f.attname: getattr(taken, f.attname) for f in Schedule._meta.fields})
    again.pk = None
    with pytest.raises(IntegrityError), transaction.atomic():
        store.insert_schedules([again])


def test_insert_schedules_numbers_the_rows_and_saves_them() -> None:
    made = ScheduleFactory.build(), ScheduleFactory.build()
    store.insert_schedules(list(made))
    assert all(s.pk is not None and not s._state.adding for s in made)
    assert set(Schedule.objects.values_list("pk", flat=True)) == {s.pk for s in made}


def test_write_limits_creates_a_limit_then_changes_it_in_place() -> None:
    schedule = ScheduleFactory.create()
    store.write_limits([Limit(schedule=schedule, keep_for=timedelta(days=3), keep_last=None)])
    first = Limit.objects.get(schedule=schedule)
    store.write_limits([Limit(schedule=schedule, keep_for=None, keep_last=10)])
    (limit,) = Limit.objects.filter(schedule=schedule)
    assert (limit.pk, limit.keep_for, limit.keep_last) == (first.pk, None, 10)


def test_write_runbooks_creates_each_kind_once_then_rewrites_its_texts() -> None:
    schedule = ScheduleFactory.create()
    store.write_runbooks([Runbook(schedule=schedule, kind="inspect", interface="a")])
    store.write_runbooks(
        [
            Runbook(schedule=schedule, kind="inspect", interface="b", verification="v"),
            Runbook(schedule=schedule, kind="replay", interface="c"),
        ]
    )
    rows = Runbook.objects.filter(schedule=schedule).order_by("kind")
    assert [(r.kind, r.interface, r.verification) for r in rows] == [
        ("inspect", "b", "v"),
        ("replay", "c", ""),
    ]
