"""The worker loop: plan, claim, run, keep leases, survive outages, shut down gracefully."""

from __future__ import annotations

import contextlib
import functools
import os
import secrets
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from uuid import UUID

import structlog
from django.db import DEFAULT_DB_ALIAS, DatabaseError, close_old_connections, connections
from django.db.backends.base.base import BaseDatabaseWrapper

from .. import store
from ..clock import Clock, SystemClock, later
from ..conf import JobsSettings, get_settings
from ..exceptions import Cancelled
from ..models import AttemptOutcome, ReplicaState, Schedule
from ..registry import Registry, registry
from ..safe_error import loggable
from .completer import Completer
from .executor import (
    STORE_OUTAGE,
    ActiveRun,
    CancelReason,
    Execution,
    Outcome,
    execute,
    record_failure,
    release_unstarted,
)
from .leases import LeaseKeeper
from .outage import Backoff, OutageLog
from .planning import plan_due
from .wakeup import Wakeup, conninfo_from_django

log = structlog.get_logger("django_jobs.worker")

EXIT_RESTART = 3  # a run ignored cancellation and was cut off: restart this process
SHORT_RUN = 0.1  # seconds: runs shorter than this on average let a replica claim ahead


def _serialization_conflict(exc: BaseException) -> bool:
    """SQLSTATE class 40 (deadlock detected, serialization failure): an OperationalError to
    the driver, but the database answered; the statement can simply run again."""
    sqlstate = getattr(exc.__cause__, "sqlstate", None) or ""
    return sqlstate.startswith("40")


def default_replica_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


@dataclass
class PassSummary:
    claimed: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)

    def __str__(self) -> str:
        parts = [f"claimed {self.claimed}"]
        parts += [f"{name} {self.outcomes[name]}" for name in sorted(self.outcomes)]
        return ", ".join(parts)


