"""This replica's identity and presence: its id, its heartbeat row, its clock aligned with the
database's so all replicas share one timeline.

The heartbeat is written by a thread of its own (``HeartbeatKeeper``), never by the loop, so
no heartbeat waits for a plan pass, a claim or a store call of the loop. It is written only
while the loop shows progress (``Progress``): a loop stuck for longer than
``STALL_HEARTBEATS`` heartbeats past the time it said it would be back lets the heartbeat
stop, so ``jobs health``, a liveness probe and the other replicas see a stuck loop as they
did when the loop wrote the heartbeat itself.
"""

from __future__ import annotations

import os
import secrets
import socket
import threading
import time
from datetime import datetime, timedelta

import structlog
from django.db import DatabaseError, connections

from .. import store
from ..clock import Clock, SystemClock
from ..models import ReplicaState
from .alerts import declare_gone
from .inflight import InFlight
from .outage import OutageLog, drop_connection, raise_unless_outage
from .supervision import Role, SupervisedThread, Supervisor

log = structlog.get_logger("django_jobs.worker")

# How many round trips ``sync_clock`` measures; it keeps the shortest.
CLOCK_SAMPLES = 3
# A replica silent for this many heartbeats (and at least a lease, so its leases have
# lapsed and its work can be taken over) is declared gone (``signals.replica_gone``).
GONE_AFTER_HEARTBEATS = 3
# A loop this many heartbeats late past the time it said it would be back (``Progress``) is
# stuck: its replica's heartbeat stops until it moves again.
STALL_HEARTBEATS = 3


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
        queues: list[dict[str, object]] | None = None,
    ) -> None:
        self.replica_id, self.clock, self.started_at = replica_id, clock, started_at
        self.queues = queues or []  # served queues ({"name", "concurrency"}); []: every one
        self.concurrency, self.inflight, self.every = concurrency, inflight, every
        self.next_at = started_at  # when the next heartbeat is due
        self.silent = None if lease is None else max(every * GONE_AFTER_HEARTBEATS, lease)
        self.drain = drain
        # One writer at a time (the keeper's thread, the loop's last forced beats), and no
        # ``running`` after a ``draining`` or ``stopped``.
        self._lock = threading.Lock()
        self._leaving = False

    def beat(
        self, state: ReplicaState, *, force: bool = False, threads: dict[str, str] | None = None
    ) -> None:
        """Record the replica's state and its threads' (``supervision.Status`` by role), if a
        heartbeat is due (or ``force``). Once a state other than ``running`` is written, a
        ``running`` one never is again."""
        with self._lock:
            if state == ReplicaState.RUNNING and self._leaving:
                return
            self._leaving = state != ReplicaState.RUNNING
            self._beat(state, force=force, threads=threads)

    def _beat(self, state: ReplicaState, *, force: bool, threads: dict[str, str] | None) -> None:
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
            queues=self.queues,
        )
        self.next_at = now + self.every
        if self.silent is not None and state == ReplicaState.RUNNING:
            declare_gone(
                by=self.replica_id,
                now=now,
                silent=self.silent,
                draining=self.silent + self.drain,
            )


class Progress:
    """When the loop said it would be back: ``mark`` at each turn, with how long it is going
    to wait; ``stalled`` once it is ``stall`` seconds past that. Read by the heartbeat keeper,
    on the process's monotonic clock (a duration, never an instant)."""

    def __init__(self, stall: float) -> None:
        self.stall = stall
        self._lock = threading.Lock()
        self._back_by = time.monotonic() + stall

    def mark(self, *, waiting: float = 0.0) -> None:
        """The loop moved, and is back within ``waiting`` seconds."""
        with self._lock:
            self._back_by = time.monotonic() + waiting + self.stall

    def stalled(self) -> float:
        """Seconds the loop is past the stall limit (0: it is not stalled)."""
        with self._lock:
            return max(0.0, time.monotonic() - self._back_by)


class HeartbeatKeeper(SupervisedThread):
    """Writes the replica's heartbeat every ``Heartbeat.every``, on a thread and a connection
    of its own, while the loop shows progress (``Progress``).

    A stuck loop withholds the heartbeat (``heartbeat.withheld``, once per stall) until it
    moves again. A store outage is logged (``store.unavailable``, ``during="heartbeat"``) and
    the heartbeat tried again at the next turn; any other error crashes the keeper: restarted,
    bounded, and past that the replica stops safely (``supervision.STOPS_REPLICA``), since a
    replica that serves without a heartbeat would be declared gone while it holds leases.
    """

    def __init__(
        self,
        heartbeat: Heartbeat,
        *,
        progress: Progress,
        outage: OutageLog,
        supervisor: Supervisor,
    ) -> None:
        self.stopped = threading.Event()
        super().__init__(Role.HEARTBEAT, supervisor=supervisor, stop_event=self.stopped)
        self.heartbeat, self.progress, self.outage = heartbeat, progress, outage
        self._withheld = False

    def body(self) -> None:
        try:
            while not self.stopped.is_set():
                self.beat_once()
                self.stopped.wait(self.heartbeat.every.total_seconds())
        finally:
            connections.close_all()

    def beat_once(self) -> None:
        late = self.progress.stalled()
        if late:
            if not self._withheld:
                log.error("heartbeat.withheld", stalled_seconds=round(late, 1))
            self._withheld = True
            return
        if self._withheld:
            log.info("heartbeat.resumed")
            self._withheld = False
        try:
            status = self.supervisor.status()
            self.heartbeat.beat(ReplicaState.RUNNING, force=True, threads=status)
        except DatabaseError as exc:
            raise_unless_outage(exc)  # anything else: the keeper crashes and is restarted
            drop_connection()
            self.outage.failed(exc, during="heartbeat")


__all__ = [
    "CLOCK_SAMPLES",
    "GONE_AFTER_HEARTBEATS",
    "STALL_HEARTBEATS",
    "Heartbeat",
    "HeartbeatKeeper",
    "Progress",
    "default_replica_id",
    "sync_clock",
]
