"""Row versions per occurrence on the hot path: what plan, claim and completion write, table by
table, counted by PostgreSQL itself (``pg_stat_get_xact_tuples_inserted`` and ``_updated``
of the current transaction: every inserted row and every update, HOT or not, is one row
version). The occurrence row is inserted by the plan pass and updated by its claim and its
completion; the attempt lives on it until it ends, and its ``Attempt`` (history) row is
inserted then, once (#38: a claim used to insert it and the completion to update it). The
schedule row is written by the plan pass, and for an overlap ``skip``/``queue``
occurrence by its claim, which sets ``running_occurrence`` (the guard that keeps two of its runs
apart). A completion never writes it: the guard is left on the occurrence it guarded, which
no longer holds a claim back once it has ended.

docs/performance.md ("Row versions") quotes these figures.
"""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

import pytest
from django.db import connection

from django_jobs import store
from django_jobs.models import Occurrence, OccurrenceState, Schedule
from django_jobs.registry import Registry

from .factories import T0, ScheduleFactory
from .storeutil import claim, plan

N = 12


def row_versions() -> Counter[str]:
    """Row versions this transaction has written so far, by django_jobs table (without the
    ``django_jobs_`` prefix): rows inserted plus rows updated."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname, pg_stat_get_xact_tuples_inserted(c.oid)"
            " + pg_stat_get_xact_tuples_updated(c.oid)"
            " FROM pg_class c WHERE c.relkind = 'r' AND c.relname LIKE 'django\\_jobs\\_%%'"
        )
        return Counter(
            {name.removeprefix("django_jobs_"): count for name, count in cursor.fetchall()}
        )


def per_occurrence(overlap: str, inline_worker, clock) -> dict[str, float]:
    """Plan, claim and complete one occurrence of each of ``N`` due schedules of ``overlap``
    with a real (inline) worker pass; the row versions each occurrence cost, by table."""
    jobs = Registry()
    jobs.register("tests.noop", lambda run: None)
    for _ in range(N):
        ScheduleFactory.create(overlap=overlap, next_due_at=T0)
    clock.set(T0 + timedelta(seconds=1))
    before = row_versions()
    summary = inline_worker(jobs).run_pass()
    written = row_versions() - before
    assert summary.claimed == N
    assert Occurrence.objects.filter(state=OccurrenceState.COMPLETED).count() == N
    return {table: count / N for table, count in sorted(written.items())}


@pytest.mark.django_db
def test_an_allow_occurrence_writes_its_schedule_row_only_when_it_is_planned(
    inline_worker, clock
) -> None:
    figures = per_occurrence("allow", inline_worker, clock)
    # 4 row versions an occurrence, and its schedule's one per plan batch (one instant each
    # here: ``test_a_recurring_allow_schedule_costs_four_versions_an_occurrence_and_one_a_batch``).
    assert figures == {"occurrence": 3, "attempt": 1, "schedule": 1}, figures


@pytest.mark.django_db
def test_a_skip_occurrence_writes_its_schedule_row_to_guard_its_run(inline_worker, clock) -> None:
    figures = per_occurrence("skip", inline_worker, clock)
    # Planned (recovery point, next due), claimed (running_occurrence set); the completion
    # leaves the guard on the ended occurrence.
    assert figures == {"occurrence": 3, "attempt": 1, "schedule": 2}, figures


def schedule_version(schedule: Schedule) -> tuple[str, str]:
    """The schedule row's current version: the transaction that wrote it and where it is."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT xmin::text, ctid::text FROM {Schedule._meta.db_table} WHERE id = %s",
            [schedule.pk],
        )
        ((xmin, ctid),) = cursor.fetchall()
        return str(xmin), str(ctid)


@pytest.mark.django_db(transaction=True)
def test_claim_and_completion_of_an_allow_occurrence_leave_the_schedule_row_as_it_was() -> None:
    """Each store call commits on its own here, so an update of the schedule row by the claim
    or the completion would show as a new ``xmin`` (and a new ``ctid``, HOT or not)."""
    schedule = ScheduleFactory.create(overlap="allow")
    plan(schedule, T0, now=T0)
    planned = schedule_version(schedule)
    (lease,) = claim("w", T0 + timedelta(seconds=3))
    assert schedule_version(schedule) == planned
    assert store.complete([lease], now=T0 + timedelta(seconds=9)).accepted
    assert schedule_version(schedule) == planned
    assert Occurrence.objects.get().state == OccurrenceState.COMPLETED


@pytest.mark.django_db(transaction=True)
def test_a_skip_occurrences_claim_writes_its_guard_and_its_completion_leaves_the_row() -> None:
    """The overlap guard is kept: the claim sets ``running_occurrence``, a new version of the
    schedule row; the completion writes no version, and the next occurrence of the schedule
    is claimed past the guard left on the ended one."""
    schedule = ScheduleFactory.create(overlap="skip")
    plan(schedule, T0, now=T0)
    planned = schedule_version(schedule)
    (lease,) = claim("w", T0 + timedelta(seconds=3))
    claimed = schedule_version(schedule)
    assert claimed != planned
    schedule.refresh_from_db()
    assert schedule.running_occurrence == lease.occurrence_id
    assert store.complete([lease], now=T0 + timedelta(seconds=9)).accepted
    assert schedule_version(schedule) == claimed
    schedule.refresh_from_db()
    assert schedule.running_occurrence == lease.occurrence_id

    plan(schedule, T0 + timedelta(minutes=1), now=T0 + timedelta(minutes=1))
    (following,) = claim("w", T0 + timedelta(minutes=1, seconds=1))
    assert following.occurrence_id != lease.occurrence_id
    schedule.refresh_from_db()
    assert schedule.running_occurrence == following.occurrence_id


@pytest.mark.django_db
def test_a_recurring_allow_schedule_costs_four_versions_an_occurrence_and_one_a_batch(
    inline_worker, clock
) -> None:
    """A schedule every second, planned ``PLAN_AHEAD_SECONDS`` (30 s) ahead once its next
    instant comes within half of that (``worker.planning.due_within``), run by passes a second
    apart: each occurrence costs 4 row versions (its row inserted, claimed, completed; its
    Attempt row inserted when it ends), and its schedule's row one version a plan batch.
    docs/performance.md ("Row versions") quotes the figures."""
    jobs = Registry()
    jobs.register("tests.noop", lambda run: None)
    ScheduleFactory.create(overlap="allow", interval=timedelta(seconds=1), next_due_at=T0)
    worker = inline_worker(jobs)
    before = row_versions()
    for second in range(60):
        clock.set(T0 + timedelta(seconds=second))
        worker.run_pass()
    written = row_versions() - before
    done = Occurrence.objects.filter(state=OccurrenceState.COMPLETED).count()
    planned = Occurrence.objects.count()
    assert done == 60
    # Planned ahead but not yet due: inserted (1 version each), not yet claimed.
    ahead = planned - done
    assert written["occurrence"] == 3 * done + ahead
    assert written["attempt"] == done
    # Four plan batches in a minute: at T0 (instants to T0 + 30 s), then whenever the next
    # instant came within half the window, 15 s (T0 + 16 s, 32 s, 48 s: to T0 + 78 s).
    # Before #38, one a pass: 60.
    assert planned == 79
    assert written["schedule"] == 4, written
