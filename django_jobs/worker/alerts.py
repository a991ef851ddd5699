"""The worker's side of the alerts (``django_jobs.signals``): what it sends, once the write
that recorded each event committed.

Each event is sent by the replica whose store write recorded it, so once: a run's outcome by
the thread (or the completer) whose fenced write was accepted; a refused write by the one
refused; what a claim or a plan pass ended or took over by that claim or pass; a silent
replica by the replica whose compare-and-set declared it gone. With no receiver connected,
none of these builds anything (``signals.listening``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta

from django.dispatch import Signal

from .. import signals, store
from ..models import Schedule
from ..safe_error import SafeError
from ..signals import OccurrenceEvent, ReplicaEvent
from .inflight import ActiveRun

TAKEN_OVER = "taken_over"
FENCED_OUT = "fenced_out"


def run_event(
    active: ActiveRun,
    *,
    error: SafeError | None = None,
    reason: str = "",
    retry_at: datetime | None = None,
) -> OccurrenceEvent:
    """The event of ``active``'s attempt."""
    lease, schedule = active.lease, active.schedule
    return OccurrenceEvent(
        occurrence_id=lease.occurrence_id,
        schedule_id=lease.schedule_id,
        tenant=schedule.tenant,
        key=schedule.key,
        job=schedule.job,
        scheduled_at=lease.scheduled_at,
        attempt=lease.attempt,
        error_type=error.type if error else "",
        error=error.message if error else "",
        reason=reason,
        replica=lease.owner,
        retry_at=retry_at,
    )


def send_runs(
    signal: Signal,
    runs: Iterable[ActiveRun],
    *,
    error: SafeError | None = None,
    reason: str = "",
    retry_at: datetime | None = None,
) -> None:
    """Send ``signal`` for each of ``runs`` after commit (nothing if none listens)."""
    if signals.listening(signal):
        events = (run_event(a, error=error, reason=reason, retry_at=retry_at) for a in runs)
        signals.send_after_commit(signal, events)


def send_claimed(claimed: store.Claimed, *, replica: str) -> None:
    """What a claim ended without running (dead, refused, skipped) and the leases it took
    over from another holder."""
    if claimed.ended:
        dead = [e for e in claimed.ended if e.why in (store.WORKER_LOST, store.TENANT_MISMATCH)]
        skipped = [e for e in claimed.ended if e not in dead]
        _send_ended(signals.occurrence_dead, dead, replica=replica, dead=True)
        _send_ended(signals.occurrence_skipped, skipped, replica=replica)
    if claimed.taken_over and signals.listening(signals.lease_lost):
        signals.send_after_commit(
            signals.lease_lost,
            (_ended_event(e, reason=TAKEN_OVER, replica=e.why) for e in claimed.taken_over),
        )


def _send_ended(
    signal: Signal, ended: Sequence[store.Ended], *, replica: str, dead: bool = False
) -> None:
    if not ended or not signals.listening(signal):
        return
    events = (
        _ended_event(e, error_type=e.why, error=e.error, replica=replica)
        if dead
        else _ended_event(e, reason=e.why, replica=replica)
        for e in ended
    )
    signals.send_after_commit(signal, events)


def _ended_event(
    e: store.Ended, *, replica: str, reason: str = "", error_type: str = "", error: str = ""
) -> OccurrenceEvent:
    return OccurrenceEvent(
        occurrence_id=e.occurrence_id,
        schedule_id=e.schedule_id,
        tenant=e.tenant,
        key=e.key,
        job=e.job,
        scheduled_at=e.scheduled_at,
        attempt=e.attempt,
        error_type=error_type,
        error=error,
        reason=reason,
        replica=replica,
    )


def send_skipped(
    skipped: Sequence[store.Skipped], schedules: dict[int, Schedule], *, replica: str
) -> None:
    """The occurrences a plan write recorded skipped (``schedules``: the pass's, by id)."""
    if not skipped or not signals.listening(signals.occurrence_skipped):
        return
    events = (
        OccurrenceEvent(
            occurrence_id=s.occurrence_id,
            schedule_id=s.schedule_id,
            tenant=schedules[s.schedule_id].tenant,
            key=schedules[s.schedule_id].key,
            job=schedules[s.schedule_id].job,
            scheduled_at=s.scheduled_at,
            attempt=0,
            reason=s.reason,
            replica=replica,
        )
        for s in skipped
    )
    signals.send_after_commit(signals.occurrence_skipped, events)


def declare_gone(*, by: str, now: datetime, silent: timedelta, draining: timedelta) -> None:
    """Declare gone the replicas silent for ``silent`` (draining ones: ``draining``) and send
    ``replica_gone`` for each; only while a receiver listens (the declaration exists for the
    alert)."""
    if not signals.listening(signals.replica_gone):
        return
    gone = store.declare_gone(by=by, before=now - silent, before_draining=now - draining)
    events = (
        ReplicaEvent(
            replica_id=g.replica_id,
            host=g.host,
            pid=g.pid,
            heartbeat_at=g.heartbeat_at,
            declared_at=now,
            declared_by=by,
        )
        for g in gone
    )
    signals.send_after_commit(signals.replica_gone, events)


__all__ = [
    "FENCED_OUT",
    "TAKEN_OVER",
    "declare_gone",
    "run_event",
    "send_claimed",
    "send_runs",
    "send_skipped",
]
