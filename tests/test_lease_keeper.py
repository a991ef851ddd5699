"""The lease keeper: renewal that cancels a run whose lease is gone, and that never waits behind a
sibling run's ``run.atomic()`` lock. Real PostgreSQL, real connections (one per thread)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import replace
from datetime import timedelta

import pytest
from django.db import transaction
from structlog.testing import capture_logs

from django_jobs import store
from django_jobs.conf import get_settings
from django_jobs.models import Attempt, AttemptOutcome, Occurrence
from django_jobs.registry import Registry
from django_jobs.worker.inflight import ActiveRun, CancelReason, InFlight, RunState
from django_jobs.worker.leases import LeaseKeeper
from django_jobs.worker.loop import EXIT_RESTART, Worker
from django_jobs.worker.outage import OutageLog
from django_jobs.worker.run import Run

from .concurrency import on_own_connection, wait_until
from .factories import T0, ScheduleFactory
from .storeutil import LEASE, claim, plan

pytestmark = pytest.mark.django_db(transaction=True)


def keeper_for(owner: str, clock, inflight: InFlight) -> LeaseKeeper:
    return LeaseKeeper(
        owner=owner, clock=clock, lease_for=LEASE, inflight=inflight, outage=OutageLog(clock)
    )


def running(inflight: InFlight, lease: store.Lease, clock) -> ActiveRun:
    run = ActiveRun(lease=lease, schedule=ScheduleFactory.build(), deadline=clock.now())
    inflight.add(run, clock.now())
    assert inflight.start(run, clock.now() + timedelta(hours=1))
    return run


def one_run_held(clock) -> tuple[store.Lease, InFlight, ActiveRun, LeaseKeeper]:
    """A new schedule's occurrence at T0, claimed by ``keeper`` and running on its books."""
    plan(ScheduleFactory.create(), T0, now=T0)
    clock.set(T0)
    (lease,) = claim("keeper", clock.now())
    inflight = InFlight()
    run = running(inflight, lease, clock)
    return lease, inflight, run, keeper_for("keeper", clock, inflight)


def test_a_refused_renewal_cancels_the_run_and_stops_renewing_it(clock) -> None:
    lease, inflight, run, keeper = one_run_held(clock)

    clock.advance(LEASE / 3)
    keeper.renew_once()  # still held: renewed, not cancelled
    assert not run.cancel.is_set()
    assert run.lease.expires_at == clock.now() + LEASE

    clock.advance(LEASE + timedelta(seconds=1))  # the keeper missed its turns
    (taken,) = claim("other", clock.now())
    with capture_logs() as logs:
        keeper.renew_once()

    assert run.cancel.is_set()
    assert run.reason == CancelReason.LEASE_LOST
    assert run.lost
    assert inflight.to_keep() == []
    assert [e["event"] for e in logs] == ["lease.lost"]
    assert Occurrence.objects.get(pk=lease.occurrence_id).fencing_token == taken.token


def test_a_run_whose_lease_this_replica_took_over_is_stopped(clock) -> None:
    """The replica's own claim takes over the lapsed lease of a run it still has on a thread
    (it was frozen past the lease): the old run is cancelled (lease lost) when the new one is
    put on the books, and the keeper renews the new lease only, never the old run's."""
    first, inflight, old, keeper = one_run_held(clock)

    clock.advance(LEASE + timedelta(seconds=1))  # frozen: no renewal, the lease lapsed
    (second,) = claim("keeper", clock.now())
    assert second.token > first.token
    new = running(inflight, second, clock)

    assert (old.reason, old.lost) == (CancelReason.LEASE_LOST, True)
    assert old.cancel.is_set()
    assert not new.cancel.is_set()
    keeper.renew_once()
    assert new.lease.expires_at == clock.now() + LEASE
    assert old.lease == first, "the old run is not renewed under its successor's lease"
    assert inflight.to_keep() == [new]
    assert inflight.running() == [old, new], "the old run stays watched until it ends"


