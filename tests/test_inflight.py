"""The one owner of a replica's in-flight runs: its states and transitions."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta
from uuid import uuid4

from django_jobs.store import Lease
from django_jobs.worker.inflight import ActiveRun, CancelReason, InFlight, RunState

from .factories import T0, ScheduleFactory


def a_run(token: int = 1) -> ActiveRun:
    lease = Lease(
        occurrence_id=uuid4(),
        token=token,
        owner="r",
        expires_at=T0 + timedelta(seconds=30),
        schedule_id=1,
        tenant="",
        scheduled_at=T0,
        attempt=1,
        trigger="schedule",
    )
    return ActiveRun(lease=lease, schedule=ScheduleFactory.build(), deadline=T0)


def successor(run: ActiveRun, expires_at: datetime) -> ActiveRun:
    """The run a later claim of ``run``'s occurrence puts on the books: the next token."""
    lease = replace(run.lease, token=run.lease.token + 1, expires_at=expires_at)
    return ActiveRun(lease=lease, schedule=run.schedule, deadline=T0)


def test_a_run_goes_claimed_running_writing_and_off_the_books() -> None:
    pokes: list[None] = []
    inflight = InFlight(on_change=lambda: pokes.append(None))
    run = a_run()
    inflight.add(run, T0)
    assert run.state == RunState.CLAIMED
    assert inflight.running() == [run]

    assert inflight.start(run, T0 + timedelta(minutes=5))
    assert (run.state, run.deadline) == (RunState.RUNNING, T0 + timedelta(minutes=5))
    inflight.hand_over(run)
    assert inflight.in_state(RunState.WRITING) == [run]
    assert inflight.running() == []
    assert inflight.to_keep() == [run]  # its completion is unwritten: keep its lease

    assert inflight.finish(run) is True
    assert len(inflight) == 0
    assert pokes  # the loop is woken: a thread is free


def test_a_run_cancelled_before_it_started_never_starts() -> None:
    inflight = InFlight()
    run = a_run()
    inflight.add(run, T0)
    inflight.cancel(run, CancelReason.SHUTDOWN, T0)
    assert inflight.start(run, T0) is False
    assert run.state == RunState.CLAIMED


def test_the_first_cancel_reason_stands() -> None:
    inflight = InFlight()
    run = a_run()
    inflight.add(run, T0)
    assert inflight.cancel(run, CancelReason.OUTAGE, T0) is True
    inflight.lose(run, T0 + timedelta(seconds=1))
    assert (run.reason, run.cancelled_at) == (CancelReason.OUTAGE, T0)
    assert run.lost
    assert inflight.to_keep() == []  # a refused lease is not renewed again


def test_an_abandoned_run_is_off_the_books_and_its_late_finish_is_not_counted() -> None:
    inflight = InFlight()
    run = a_run()
    inflight.add(run, T0)
    inflight.start(run, T0)
    assert inflight.abandon(run) is True
    assert run.abandoned
    assert len(inflight) == 0
    assert inflight.finish(run) is False
    assert inflight.abandon(run) is False  # once only


def test_a_renewal_of_an_older_token_does_not_overwrite_the_lease() -> None:
    inflight = InFlight()
    run = a_run(token=2)
    inflight.add(run, T0)
    stale = Lease(**{**run.lease.__dict__, "token": 1, "expires_at": T0 + timedelta(hours=1)})
    inflight.renewed(run, stale, T0)
    assert run.lease.token == 2
    fresh = Lease(**{**run.lease.__dict__, "expires_at": T0 + timedelta(minutes=1)})
    inflight.renewed(run, fresh, T0)
    assert run.lease.expires_at == T0 + timedelta(minutes=1)
    assert run.locked_at is None


def state_of(run: ActiveRun) -> tuple[object, Lease]:
    return run.locked_at, run.lease


def test_a_lease_held_under_the_runs_own_lock_is_confirmed_without_its_expiry() -> None:
    """The store returns a row locked by the run's own ``run.atomic()`` held but not
    extended: the run is confirmed (no claim can take a locked row over) until renewed."""
    inflight = InFlight()
    run = a_run(token=2)
    inflight.add(run, T0)
    held = Lease(**run.lease.__dict__)
    inflight.renewed(run, held, T0 + timedelta(seconds=5))
    assert run.locked_at == T0 + timedelta(seconds=5)
    extended = Lease(**{**run.lease.__dict__, "expires_at": run.lease.expires_at + timedelta(1)})
    inflight.renewed(run, extended, T0 + timedelta(seconds=10))
    assert state_of(run) == (None, extended)


def test_a_run_whose_lease_this_replicas_own_claim_took_over_stays_on_the_books_cancelled() -> None:
    """Frozen past its lease, a replica's own claim takes the lapsed lease over under a new
    token while the old run is still on its thread (the 30-minute campaign of 2026-12-08: the
    old run, replaced on the books by the new one, was never cancelled nor cut off and beat
    2.9 s past lease + grace). Both are on the books; the old one is cancelled, lease lost."""
    inflight = InFlight()
    old = a_run(token=1)
    inflight.add(old, T0)
    assert inflight.start(old, T0 + timedelta(hours=1))
    new = successor(old, old.lease.expires_at)

    inflight.add(new, T0 + timedelta(seconds=31))

    assert (old.reason, old.cancelled_at, old.lost) == (
        CancelReason.LEASE_LOST,
        T0 + timedelta(seconds=31),
        True,
    )
    assert old.cancel.is_set()
    assert (new.reason, new.lost) == (None, False)
    assert inflight.running() == [old, new]
    assert inflight.to_keep() == [new]
    assert inflight.finish(new)
    assert inflight.running() == [old], "the new run's end leaves the old one to be cut off"
    assert inflight.finish(old)
    assert len(inflight) == 0
