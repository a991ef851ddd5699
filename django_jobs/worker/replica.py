"""This replica's identity and presence: its id, its heartbeat row, its clock aligned with the
database's so all replicas share one timeline."""

from __future__ import annotations

import os
import secrets
import socket
from datetime import datetime, timedelta

import structlog

from .. import store
from ..clock import Clock, SystemClock
from ..models import ReplicaState
from .alerts import declare_gone
from .inflight import InFlight

log = structlog.get_logger("django_jobs.worker")

# How many round trips ``sync_clock`` measures; it keeps the shortest.
CLOCK_SAMPLES = 3
# A replica silent for this many heartbeats (and at least a lease, so its leases have
# lapsed and its work can be taken over) is declared gone (``signals.replica_gone``).
GONE_AFTER_HEARTBEATS = 3


def default_replica_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


def sync_clock(clock: Clock, samples: int = CLOCK_SAMPLES) -> None:
    """Align a SystemClock with the database's (any other clock is left alone), keeping the
    sample with the shortest round trip (``SystemClock.align``): its error is at most half
    that round trip, logged as ``error_bound_ms``."""
    if not isinstance(clock, SystemClock):
        return
    round_trip = clock.align(store.database_clock, samples=samples)
    log.info(
        "clock.synced",
        offset_ms=round(clock.offset.total_seconds() * 1000, 2),
        error_bound_ms=round(round_trip.total_seconds() * 500, 2),  # half, in ms
    )


class Heartbeat:
    """The replica's row in the store: its state and load, written every ``every``. With
    ``lease`` given, each heartbeat also declares gone the replicas silent for
    ``GONE_AFTER_HEARTBEATS`` heartbeats and at least ``lease`` (draining ones: plus
    ``drain``, the longest a drain waits without a heartbeat), while a receiver of
    ``replica_gone`` listens."""

    def __init__(
        self,
        *,
        replica_id: str,
        clock: Clock,
        started_at: datetime,
        concurrency: int,
        inflight: InFlight,
        every: timedelta,
        lease: timedelta | None = None,
        drain: timedelta = timedelta(0),
    ) -> None:
        self.replica_id, self.clock, self.started_at = replica_id, clock, started_at
        self.concurrency, self.inflight, self.every = concurrency, inflight, every
        self.next_at = started_at  # when the next heartbeat is due
        self.silent = None if lease is None else max(every * GONE_AFTER_HEARTBEATS, lease)
        self.drain = drain

    def beat(
        self, state: ReplicaState, *, force: bool = False, threads: dict[str, str] | None = None
    ) -> None:
        """Record the replica's state and its threads' (``supervision.Status`` by role), if a
        heartbeat is due (or ``force``)."""
        now = self.clock.now()
        if not force and now < self.next_at:
            return
        store.heartbeat(
            self.replica_id,
            host=socket.gethostname(),
            pid=os.getpid(),
            started_at=self.started_at,
            now=now,
            state=state.value,
            concurrency=self.concurrency,
            running=len(self.inflight),
            threads=threads or {},
        )
        self.next_at = now + self.every
        if self.silent is not None and state == ReplicaState.RUNNING:
            declare_gone(
                by=self.replica_id,
                now=now,
                silent=self.silent,
                draining=self.silent + self.drain,
            )


__all__ = [
    "CLOCK_SAMPLES",
    "GONE_AFTER_HEARTBEATS",
    "Heartbeat",
    "default_replica_id",
    "sync_clock",
]