def test_a_lost_lease_is_cut_off_after_the_grace_when_its_handler_ignores_cancellation(
    clock,
) -> None:
    """The loop, not the handler, ends a run whose lease is gone: the replica exits 3."""
    release = threading.Event()
    started = threading.Event()

    def stubborn(run: Run) -> None:
        started.set()
        release.wait(timeout=60)  # never looks at run.cancelled

    jobs = Registry()
    jobs.register("tests.stubborn", stubborn)
    schedule = ScheduleFactory.create(job="tests.stubborn", timeout=timedelta(hours=1))
    plan(schedule, T0, now=T0)
    clock.set(T0)
    settings = replace(get_settings(), LEASE_SECONDS=LEASE.total_seconds(), CLAIM_AHEAD=0)
    worker = Worker(replica_id="stalled", clock=clock, jobs=jobs, listen=False, settings=settings)
    try:
        assert worker.step() == (1, 1)
        wait_until(started.is_set, what="the stubborn handler to start")
        clock.advance(LEASE + timedelta(seconds=1))  # as if this replica had been paused
        on_own_connection(lambda: claim("other", clock.now()))()
        with capture_logs() as logs:
            worker._keeper.renew_once()
            worker._enforce_timeouts()  # within the grace: cancelled, not yet cut off
            assert worker.exit_code == 0
            clock.advance(timedelta(seconds=settings.TIMEOUT_GRACE_SECONDS))
            worker._enforce_timeouts()
        assert worker.exit_code == EXIT_RESTART
        assert worker.stopping.is_set()
        cut = [e for e in logs if e["event"] == "run.cut_off"]
        assert [e["reason"] for e in cut] == [CancelReason.LEASE_LOST]
        assert worker.inflight.in_state(RunState.RUNNING) == []
        (row,) = Occurrence.objects.filter(schedule=schedule)
        assert [a.outcome for a in row.attempts_so_far()] == [AttemptOutcome.LEASE_LOST, "running"]
    finally:
        release.set()
        worker.close()


@contextlib.contextmanager
def atomic_block_holding(lease: store.Lease) -> Iterator[None]:
    """What ``run.atomic()`` does for a run, on a connection of its own: hold the occurrence's
    row (``store.hold``) in an open transaction, for as long as the ``with`` block lasts."""
    locked, finish = threading.Event(), threading.Event()

    def hold() -> None:
        with transaction.atomic():
            assert store.hold(lease)
            locked.set()
            finish.wait(timeout=60)

    holder = threading.Thread(target=on_own_connection(hold))
    holder.start()
    try:
        assert locked.wait(timeout=10)
        yield
    finally:
        finish.set()
        holder.join(timeout=10)


@pytest.fixture
def two_leases(clock) -> tuple[store.Lease, store.Lease]:
    schedule = ScheduleFactory.create()
    plan(schedule, T0, T0 + timedelta(seconds=1), now=T0)
    clock.set(T0 + timedelta(seconds=2))
    first, second = claim("keeper", clock.now())
    return first, second


def test_a_long_atomic_block_in_one_run_does_not_let_a_siblings_lease_expire(
    clock, two_leases
) -> None:
    in_block, sibling = two_leases
    with atomic_block_holding(in_block):
        inflight = InFlight()
        runs = [running(inflight, lease, clock) for lease in (in_block, sibling)]
        keeper = keeper_for("keeper", clock, inflight)
        clock.advance(LEASE / 3)
        renewal = threading.Thread(target=on_own_connection(keeper.renew_once))
        renewal.start()
        renewal.join(timeout=10)
        assert not renewal.is_alive(), "the renewal waited behind the other run's lock"

        expiry = dict(Occurrence.objects.values_list("id", "lease_expires_at"))
        assert expiry[sibling.occurrence_id] == clock.now() + LEASE  # renewed
        assert expiry[in_block.occurrence_id] == in_block.expires_at  # held, not extended
        assert not any(run.cancel.is_set() for run in runs)  # neither counts as lost


def test_a_shutdown_release_skips_a_row_locked_by_a_stuck_atomic_block(clock, two_leases) -> None:
    in_block, sibling = two_leases
    with atomic_block_holding(in_block):
        result: list[store.WriteResult] = []
        release = threading.Thread(
            target=on_own_connection(
                lambda: result.append(store.release([in_block, sibling], now=clock.now()))
            )
        )
        release.start()
        release.join(timeout=10)
        assert not release.is_alive(), "the release waited behind the stuck run's lock"
        assert result[0].accepted == {sibling.occurrence_id}
        (attempt,) = Occurrence.objects.get(pk=in_block.occurrence_id).attempts_so_far()
        assert attempt.outcome == AttemptOutcome.RUNNING  # untouched: left to expire


def test_an_operators_cancel_running_stops_the_run_through_its_refused_renewal(clock) -> None:
    """``jobs disable --cancel-running`` ends the lease in the store; the keeper's next renewal
    is refused and cancels the run, which the loop cuts off like any lost lease."""
    schedule = ScheduleFactory.create()
    plan(schedule, T0, now=T0)
    clock.set(T0)
    (lease,) = claim("keeper", clock.now())
    inflight = InFlight()
    run = running(inflight, lease, clock)

    cancelled = store.cancel_running(schedule.pk, tenant=schedule.tenant, now=clock.now())
    assert cancelled == [lease.occurrence_id]
    keeper_for("keeper", clock, inflight).renew_once()

    assert run.cancel.is_set()
    assert run.reason == CancelReason.LEASE_LOST
    assert Attempt.objects.get(occurrence_id=lease.occurrence_id).outcome == "cancelled"
