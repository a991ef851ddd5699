"""Crash-only supervision: one rule for every long-lived thread of a replica.

Each thread has a role. An unexpected exception in a thread, ``BaseException`` included, is
logged (``thread.crashed``, with the role and the redacted error) and then:

1. the thread's body runs again after a backoff (0.5 s, 1 s, 2 s ... at most 5 s), at most
   ``MAX_RESTARTS`` times within ``RESTART_WINDOW``;
2. past that, the role is dead. A role the runs depend on (``STOPS_REPLICA``: the loop, the
   run threads, the heartbeat and the guards) stops the replica safely
   (``Supervisor.on_failure``): it stops claiming, cancels its runs, cuts off what ignores
   cancellation after the grace, releases what it can and exits ``EXIT_THREAD_FAILED`` for
   its supervisor to restart it. Any other (retention, the start-up sync) stays dead while
   the replica serves on: ``jobs health`` fails while it reports one, so a liveness probe
   restarts it gracefully.

While a thread that guards the runs (``GUARDS``: the lease keeper, the completer, the deadline
watch) is restarting or dead, the replica claims nothing (``Supervisor.guards_alive``). The
loop applies the same rule to its own passes (``Supervisor.crashed``). Every role's status is
on the replica's heartbeat row (``jobs health``) and in its metrics.
"""

from __future__ import annotations

import enum
import threading
import time
from collections import deque
from collections.abc import Callable

import structlog

from ..safe_error import loggable
from .retry import backoff_seconds

log = structlog.get_logger("django_jobs.worker")

# A thread that crashed this many times within the window is not restarted again: whatever
# breaks it is not passing, and a replica that keeps limping along hides it.
MAX_RESTARTS = 3
RESTART_WINDOW_SECONDS = 300.0
RESTART_BASE_SECONDS = 0.5
RESTART_CAP_SECONDS = 5.0


class Role(enum.StrEnum):
    LOOP = "loop"  # plans and claims (the main thread)
    HEARTBEAT = "heartbeat"  # the replica's heartbeat, while the loop moves
    RUN = "run"  # the run threads (a pool): a crash is the worker's own error after a run
    LEASE_KEEPER = "lease_keeper"
    COMPLETER = "completer"
    DEADLINES = "deadlines"  # timeouts, lease margins and cut-offs
    RETENTION = "retention"
    STARTUP_SYNC = "startup_sync"
    METRICS = "metrics"


# The threads without which a run could outlive its lease or its deadline, or finish without
# its completion written: no claim while one of them is not alive.
GUARDS = frozenset({Role.LEASE_KEEPER, Role.COMPLETER, Role.DEADLINES})
# The roles whose death stops the replica: without them its runs are not kept or written, or
# (the heartbeat) it would be declared gone while it still holds leases.
STOPS_REPLICA = GUARDS | {Role.LOOP, Role.RUN, Role.HEARTBEAT}


class Status(enum.StrEnum):
    ALIVE = "alive"
    RESTARTING = "restarting"  # crashed; its body runs again after a backoff
    DEAD = "dead"  # crashed too often: the replica is stopping
    STOPPED = "stopped"  # ended as asked


class Supervisor:
    """The status of each of the replica's threads, and what a crash of one means."""

    def __init__(
        self,
        *,
        on_failure: Callable[[Role, BaseException], None] = lambda role, exc: None,
        patterns: tuple[str, ...] = (),
        max_restarts: int = MAX_RESTARTS,
    ) -> None:
        self.on_failure, self.patterns, self.max_restarts = on_failure, patterns, max_restarts
        self._lock = threading.Lock()
        self._status: dict[Role, Status] = {}
        self._crashes: dict[Role, deque[float]] = {}

    def set(self, role: Role, status: Status) -> None:
        with self._lock:
            self._status[role] = status

    def recovered(self, role: Role) -> None:
        """A role restarting after a crash works again (the loop's next pass went through)."""
        with self._lock:
            if self._status.get(role) == Status.RESTARTING:
                self._status[role] = Status.ALIVE

    def restarting(self) -> bool:
        """Whether a guard is restarting (not dead): claims wait for it."""
        with self._lock:
            return any(s == Status.RESTARTING for r, s in self._status.items() if r in GUARDS)

    def status(self) -> dict[str, str]:
        """Each role that has a thread, and its status (for the heartbeat and the metrics)."""
        with self._lock:
            return {role.value: status.value for role, status in sorted(self._status.items())}

    def guards_alive(self) -> bool:
        """Whether every guard that was started is alive (an inline worker starts none)."""
        with self._lock:
            return all(s == Status.ALIVE for r, s in self._status.items() if r in GUARDS)

    def crashed(self, role: Role, exc: BaseException) -> bool:
        """Log a crash of ``role``; True if it may run again (after ``restart_delay``), False
        if it crashed too often: then the role is dead and ``on_failure`` has been called."""
        now = time.monotonic()  # a duration's ends, not an instant: no clock needed
        with self._lock:
            crashes = self._crashes.setdefault(role, deque())
            crashes.append(now)
            while crashes and now - crashes[0] > RESTART_WINDOW_SECONDS:
                crashes.popleft()
            restart = len(crashes) <= self.max_restarts
            self._status[role] = Status.RESTARTING if restart else Status.DEAD
            count = len(crashes)
        log.error(
            "thread.crashed",
            role=role.value,
            error_type=type(exc).__name__,
            error=loggable(exc, patterns=self.patterns, max_chars=300),
            crashes=count,
            restart=restart,
        )
        if not restart and role in STOPS_REPLICA:
            self.on_failure(role, exc)
        return restart

    def restart_delay(self, role: Role) -> float:
        """Seconds to wait before running ``role``'s body again."""
        with self._lock:
            count = len(self._crashes.get(role, ()))
        return backoff_seconds(max(count, 1), base=RESTART_BASE_SECONDS, cap=RESTART_CAP_SECONDS)


class SupervisedThread(threading.Thread):
    """A daemon thread whose ``body`` runs under its supervisor's rule (module docstring).

    ``body`` returning means the thread was asked to stop. ``stop_event`` ends a restart's
    backoff early when the thread is stopped meanwhile.
    """

    role: Role

    def __init__(self, role: Role, *, supervisor: Supervisor | None, stop_event: threading.Event):
        super().__init__(name=f"django_jobs-{role.value.replace('_', '-')}", daemon=True)
        self.role = role
        self.supervisor = supervisor or Supervisor()
        self.stop_event = stop_event

    def body(self) -> None:
        raise NotImplementedError

    def final(self) -> None:
        """What to do when stopped while waiting to restart after a crash (nothing)."""

    def start(self) -> None:
        self.supervisor.set(self.role, Status.ALIVE)  # alive from now: no claim races it
        super().start()

    def run(self) -> None:
        while True:
            try:
                self.body()
            except BaseException as exc:  # crash-only: every exception counts
                if not self.supervisor.crashed(self.role, exc):
                    return
                if self.stop_event.wait(self.supervisor.restart_delay(self.role)):
                    self.supervisor.set(self.role, Status.STOPPED)
                    self.final()
                    return
                self.supervisor.set(self.role, Status.ALIVE)
                log.info("thread.restarted", role=self.role.value)
                continue
            self.supervisor.set(self.role, Status.STOPPED)
            return


__all__ = [
    "GUARDS",
    "MAX_RESTARTS",
    "RESTART_WINDOW_SECONDS",
    "STOPS_REPLICA",
    "Role",
    "Status",
    "SupervisedThread",
    "Supervisor",
]
