"""``store/schedules.py``, the one writer of Schedule, Limit and Runbook rows for the
services: each statement writes the columns it names, with every type they hold, and only
those; a refused insert raises Django's ``IntegrityError`` as a save did."""

from __future__ import annotations

import copy
import re
import uuid
from collections.abc import Callable
from datetime import date, timedelta
from typing import Any

import pytest
from django.db import IntegrityError, transaction
from django.db.models import (
    BooleanField,
    CharField,
    DateField,
    DateTimeField,
    DurationField,
    Field,
    IntegerField,
    JSONField,
    Model,
    TextField,
    UUIDField,
)

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


# Each ``write_*`` statement, the store function that runs it and a stored row of its model.
def _stored_schedule(**changes: Any) -> Schedule:
    """A row with every column a write may change non-empty (so None -> value is a change
    too) and every timing column set (so any timing kind satisfies the table's checks)."""
    return ScheduleFactory.create(
        cron="0 9 * * *",
        rrule="FREQ=DAILY",
        run_at=T0,
        delay=timedelta(minutes=5),
        calendar={"dates": ["2026-12-25"]},
        zone_reason="why",
        args={"a": 1},
        status=ScheduleStatus.DRAFT,
        decider="cfo",
        decide_by=date(2026, 4, 1),
        retired_at=T0,
        next_due_at=T0,
        parked_at=T0,
        parked_field="cron",
        parked_reason="x",
        disabled_by="alice",
        disabled_reason="why",
        disabled_at=T0,
        **changes,
    )


def _stored_limit() -> Limit:
    return Limit.objects.create(
        schedule=ScheduleFactory.create(), keep_for=timedelta(days=3), keep_last=5
    )


def _stored_runbook() -> Runbook:
    return Runbook.objects.create(
        schedule=ScheduleFactory.create(),
        kind="inspect",
        interface="a",
        claimed_occurrence_effect="b",
        verification="c",
    )


WRITES: dict[str, tuple[Callable[[Any], None], Callable[[], Model]]] = {
    "write_records": (lambda row: store.write_records([row]), _stored_schedule),
    "write_status": (lambda row: store.write_status([row]), _stored_schedule),
    "write_disabled": (store.write_disabled, _stored_schedule),
    "write_enabled": (store.write_enabled, lambda: _stored_schedule(enabled=False)),
    "write_limits": (lambda row: store.write_limits([row]), _stored_limit),
    "write_runbooks": (lambda row: store.write_runbooks([row]), _stored_runbook),
}


def test_every_write_statement_of_the_store_is_proved_here() -> None:
    assert set(WRITES) == set(schedules.COLUMNS)


def _other(field: Field[Any, Any], value: Any) -> Any:
    """A value of ``field`` the table accepts that differs from ``value``."""
    if field.choices:
        options = [v for v, _ in field.flatchoices]
        return options[(options.index(value) + 1) % len(options)]
    if isinstance(field, BooleanField):
        return not value
    if isinstance(field, DurationField):
        return (value or timedelta(0)) + timedelta(hours=1)
    if isinstance(field, DateTimeField):
        return (value or T0) + timedelta(days=1)
    if isinstance(field, DateField):
        return (value or date(2026, 1, 1)) + timedelta(days=1)
    if isinstance(field, IntegerField):
        return (value or 0) + 1
    if isinstance(field, JSONField):
        return {"changed": [value]}
    if isinstance(field, UUIDField):
        return uuid.uuid4()
    assert isinstance(field, CharField | TextField), field
    return f"{value}-changed"


def _set_targets(statement: str) -> tuple[list[str], list[str]]:
    """The columns ``statement``'s ``SET`` assigns, and those it keys the rows by (an
    ``UPDATE``'s ``id``, an upsert's conflict target); each assignment takes the value of
    the same column of its source (``t.<column>``, ``EXCLUDED.<column>``). An ``UPDATE``
    is the statement's own, at the start of a line (not one of its ``WITH`` clauses, which
    are indented)."""
    lines = schedules.QUERIES[statement].splitlines()
    query = "\n".join(line for line in lines if not line.startswith("--"))
    assignments = re.search(r"^UPDATE\b.*?\bSET\b(.*?)\bFROM\b", query, re.S | re.M)
    if assignments is not None:
        keys = ["id"]
    else:
        assignments = re.search(r"\bDO UPDATE SET\b(.*)$", query, re.S)
        conflict = re.search(r"ON CONFLICT \(([^)]*)\)", query)
        assert conflict is not None, statement
        keys = [k.strip() for k in conflict.group(1).split(",")]
        inserted = re.search(r"INSERT INTO \S+ \(([^)]*)\)", query)
        assert inserted is not None, statement
        columns = [c.strip() for c in inserted.group(1).split(",")]
        assert columns == list(schedules.COLUMNS[statement]), statement
    assert assignments is not None, statement
    targets = []
    for assignment in assignments.group(1).split(","):
        target, source = (part.strip().strip('"') for part in assignment.split("="))
        assert source.split(".")[-1] == target, (statement, assignment)
        targets.append(target)
    return targets, keys


@pytest.mark.parametrize("statement", sorted(WRITES))
def test_each_write_statement_sets_exactly_the_columns_it_binds(statement: str) -> None:
    """A column bound but not in ``SET`` would be silently dropped; one set but not bound
    would not parse. Read from the statement's text."""
    targets, keys = _set_targets(statement)
    assert len(targets) == len(set(targets)), statement
    assert set(targets) | set(keys) == set(schedules.COLUMNS[statement])
    assert not set(targets) & set(keys)


@pytest.mark.parametrize("statement", sorted(WRITES))
def test_each_write_statement_changes_every_column_it_writes(statement: str) -> None:
    """Every column the statement writes is given a value other than the stored row's, and
    each one is read back changed (a ``SET`` line lost would leave its column as stored);
    every other column is changed in memory too and read back as stored."""
    write, make = WRITES[statement]
    stored = make()
    model = type(stored)
    _, keys = _set_targets(statement)
    changed = copy.copy(stored)
    fields = [f for f in model._meta.concrete_fields if not f.is_relation and not f.primary_key]
    for f in fields:
        if f.column not in keys:
            setattr(changed, f.attname, _other(f, getattr(stored, f.attname)))
    write(changed)
    row = model._default_manager.get(pk=stored.pk)
    for f in fields:
        expected = (
            stored if f.column in keys or f.column not in schedules.COLUMNS[statement] else changed
        )
        value = getattr(row, f.attname)
        assert value == getattr(expected, f.attname), (statement, f.column)
        if expected is changed:
            assert value != getattr(stored, f.attname), (statement, f.column)
