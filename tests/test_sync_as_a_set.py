"""``jobs sync`` as a set: a handful of statements whatever the number of declarations, no
row locked that does not change, and a start-up sync skipped when the declared set is
unchanged (``services.sync_if_changed``)."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from django_jobs import at, every
from django_jobs.models import AuditRecord, Limit, Runbook, Schedule, SyncState
from django_jobs.services import fingerprint, sync_if_changed, sync_schedules
from django_jobs.worker.planning import plan_due

from .concurrency import on_own_connection, run_together, wait_until
from .factories import T0, ScheduleFactory, declaration
from .storeutil import claim

pytestmark = pytest.mark.django_db


def one_offs(count: int, **fields):
    """``count`` declared one-offs, all due at T0 + 1 minute."""
    return [
        declaration(f"burst.{n:05d}", timing=at(T0 + timedelta(minutes=1)), **fields)
        for n in range(count)
    ]


def xmins() -> dict[int, str]:
    """Each schedule row's xmin: the transaction that wrote its current version."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT id, xmin::text FROM django_jobs_schedule")
        return dict(cursor.fetchall())


def test_a_sync_of_500_new_declarations_takes_a_handful_of_statements() -> None:
    with CaptureQueriesContext(connection) as queries:
        report = sync_schedules(one_offs(500), now=T0)
    assert len(report.created) == 500
    assert (Schedule.objects.count(), Limit.objects.count(), Runbook.objects.count()) == (
        500,
        500,
        1500,
    )
    assert AuditRecord.objects.filter(action="schedule.created").count() == 500
    # Lock, consumed one-offs, the read of records, Limits and runbooks, the ids, four
    # copies, the sync state (a read and a write), the notify, and the savepoints.
    assert len(queries) <= 20, [q["sql"][:80] for q in queries]


def test_an_unchanged_sync_of_500_reads_and_writes_no_schedule_row() -> None:
    declared = one_offs(500)
    sync_schedules(declared, now=T0)
    before = xmins()
    with CaptureQueriesContext(connection) as queries:
        report = sync_schedules(declared, now=T0 + timedelta(seconds=10))
    assert len(report.unchanged) == 500
    assert (report.created, report.updated, report.runbooks) == ([], [], [])
    assert xmins() == before, "an unchanged sync wrote a schedule row"
    assert len(queries) <= 12, [q["sql"][:80] for q in queries]


def test_a_changed_declaration_among_many_is_the_only_row_written() -> None:
    declared = one_offs(50)
    sync_schedules(declared, now=T0)
    before = xmins()
    declared[7] = declaration("burst.00007", timing=at(T0 + timedelta(minutes=2)))
    report = sync_schedules(declared, now=T0 + timedelta(seconds=10))
    assert report.updated == ["burst.00007"]
    after = xmins()
    changed = {pk for pk in before if before[pk] != after[pk]}
    assert changed == {Schedule.objects.get(key="burst.00007").pk}
    record = AuditRecord.objects.get(action="schedule.timing_changed")
    assert record.after == {"run_at": (T0 + timedelta(minutes=2)).isoformat()}


@pytest.mark.django_db(transaction=True)  # the sync holds its transaction on another connection
def test_a_sync_in_progress_keeps_no_due_occurrence_from_being_claimed() -> None:
    """The straggler of issue 15: a replica's start-up sync locked every schedule row it
    compared until it committed, and a claim skips a locked schedule (overlap ``skip``): the
    occurrences whose rows it had locked first started only when it committed, a minute
    later. An unchanged sync now locks nothing."""
    declared = one_offs(200)
    sync_schedules(declared, now=T0)
    plan_due(now=T0 + timedelta(minutes=1))
    synced, release = threading.Event(), threading.Event()

    @on_own_connection
    def sync_and_hold() -> None:
        with transaction.atomic():
            sync_schedules(declared, now=T0 + timedelta(minutes=1))
            synced.set()
            release.wait(timeout=60)  # its transaction (and its locks) stay open meanwhile

    holder = threading.Thread(target=sync_and_hold)
    holder.start()
    try:
        wait_until(synced.is_set, timeout=30, what="the sync to finish its statements")
        leases = claim("r1", T0 + timedelta(minutes=1), limit=500)
    finally:
        release.set()
        holder.join(timeout=30)
    assert len(leases) == 200