class Worker:
    """One replica. Any number may run at once against the same database.

    ``serve()`` is the long-running loop of ``manage.py runworker``; ``run_pass()`` runs what is
    due now and returns (``--once``, and tests).
    """

    def __init__(
        self,
        *,
        replica_id: str | None = None,
        clock: Clock | None = None,
        tenant: str | None = None,
        concurrency: int = 1,
        jobs: Registry = registry,
        settings: JobsSettings | None = None,
        listen: bool = True,
        inline: bool = False,
    ) -> None:
        """``inline`` runs each occurrence in the calling thread, inside the caller's
        transaction (for tests; see ``django_jobs.testing.run_due``). ``listen`` opens the
        LISTEN connection that lets other replicas wake this one."""
        if concurrency < 1:
            raise ValueError(f"concurrency must be 1 or more, got {concurrency}")
        self.replica_id = replica_id or default_replica_id()
        self.clock = clock or SystemClock()
        self.tenant = tenant
        self.concurrency = concurrency
        self.settings = settings or get_settings()
        self.stopping = threading.Event()  # stop claiming, drain, release, exit
        self.forced = threading.Event()  # a second signal: exit fast
        self.exit_code = 0
        # Run threads that never returned (cut off, or still running at exit): the process
        # must end without waiting for them (``manage.py runworker`` uses ``os._exit``).
        self.stuck_threads = 0
        self._cut_off_count = 0
        self.started_at = self.clock.now()
        self.inline = inline
        self._lock = threading.Lock()
        self._outcomes: Counter[str] = Counter()
        stop_writing = threading.Event()
        # Completions of runs that need nothing else committed are group-committed by one
        # thread (inline runs, in a caller's transaction, write their own).
        self._completer = Completer(
            clock=self.clock,
            on_done=self._written,
            stop_writing=stop_writing,
            max_batch=max(self.settings.CLAIM_BATCH_SIZE, concurrency),
            patterns=self.settings.REDACT_PATTERNS,
        )
        self._execution = Execution(
            clock=self.clock,
            settings=self.settings,
            registry=jobs,
            stop_writing=stop_writing,
            hand_over=None if inline else self._completer.submit,
        )
        # ``serve`` plans only when a schedule may have come due (see ``step``); ``run_pass``
        # plans at every step.
        self._plan_at: datetime | None = None
        self._run_seconds: float | None = None  # moving average of recent runs' durations
        self._active: dict[UUID, ActiveRun] = {}
        self._pool = ThreadPoolExecutor(concurrency, thread_name_prefix="django_jobs-run")
        self._run_connections: dict[int, BaseDatabaseWrapper] = {}
        self.wakeup = Wakeup(conninfo_from_django() if listen else None)
        self.outage = OutageLog(self.clock, patterns=self.settings.REDACT_PATTERNS)
        # Retry a lost store every 0.5 s, 1 s, 2 s ... at most 5 s apart: back within seconds.
        self._backoff = Backoff(base=0.5, cap=5.0)
        self._next_heartbeat = self.started_at
        self._keeper = LeaseKeeper(
            owner=self.replica_id,
            clock=self.clock,
            lease_for=self.settings.lease,
            active=self.active_runs,
            patterns=self.settings.REDACT_PATTERNS,
        )

    # --- shared state ---------------------------------------------------------------

    def running(self) -> list[ActiveRun]:
        """Runs whose handler has not returned yet."""
        with self._lock:
            return list(self._active.values())

    def active_runs(self) -> list[ActiveRun]:
        """Every run whose lease this replica must keep: running, or returned with its
        completion not yet written."""
        runs = {id(run): run for run in self._completer.held()}
        runs.update((id(run), run) for run in self.running())
        return list(runs.values())

    def _busy(self) -> bool:
        return bool(self._active) or self._completer.busy()

    def request_stop(self) -> None:
        """Stop claiming and drain (first call); exit fast (second call). Signal-safe."""
        if self.stopping.is_set():
            self.forced.set()
            self._execution.stop_writing.set()
        self.stopping.set()
        self.wakeup.poke()

    # --- clock ----------------------------------------------------------------------

    def sync_clock(self, samples: int = 3) -> None:
        """Align a SystemClock with the database's so all replicas share one timeline.

        Takes the sample with the shortest round trip, as NTP does: its error is at most half
        that round trip.
        """
        if not isinstance(self.clock, SystemClock):
            return
        best: tuple[timedelta, timedelta] | None = None
        for _ in range(samples):
            before = self.clock.now() - self.clock.offset
            db_now = store.database_clock()
            after = self.clock.now() - self.clock.offset
            if best is None or after - before < best[0]:
                best = (after - before, store.measure_clock_offset(before, after, db_now))
        assert best is not None
        round_trip, offset = best
        self.clock.set_offset(offset)
        log.info(
            "clock.synced",
            offset_ms=round(offset.total_seconds() * 1000, 2),
            error_bound_ms=round(round_trip.total_seconds() * 500, 2),
        )

    # --- one step -------------------------------------------------------------------

    def step(self) -> tuple[int, int]:
        """Plan what has come due and start as many due occurrences as there are free slots.

        Returns (claimed, asked): a full batch means more may be due at once.
        """
        now = self.clock.now()
        if self._plan_at is None or now >= self._plan_at:
            self._plan(now)
        running = len(self._active)
        ahead = self._claim_ahead()
        if ahead and running > self.concurrency:
            # Every thread is busy and work claimed ahead still waits: claim again when a
            # thread may go idle, then a full batch, not one occurrence per finished run.
            return 0, 0
        free = self.concurrency + ahead - running
        paused = get_settings()  # the kill switch is read afresh at every pass
        if free <= 0 or self.stopping.is_set() or paused.paused_all:
            return 0, 0
        asked = min(free, self.settings.CLAIM_BATCH_SIZE)
        runs = store.claim_runs(
            owner=self.replica_id,
            now=now,
            lease_for=self.settings.lease,
            limit=asked,
            tenant=self.tenant,
            exclude_keys=paused.PAUSED_SCHEDULES,
        )
        for lease, schedule in runs:
            self._start(lease, schedule, now)
        return len(runs), asked

    def _plan(self, now: datetime) -> None:
        limit = self.settings.PLAN_BATCH_SIZE
        planned = plan_due(now=now, limit=limit)
        if planned.planned:
            store.notify("plan")
        if self._plan_at is None:
            return
        if planned.schedules >= limit:
            self._plan_at = now  # more is due: plan again at the next step
            return
        # Nothing more is due until the earliest next_due_at; a NOTIFY (an operator's enable
        # or run-now, another replica's plan), or POLL_SECONDS at the latest, brings it
        # forward. A schedule changed without a notify waits at most that long.
        poll = now + timedelta(seconds=self.settings.POLL_SECONDS)
        due = store.next_schedule_due()
        self._plan_at = poll if due is None else min(due, poll)

    def _claim_ahead(self) -> int:
        """How many occurrences to claim beyond the free run threads.

        Claiming ahead turns a burst of short runs into a few large claims instead of one
        small claim per finished run. It is done only while recent runs are short (under
        ``SHORT_RUN`` on average), so a replica busy with long jobs never holds occurrences
        that another replica could start.
        """
        if self.inline:
            return 0
        with self._lock:
            short = self._run_seconds is not None and self._run_seconds < SHORT_RUN
        return self.settings.CLAIM_AHEAD if short else 0

    def _start(self, lease: store.Lease, schedule: Schedule, now: datetime) -> None:
        active = ActiveRun(lease=lease, schedule=schedule, deadline=later(now, schedule.timeout))
        with self._lock:
            self._active[lease.occurrence_id] = active
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
            done.set_result(execute(active, self._execution))
            self._finished(active, done)
            return
        future = self._pool.submit(self._run_in_thread, active)
        future.add_done_callback(functools.partial(self._finished, active))

    def _run_in_thread(self, active: ActiveRun) -> Outcome:
        # The thread's connection stays open for its next run (``execute`` closes it when a
        # run broke it); the worker closes them all when it stops.
        if active.cancel.is_set():  # claimed ahead, and the replica is stopping
            return release_unstarted(active, self._execution)
        began = time.perf_counter()  # a duration, not an instant: no clock needed
        active.deadline = later(self.clock.now(), active.schedule.timeout)
        active.started = True
        try:
            return execute(active, self._execution)
        finally:
            took = time.perf_counter() - began
            with self._lock:
                self._run_seconds = (
                    took if self._run_seconds is None else 0.8 * self._run_seconds + 0.2 * took
                )
            wrapper = connections[DEFAULT_DB_ALIAS]
            with self._lock:
                self._run_connections[id(wrapper)] = wrapper

    def _close_run_connections(self) -> None:
        """Close the run threads' connections (from this thread: their threads are done)."""
        with self._lock:
            wrappers, self._run_connections = list(self._run_connections.values()), {}
        for wrapper in wrappers:
            if wrapper.connection is not None:
                with contextlib.suppress(Exception):
                    wrapper.connection.close()

    def _finished(self, active: ActiveRun, future: Future[Outcome]) -> None:
        with self._lock:
            if self._active.get(active.lease.occurrence_id) is active:
                del self._active[active.lease.occurrence_id]
        if future.cancelled():  # claimed ahead, never started: released at shutdown
            return
        exc = future.exception()
        if exc is not None:
            log.error(
                "run.crashed",
                occurrence=str(active.lease.occurrence_id),
                error_type=type(exc).__name__,
                error=self._loggable(exc),
            )
        elif not active.abandoned and future.result() != Outcome.HANDED_OVER:
            with self._lock:
                self._outcomes[future.result().value] += 1
        self.wakeup.poke()

    def _written(self, active: ActiveRun, outcome: Outcome) -> None:
        """The completer wrote (or gave up on) a handed-over run's completion."""
        with self._lock:
            self._outcomes[outcome.value] += 1
        self.wakeup.poke()

    # --- run what is due now (--once) -----------------------------------------------

    def _ensure_keeper(self) -> None:
        if not self._keeper.is_alive() and not self._keeper.stopped.is_set():
            self._keeper.start()
        if not self.inline and not self._completer.is_alive() and self._completer.ident is None:
            self._completer.start()

    def _stop_completer(self, timeout: float) -> None:
        self._completer.stop()
        if self._completer.is_alive():
            self._completer.join(timeout=timeout)

    def close(self) -> None:
        """Stop the lease keeper and the run threads (after ``run_pass``)."""
        self._keeper.stopped.set()
        if self._keeper.is_alive():
            self._keeper.join(timeout=5)
        self._pool.shutdown(wait=True)
        self._stop_completer(timeout=30)
        self._close_run_connections()
        self.wakeup.close()

    def run_pass(self) -> PassSummary:
        """Plan, claim and run what is due now, waiting for every run it started."""
        self._ensure_keeper()
        summary = PassSummary()
        before = Counter(self._outcomes)
        while True:
            claimed, asked = self.step()
            summary.claimed += claimed
            while self._busy():
                self._enforce_timeouts()
                self.wakeup.wait(0.5)  # a finished run pokes: this is only an upper bound
            if claimed < asked or asked == 0 or self.stopping.is_set():
                break
        summary.outcomes = self._outcomes - before
        return summary

    # --- the long-running loop ------------------------------------------------------

    def start_up(self, prepare: Callable[[], object]) -> bool:
        """Sync the clock, then run ``prepare`` (the schedule sync), waiting out a store outage.

        A worker started while PostgreSQL is down waits for it, with the same backoff and
        bounded logging as a running worker, instead of exiting. Returns False when a stop was
        requested before the store came back.
        """
        while not self.stopping.is_set():
            try:
                self.sync_clock()
                prepare()
            except STORE_OUTAGE as exc:
                self.outage.failed(exc)
                close_old_connections()
                self.wakeup.wait(self._backoff.next_delay())
                continue
            self.outage.recovered()
            self._backoff.reset()
            return True
        return False

    def serve(self) -> int:
        """Run until stopped; return the process exit code (0, or 3 to be restarted)."""
        self._ensure_keeper()
        self._plan_at = self.clock.now()
        log.info("worker.started", replica=self.replica_id, concurrency=self.concurrency)
        while not self.stopping.is_set():
            try:
                self._heartbeat(ReplicaState.RUNNING)
                self._enforce_timeouts()
                claimed, asked = self.step()
                sleep = 0.0 if claimed and claimed == asked else self._idle_seconds()
            except STORE_OUTAGE as exc:
                if _serialization_conflict(exc):
                    # A deadlock victim or serialization failure: the store is up; go again.
                    log.warning("worker.pass_conflict", error=self._loggable(exc))
                    close_old_connections()
                    continue
                self.outage.failed(exc)
                close_old_connections()
                self.wakeup.close()
                self.wakeup.wait(self._backoff.next_delay())
                continue
            except DatabaseError as exc:
                # Not an outage (a deadlock victim, a constraint): log it and try again shortly;
                # a worker never dies of one bad pass.
                log.error(
                    "worker.pass_failed",
                    error_type=type(exc).__name__,
                    error=self._loggable(exc),
                )
                close_old_connections()
                self.wakeup.wait(self._backoff.next_delay())
                continue
            if self.outage.active:
                self.outage.recovered()
                self._backoff.reset()
            if self.exit_code == EXIT_RESTART:
                break
            if self.wakeup.wait(sleep) == "notify":
                self._plan_at = self.clock.now()
        return self._shutdown()

    def _idle_seconds(self) -> float:
        """Sleep until the earliest of: due work, a run's timeout, the next heartbeat."""
        now = self.clock.now()
        candidates = [now + timedelta(seconds=self.settings.POLL_SECONDS), self._next_heartbeat]
        if len(self._active) < self.concurrency:
            due = store.next_wakeup(now=now)
            if due is not None:
                candidates.append(due)
                if self._plan_at is not None:
                    self._plan_at = min(self._plan_at, due)
        grace = timedelta(seconds=self.settings.TIMEOUT_GRACE_SECONDS)
        for active in [run for run in self.running() if run.started]:
            candidates.append(active.deadline + (grace if active.cancel.is_set() else timedelta(0)))
        return max(0.0, (min(candidates) - now).total_seconds())

    def _heartbeat(self, state: ReplicaState, *, force: bool = False) -> None:
        now = self.clock.now()
        if not force and now < self._next_heartbeat:
            return
        store.heartbeat(
            self.replica_id,
            host=socket.gethostname(),
            pid=os.getpid(),
            started_at=self.started_at,
            now=now,
            state=state.value,
            concurrency=self.concurrency,
            running=len(self._active),
        )
        self._next_heartbeat = now + timedelta(seconds=self.settings.HEARTBEAT_SECONDS)

    def _enforce_timeouts(self) -> None:
        """Cancel runs past their deadline; cut off those that ignore it past the grace."""
        now = self.clock.now()
        grace = timedelta(seconds=self.settings.TIMEOUT_GRACE_SECONDS)
        for active in self.running():
            if active.abandoned or not active.started:
                continue
            if now >= active.deadline and not active.cancel.is_set():
                log.warning("run.timed_out", occurrence=str(active.lease.occurrence_id))
                active.cancel_for(CancelReason.TIMEOUT)
            elif active.reason == CancelReason.TIMEOUT and now >= active.deadline + grace:
                self._cut_off(active)

    def _cut_off(self, active: ActiveRun) -> None:
        """Record a run that ignores cancellation as timed out and leave its thread behind.

        A Python thread cannot be killed: the replica stops claiming and exits with code 3 so
        its supervisor restarts it. Anything the abandoned thread writes later is refused by
        fencing (the occurrence is no longer processing under its token).
        """
        with self._lock:
            self._active.pop(active.lease.occurrence_id, None)
        log.error("run.cut_off", occurrence=str(active.lease.occurrence_id))
        timeout = Cancelled(f"ran past its timeout of {active.schedule.timeout} and its grace")
        record_failure(active, timeout, self._execution, outcome=AttemptOutcome.TIMED_OUT)
        active.abandoned = True
        self._cut_off_count += 1
        self._outcomes[Outcome.TIMED_OUT.value] += 1
        self.exit_code = EXIT_RESTART
        self.stopping.set()

    def _shutdown(self) -> int:
        """Stop claiming; give running occurrences the grace period; then cancel them and
        release their leases so another replica can take them at once."""
        log.info("worker.draining", running=len(self._active))
        self._try(lambda: self._heartbeat(ReplicaState.DRAINING, force=True))
        until = self.clock.now() + self.settings.shutdown_grace
        while self._busy() and not self.forced.is_set() and self.clock.now() < until:
            self.wakeup.wait(min(1.0, (until - self.clock.now()).total_seconds()))
        for active in self.running():
            active.cancel_for(CancelReason.SHUTDOWN)
        settle = self.clock.now() + timedelta(seconds=0 if self.forced.is_set() else 2)
        while self._active and self.clock.now() < settle:
            self.wakeup.wait(0.1)
        leftovers = self.running()
        for active in leftovers:
            active.abandoned = True
        self.stuck_threads = len(leftovers) + self._cut_off_count
        if leftovers:
            self._try(lambda: store.release([a.lease for a in leftovers], now=self.clock.now()))
            self._try(lambda: store.notify("release"))
            log.info("worker.released", count=len(leftovers))
        # Completions handed over and still unwritten (a store outage): written now if the
        # store answers, else left to expire like any lease this replica cannot write.
        self._stop_completer(timeout=0 if self.forced.is_set() else 2)
        if self._completer.is_alive():
            self.stuck_threads += 1
        self._keeper.stopped.set()
        self._try(lambda: self._heartbeat(ReplicaState.STOPPED, force=True))
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._close_run_connections()
        self.wakeup.close()
        connections.close_all()
        log.info("worker.stopped", exit_code=self.exit_code)
        return self.exit_code

    def _loggable(self, exc: BaseException) -> str:
        return loggable(exc, patterns=self.settings.REDACT_PATTERNS)

    def _try(self, action: Callable[[], object]) -> None:
        try:
            action()
        except STORE_OUTAGE as exc:
            log.error("store.unavailable", during="shutdown", error=self._loggable(exc))


__all__ = ["EXIT_RESTART", "Outcome", "PassSummary", "Worker", "default_replica_id"]
