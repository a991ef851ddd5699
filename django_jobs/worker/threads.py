"""The run threads: each claimed occurrence runs on one, in its own execution scope
(``executor.execute``); what each run ended as is counted, and how long runs take decides
whether the replica claims ahead of its free threads.

An inline worker (tests, ``django_jobs.testing.run_due``) runs each occurrence in the calling
thread, inside the caller's transaction, instead.
"""

from __future__ import annotations

import contextlib
import functools
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import datetime

import structlog
from django.db import DEFAULT_DB_ALIAS, DatabaseError, connections
from django.db.backends.base.base import BaseDatabaseWrapper

from .. import store
from ..clock import Clock, later
from ..models import Schedule
from ..safe_error import loggable
from .executor import Execution, execute, give_back_after_outage, log_scope, release_unstarted
from .inflight import ActiveRun, InFlight
from .outage import raise_unless_outage
from .outcomes import Outcome, Tally
from .starts import Starts
from .supervision import Role, Status, Supervisor

log = structlog.get_logger("django_jobs.worker")

# Seconds: runs shorter than this on average let a replica claim ahead of its free threads;
# for longer runs the round trip of a claim is small beside the run.
SHORT_RUN = 0.1
# The newest run's weight in the moving average of run durations: recent runs dominate within
# a handful of runs, and one odd run does not turn claiming ahead on or off.
NEWEST_RUN_WEIGHT = 0.2


class RunTimes:
    """A moving average of recent runs' durations (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seconds: float | None = None  # no run measured yet

    def add(self, took: float) -> None:
        with self._lock:
            if self._seconds is None:
                self._seconds = took
            else:
                self._seconds = (1 - NEWEST_RUN_WEIGHT) * self._seconds + NEWEST_RUN_WEIGHT * took

    def short(self) -> bool:
        """Whether recent runs were short (under ``SHORT_RUN`` on average)."""
        with self._lock:
            return self._seconds is not None and self._seconds < SHORT_RUN


class RunThreads:
    """Starts claimed runs on the replica's run threads and finishes their books."""

    def __init__(
        self,
        *,
        concurrency: int,
        clock: Clock,
        inflight: InFlight,
        execution: Execution,
        tally: Tally,
        inline: bool,
        supervisor: Supervisor | None = None,
    ) -> None:
        self.clock, self.inflight, self.execution = clock, inflight, execution
        self.tally, self.inline = tally, inline
        self.supervisor = supervisor or Supervisor()
        self.times = RunTimes()
        self.starts = Starts(clock)
        self._pool = ThreadPoolExecutor(concurrency, thread_name_prefix="django_jobs-run")
        self._lock = threading.Lock()  # the run threads' connections
        self._connections: dict[int, BaseDatabaseWrapper] = {}

    def start(
        self, lease: store.Lease, schedule: Schedule, now: datetime, *, ahead: bool = False
    ) -> None:
        """Put a claimed occurrence on the books and run it (``ahead``: claimed beyond the free
        threads, it waits for one)."""
        active = ActiveRun(
            lease=lease,
            schedule=schedule,
            deadline=later(now, schedule.timeout),
            claimed_ahead=ahead,
        )
        self.inflight.add(active, now)
        log.debug(
            "occurrence.claimed",
            occurrence=str(lease.occurrence_id),
            schedule=str(schedule),
            token=lease.token,
            attempt=lease.attempt,
            trigger=lease.trigger,
        )
        if self.inline:
            done: Future[Outcome] = Future()
            self.inflight.start(active, active.deadline)
            done.set_result(execute(active, self.execution))
            self._finished(active, done)
            return
        future = self._pool.submit(self._run, active)
        future.add_done_callback(functools.partial(self._finished, active))

    def _run(self, active: ActiveRun) -> Outcome:
        # The thread's connection stays open for its next run (``execute`` closes it when a
        # run broke it); the worker closes them all when it stops.
        if not self.inflight.start(active, later(self.clock.now(), active.schedule.timeout)):
            return release_unstarted(active, self.execution)  # the replica is stopping
        began = time.perf_counter()  # a duration, not an instant: no clock needed
        try:
            if active.claimed_ahead and (unrun := self._start_ahead(active)) is not None:
                return unrun
            return execute(active, self.execution)
        finally:
            self.times.add(time.perf_counter() - began)
            wrapper = connections[DEFAULT_DB_ALIAS]
            with self._lock:
                self._connections[id(wrapper)] = wrapper

    def _start_ahead(self, active: ActiveRun) -> Outcome | None:
        """Record the start of a run claimed ahead, with the starts of the threads beside it
        (``starts.Starts``). ``None``: it may run. Otherwise what it ended as unrun: given back
        through a store outage, or lost, its lease taken over before it started (a takeover
        the lease keeper has not noticed yet); a run never starts under a stale token."""
        try:
            if self.starts.mark(active.lease):
                return None
        except DatabaseError as exc:
            raise_unless_outage(exc)
            return give_back_after_outage(active, self.execution, exc)
        with log_scope(active):
            log.warning("lease.lost", reason="taken over before it started")
        return Outcome.LEASE_LOST

    def _finished(self, active: ActiveRun, future: Future[Outcome]) -> None:
        if future.cancelled():  # claimed ahead, never started: released at shutdown
            self.inflight.finish(active)
            return
        exc = future.exception()
        if exc is not None:
            # Not the handler's error (``execute`` records every one of those): the worker's
            # own, writing the outcome. Its lease is no longer renewed: the next claim after
            # it lapses records the attempt lost. Crashes too close together stop the replica.
            self.inflight.finish(active)
            with log_scope(active):  # the worker's keys: the handler's context is gone
                patterns = self.execution.settings.REDACT_PATTERNS
                error = loggable(exc, patterns=patterns)
                log.error("run.crashed", error_type=type(exc).__name__, error=error)
                if self.supervisor.crashed(Role.RUN, exc):
                    self.supervisor.set(Role.RUN, Status.ALIVE)
            return
        outcome = future.result()
        if outcome != Outcome.HANDED_OVER:  # else the completer finishes it
            self.written(active, outcome)

    def written(self, active: ActiveRun, outcome: Outcome) -> None:
        """A run's outcome is written (or given up on): counted unless the run was abandoned
        (the loop counted it then), then off the books, so a pass that waits for the books to
        empty sees the count."""
        if not active.abandoned:
            self.tally.add(outcome)
        self.inflight.finish(active)

    def close_connections(self) -> None:
        """Close the run threads' connections (from this thread: their threads are done)."""
        with self._lock:
            wrappers, self._connections = list(self._connections.values()), {}
        for wrapper in wrappers:
            if wrapper.connection is not None:
                with contextlib.suppress(Exception):
                    wrapper.connection.close()

    def shutdown(self, *, wait: bool) -> None:
        """Stop the pool; runs claimed ahead and not started yet are cancelled."""
        self._pool.shutdown(wait=wait, cancel_futures=True)


__all__ = ["NEWEST_RUN_WEIGHT", "SHORT_RUN", "RunThreads", "RunTimes"]
