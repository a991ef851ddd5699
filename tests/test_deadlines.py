"""The deadline watch's decisions (``worker/deadlines.py``), on the injected clock: no store
call stands in front of any of them."""

from __future__ import annotations

from datetime import timedelta

import pytest

from django_jobs.registry import Registry
from django_jobs.worker.inflight import ActiveRun, CancelReason
from django_jobs.worker.leases import confirm_margin, renew_every
from django_jobs.worker.loop import Worker
from django_jobs.worker.supervision import Role

from .factories import T0
from .test_inflight import a_run, successor

LEASE = timedelta(seconds=30)  # the defaults: lease 30 s, grace 10 s
GRACE = timedelta(seconds=10)


@pytest.fixture
def worker(clock):
    clock.set(T0)
    worker = Worker(replica_id="watch", clock=clock, jobs=Registry(), listen=False)
    yield worker
    worker.close()


def running(worker: Worker, *, deadline=T0 + timedelta(hours=1)):
    run = a_run()  # its lease expires at T0 + 30 s
    worker.inflight.add(run, T0)
    assert worker.inflight.start(run, deadline)
    return run


def cancelled(run: ActiveRun) -> tuple[object, object]:
    return run.reason, run.cancelled_at


def test_the_margin_is_one_renewal_interval_plus_the_grace() -> None:
    assert renew_every(LEASE, GRACE) == timedelta(seconds=5)
    assert confirm_margin(LEASE, GRACE) == timedelta(seconds=15)


def test_an_unconfirmed_lease_is_cancelled_at_its_margin_without_the_store(worker, clock) -> None:
    run = running(worker)
    clock.set(T0 + timedelta(seconds=14))
    worker._deadlines.enforce()
    assert run.reason is None
    clock.set(T0 + timedelta(seconds=15))  # expiry 30 s, less 5 s + 10 s
    worker._deadlines.enforce()
    # No outage is known to the replica: unconfirmed (given back if it stops, never excused).
    assert cancelled(run) == (CancelReason.UNCONFIRMED, clock.now())


def test_a_row_held_under_the_runs_own_lock_is_not_cancelled_while_the_keeper_sees_it(
    worker, clock
) -> None:
    """A long ``run.atomic()``: renewals find the row locked by the run itself and return it
    held but not extended; no claim can take a locked row over, so its margin counts from
    the keeper's last look, two renewal intervals."""
    run = running(worker)
    clock.set(T0 + timedelta(seconds=25))
    worker.inflight.renewed(run, run.lease, clock.now())  # held, not extended
    clock.set(T0 + timedelta(seconds=34))  # past the lease's own margin and expiry
    worker._deadlines.enforce()
    assert run.reason is None
    clock.set(T0 + timedelta(seconds=35))  # the keeper has not looked for 2 intervals
    worker._deadlines.enforce()
    assert cancelled(run)[0] == CancelReason.UNCONFIRMED


def test_a_run_cancelled_for_shutdown_gives_the_watch_no_instant(worker, clock) -> None:
    """Its deadline and margin are the drain's now: a past instant would make the watch spin."""
    run = running(worker, deadline=T0 + timedelta(seconds=1))
    assert len(worker._deadlines.next_instants()) == 2
    worker.inflight.cancel(run, CancelReason.SHUTDOWN, T0)
    assert worker._deadlines.next_instants() == []


def test_a_loop_that_crashed_once_is_alive_again_after_a_pass(worker) -> None:
    assert worker.supervisor.crashed(Role.LOOP, RuntimeError("a bug in one pass"))
    assert worker.threads()["loop"] == "restarting"
    worker.supervisor.recovered(Role.LOOP)
    assert worker.threads()["loop"] == "alive"


def test_retention_that_keeps_crashing_is_dead_but_the_replica_serves_on(worker) -> None:
    """Retention guards no run: its death is reported (jobs health fails), not a stop."""
    for n in range(4):
        worker.supervisor.crashed(Role.RETENTION, RuntimeError(f"boom {n}"))
    assert worker.threads()["retention"] == "dead"
    assert not worker.stopping.is_set()
    assert worker.exit_code == 0


def test_a_fresh_inline_worker_starts_no_guard_threads(inline_worker) -> None:
    inline = inline_worker(Registry(), replica_id="inline")
    inline._ensure_keeper()
    assert inline.threads() == {}


def test_a_run_whose_lease_this_replica_took_over_is_cut_off_after_the_grace(worker, clock) -> None:
    """A replica frozen past a run's lease claims that occurrence again itself on waking: the
    old run, still on its thread, is cancelled when the new run goes on the books and cut off
    a grace later if it goes on; the new run is left alone (the 30-minute campaign of
    2026-12-08: with the new run replacing the old one on the books, the old handler was never
    cut off)."""
    old = running(worker)
    clock.advance(LEASE + timedelta(seconds=1))  # frozen: the lease lapsed, taken over here
    new = successor(old, clock.now() + LEASE)
    worker.inflight.add(new, clock.now())
    assert worker.inflight.start(new, clock.now() + timedelta(hours=1))
    assert (old.reason, old.lost) == (CancelReason.LEASE_LOST, True)

    clock.advance(GRACE)
    worker._deadlines.enforce(record=lambda write: None)  # the attempt's write: not here

    assert old.abandoned
    assert worker._deadlines.cut_off_count == 1
    assert (new.reason, new.abandoned) == (None, False)
