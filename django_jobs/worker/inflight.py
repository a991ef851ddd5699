"""The replica's in-flight runs: one owner, explicit states, changed under one lock.

A run is claimed (possibly ahead of a free run thread), started by a run thread, and then either
ends in its thread or is handed to the completer, which writes its completion. The loop, the
run threads, the lease keeper and the completer all hold this object and change a run only
through its transitions, the way ``concurrent.futures`` owns a future's state:

    CLAIMED --start--> RUNNING --hand_over--> WRITING --finish--> (gone)
       |                  |                                  ^
       +------------------+-------------- finish ------------+
       +------------------+-- abandon --> ABANDONED (gone from the books)

Cancellation (timeout, lost lease, store outage, shutdown) is recorded once, with its reason
and instant; the first reason stands.
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from uuid import UUID

from ..models import Schedule
from ..store import Lease


class RunState(enum.StrEnum):
    CLAIMED = "claimed"  # claimed ahead, waiting for a run thread; its timeout has not begun
    RUNNING = "running"  # its handler is running
    WRITING = "writing"  # its handler returned; the completer writes its completion
    ABANDONED = "abandoned"  # cut off or left behind: its thread's late writes are skipped


class CancelReason(enum.StrEnum):
    TIMEOUT = "timeout"
    LEASE_LOST = "lease_lost"  # the store refused the renewal: another holder, or cancelled
    OUTAGE = "outage"  # the store could not be reached to confirm the lease
    # The lease was not confirmed in time though no store outage is known (the replica was
    # paused, its keeper restarting or failing): given back if it stops, never excused.
    UNCONFIRMED = "unconfirmed"
    SHUTDOWN = "shutdown"


@dataclass(eq=False)
class ActiveRun:
    """One run on this replica. Its fields change only through ``InFlight``'s transitions;
    anyone may read them."""

    lease: Lease
    schedule: Schedule
    deadline: datetime
    state: RunState = RunState.CLAIMED
    cancel: threading.Event = field(default_factory=threading.Event)
    reason: CancelReason | None = None
    cancelled_at: datetime | None = None
    lost: bool = False  # the store refused its renewal: another claim or an operator ended it
    claimed_ahead: bool = False  # its Attempt says ``claimed`` until a thread starts it
    # When the keeper last found its row locked by the run's own ``run.atomic()`` (held, not
    # extended: no claim can take a locked row over); ``None`` once renewed again.
    locked_at: datetime | None = None

    @property
    def occurrence_id(self) -> UUID:
        return self.lease.occurrence_id

    @property
    def abandoned(self) -> bool:
        return self.state == RunState.ABANDONED

    @property
    def started(self) -> bool:
        return self.state in (RunState.RUNNING, RunState.WRITING)


class InFlight:
    """Every run this replica holds a lease for, by state. A run is known by its occurrence
    and its token: this replica's own claim may take over the lapsed lease of a run it still
    has on a thread (it was frozen or starved past the lease), and both are on the books
    until each ends."""

    def __init__(self, on_change: Callable[[], None] = lambda: None) -> None:
        self._lock = threading.Lock()
        self._runs: dict[tuple[UUID, int], ActiveRun] = {}
        self._on_change = on_change  # wakes the loop (a finished run frees a thread)

    # --- transitions ------------------------------------------------------------------

    def add(self, run: ActiveRun, now: datetime) -> None:
        """On the books; an older run of the same occurrence here has lost its lease to this
        one's claim: it is cancelled (``lease_lost``) and no longer renewed, and the deadline
        watch cuts it off after the grace if it goes on
        (tests/test_lease_keeper.py::test_a_run_whose_lease_this_replica_took_over_is_stopped)."""
        with self._lock:
            older = [r for r in self._runs.values() if r.occurrence_id == run.occurrence_id]
            self._runs[_key(run)] = run
        for previous in older:
            self.lose(previous, now)
        if older:
            self._on_change()

    def start(self, run: ActiveRun, deadline: datetime) -> bool:
        """CLAIMED -> RUNNING, its timeout counted from now. False when it was cancelled
        before it started (the replica is stopping): give it back unrun."""
        with self._lock:
            if run.state != RunState.CLAIMED or run.cancel.is_set():
                return False
            run.state, run.deadline = RunState.RUNNING, deadline
            return True

    def hand_over(self, run: ActiveRun) -> None:
        """RUNNING -> WRITING: the completer owns its outcome write now."""
        with self._lock:
            if run.state == RunState.RUNNING:
                run.state = RunState.WRITING

    def finish(self, run: ActiveRun) -> bool:
        """Off the books: its outcome is written (or given up). False if it was abandoned."""
        with self._lock:
            if self._runs.get(_key(run)) is run:
                del self._runs[_key(run)]
            abandoned = run.state == RunState.ABANDONED
        self._on_change()
        return not abandoned

    def abandon(self, run: ActiveRun) -> bool:
        """Leave a run's thread behind (cut off, or still running at exit). False if it had
        already finished."""
        with self._lock:
            if self._runs.get(_key(run)) is not run:
                return False
            del self._runs[_key(run)]
            run.state = RunState.ABANDONED
        self._on_change()
        return True

    def cancel(self, run: ActiveRun, reason: CancelReason, now: datetime) -> bool:
        """Ask a run to stop; the first reason stands. True if this call cancelled it."""
        with self._lock:
            first = run.reason is None
            if first:
                run.reason, run.cancelled_at = reason, now
        run.cancel.set()
        return first

    def lose(self, run: ActiveRun, now: datetime) -> None:
        """The store refused its renewal: stop renewing it and cancel it (``lease_lost``,
        unless it was already cancelled for another reason, which stands)."""
        with self._lock:
            run.lost = True
        self.cancel(run, CancelReason.LEASE_LOST, now)

    def renewed(self, run: ActiveRun, lease: Lease, now: datetime) -> None:
        """The store confirmed the lease: extended, or held under the run's own row lock
        (returned with the expiry it had)."""
        with self._lock:
            if run.lease.token != lease.token:
                return
            if lease.expires_at == run.lease.expires_at:
                run.locked_at = now
            else:
                run.lease, run.locked_at = lease, None

    # --- views ------------------------------------------------------------------------

    def in_state(self, *states: RunState) -> list[ActiveRun]:
        with self._lock:
            return [run for run in self._runs.values() if run.state in states]

    def all(self) -> list[ActiveRun]:
        return self.in_state(RunState.CLAIMED, RunState.RUNNING, RunState.WRITING)

    def running(self) -> list[ActiveRun]:
        """Runs whose handler has not returned (or not started yet)."""
        return self.in_state(RunState.CLAIMED, RunState.RUNNING)

    def to_keep(self) -> list[ActiveRun]:
        """Runs whose lease this replica must keep renewing."""
        return [run for run in self.all() if not run.lost]

    def count(self, *states: RunState) -> int:
        return len(self.in_state(*states))

    def __len__(self) -> int:
        with self._lock:
            return len(self._runs)


def _key(run: ActiveRun) -> tuple[UUID, int]:
    return run.occurrence_id, run.lease.token


__all__ = ["ActiveRun", "CancelReason", "InFlight", "RunState"]