def test_the_start_up_sync_is_skipped_when_the_declared_set_is_unchanged() -> None:
    declared = one_offs(20)
    first = sync_if_changed(declared, now=T0, by="r1")
    assert (len(first.created), first.skipped) == (20, False)
    state = SyncState.objects.get()
    assert (state.fingerprint, state.schedules, state.synced_by) == (
        fingerprint(declared),
        20,
        "r1",
    )
    again = sync_if_changed(declared, now=T0 + timedelta(minutes=1), by="r2")
    assert again.skipped
    assert SyncState.objects.get().synced_by == "r1"
    declared[3] = declaration("burst.00003", timing=every(timedelta(hours=1)))
    changed = sync_if_changed(declared, now=T0 + timedelta(minutes=2), by="r3")
    assert (changed.skipped, changed.updated) == (False, ["burst.00003"])


def test_jobs_sync_compares_in_full_even_when_the_fingerprint_matches() -> None:
    """A record changed behind the declarations' back (a deleted runbook) is put right by
    ``jobs sync``, which never skips; the start-up sync would skip it."""
    declared = one_offs(3)
    sync_schedules(declared, now=T0)
    Runbook.objects.filter(schedule__key="burst.00001", kind="replay").delete()
    assert sync_if_changed(declared, now=T0, by="r1").skipped
    report = sync_schedules(declared, now=T0)
    assert report.runbooks == ["burst.00001"]
    assert Runbook.objects.filter(schedule__key="burst.00001").count() == 3


def test_the_fingerprint_changes_with_any_declared_field_and_not_with_order() -> None:
    declared = one_offs(3)
    assert fingerprint(declared) == fingerprint(list(reversed(declared)))
    owner = [
        *declared[:2],
        declaration(
            "burst.00002", timing=declared[2].timing, **{"operating_owner": "someone else"}
        ),
    ]
    retention = [
        *declared[:2],
        declaration("burst.00002", timing=declared[2].timing, retention=timedelta(days=1)),
    ]
    assert len({fingerprint(declared), fingerprint(owner), fingerprint(retention)}) == 3


@pytest.mark.django_db(transaction=True)  # each replica's sync on its own connection
def test_replicas_started_together_run_one_sync_between_them() -> None:
    declared = one_offs(100)
    reports = run_together(
        *[lambda n=n: sync_if_changed(declared, now=T0, by=f"r{n}") for n in range(3)]
    )
    assert sorted(r.skipped for r in reports) == [False, True, True]
    assert AuditRecord.objects.filter(action="schedule.created").count() == 100


def test_a_deploy_of_500_declarations_due_tomorrow_leaves_the_first_plan_pass_to_due_work() -> None:
    """A synced record is due for planning at its first instant, not at once: the first plan
    pass after the deploy looks at the one schedule that is due, not at 50 of the 500 new
    records (which used to come first, being older, and left the due one for a later pass)."""
    tomorrow = T0 + timedelta(days=1)
    sync_schedules(
        [declaration(f"later.{n:05d}", timing=at(tomorrow)) for n in range(500)],
        now=T0 - timedelta(minutes=1),
    )
    due_now = ScheduleFactory.create(next_due_at=T0)
    assert set(Schedule.objects.exclude(pk=due_now.pk).values_list("next_due_at", flat=True)) == {
        tomorrow
    }
    first = plan_due(now=T0, limit=50)
    assert (first.schedules, first.planned) == (1, 1)
    assert due_now.occurrences.get().scheduled_at == T0
