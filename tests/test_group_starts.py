"""Group commit of starts (``worker/starts.py``): run threads starting runs claimed ahead mark
them started together, each committed before its handler may run. Real threads, each on its
own PostgreSQL connection."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta

import pytest
from django.db import connection, transaction

from django_jobs import store
from django_jobs.models import Attempt, AttemptOutcome, Occurrence
from django_jobs.store import Lease
from django_jobs.testing import FakeClock
from django_jobs.worker.starts import Starts

from .concurrency import backends_waiting_on_locks, on_own_connection, wait_until
from .factories import T0, ScheduleFactory
from .storeutil import claim, plan

pytestmark = pytest.mark.django_db(transaction=True)

THREADS = 6


def claimed_ahead(count: int) -> list[Lease]:
    """``count`` occurrences claimed ahead of a free thread: their attempts ``claimed``."""
    for _ in range(count):
        plan(ScheduleFactory.create(), T0, now=T0)
    leases = claim("ahead", T0, limit=count, start_now=0)
    assert len(leases) == count
    return leases


def attempt(lease: Lease) -> Attempt:
    """``lease``'s attempt: read from its occurrence while current, else its history row."""
    row = Occurrence.objects.get(pk=lease.occurrence_id)
    return next(a for a in row.attempts_so_far() if a.fencing_token == lease.token)


def writer_of(lease: Lease) -> str:
    """The transaction that last wrote ``lease``'s occurrence row (a start is written there)."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT xmin::text FROM {Occurrence._meta.db_table}"
            " WHERE id = %s AND fencing_token = %s",
            [lease.occurrence_id, lease.token],
        )
        return str(cursor.fetchone()[0])


def test_starts_asked_while_a_write_is_under_way_are_written_together() -> None:
    first, *others = claimed_ahead(THREADS)
    starts = Starts(FakeClock(T0))
    locked, release = threading.Event(), threading.Event()

    def hold_first_attempt() -> None:
        # Another session locks the first run's occurrence, so the first write waits on it.
        with transaction.atomic():
            Occurrence.objects.select_for_update().get(pk=first.occurrence_id)
            locked.set()
            release.wait(timeout=30)

    with ThreadPoolExecutor(THREADS + 1) as pool:
        holder = pool.submit(on_own_connection(hold_first_attempt))
        assert locked.wait(timeout=30)

        def start(lease: Lease) -> None:
            on_own_connection(lambda: starts.mark(lease))()

        writes = [pool.submit(start, first)]
        wait_until(lambda: backends_waiting_on_locks() == 1, what="the first write to block")
        for lease in others:
            writes.append(pool.submit(start, lease))
        wait_until(lambda: starts.waiting() == len(others), what="the others to queue")
        release.set()
        holder.result(timeout=30)
        for write in writes:
            write.result(timeout=30)

    assert {attempt(lease).outcome for lease in [first, *others]} == {AttemptOutcome.RUNNING}
    # The first write held one start; every start asked meanwhile went in one more.
    assert len({writer_of(lease) for lease in others}) == 1
    assert writer_of(first) != writer_of(others[0])


def test_a_start_is_committed_when_mark_returns() -> None:
    (lease,) = claimed_ahead(1)
    on_own_connection(lambda: Starts(FakeClock(T0)).mark(lease))()
    # Read on this test's own connection, another session: the write is committed.
    assert attempt(lease).outcome == AttemptOutcome.RUNNING
    assert attempt(lease).started_at == T0


class BrokenClock(FakeClock):
    """A clock whose reading the store refuses (naive), so a write fails before it is sent."""

    def now(self) -> datetime:
        return datetime(2027, 1, 1)  # noqa: DTZ001 (naive on purpose)


def test_a_failed_write_raises_to_its_thread_and_the_next_write_goes_on() -> None:
    leases = claimed_ahead(3)
    starts = Starts(BrokenClock(T0))
    for lease in leases:
        with pytest.raises(ValueError, match="now"):
            starts.mark(lease)
    assert {attempt(lease).outcome for lease in leases} == {AttemptOutcome.CLAIMED}
    starts.clock = FakeClock(T0 + timedelta(seconds=1))
    starts.mark(leases[0])
    assert attempt(leases[0]).outcome == AttemptOutcome.RUNNING
    assert starts.waiting() == 0


def test_a_start_whose_lease_was_taken_over_is_not_recorded_and_the_others_are() -> None:
    (stale,) = claimed_ahead(1)
    later = T0 + timedelta(minutes=5)  # past the stale lease
    (current,) = claim("next", later, limit=1)  # taken over, never started
    plan(ScheduleFactory.create(), later, now=later)
    (kept,) = claim("ahead", later, limit=1, start_now=0)
    assert store.mark_started([stale, kept], now=later) == {kept.occurrence_id}
    assert attempt(stale).outcome == AttemptOutcome.UNSTARTED
    assert attempt(kept).outcome == AttemptOutcome.RUNNING
    assert Starts(FakeClock(later)).mark(stale) is False
    assert attempt(current).outcome == AttemptOutcome.RUNNING  # the new holder's, untouched
