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
    Execution,
    Outcome,
    execute,
    give_back_after_outage,
    log_scope,
    record_failure,
    release_unstarted,
)
from .inflight import ActiveRun, CancelReason, InFlight, RunState
from .leases import LeaseKeeper
from .outage import STORE_OUTAGE, Backoff, OutageLog
from .planning import PASS_BUDGET_SECONDS, plan_due
from .retention import RetentionKeeper
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
        self._lock = threading.Lock()  # the outcome counters and the run-time average
        self._outcomes: Counter[str] = Counter()
        self.wakeup = Wakeup(conninfo_from_django() if listen else None)
        # Every run this replica holds a lease for; the loop, the run threads, the keeper and
        # the completer change it only through its transitions.
        self.inflight = InFlight(on_change=self.wakeup.poke)
        patterns = self.settings.REDACT_PATTERNS
        self.outage = OutageLog(self.clock, patterns=patterns)
        # Database errors of a pass that are not an outage, logged at the same bounded rate.
        self._pass_errors = OutageLog(
            self.clock,
            patterns=patterns,
            events=("worker.pass_failed", "worker.pass_still_failing", "worker.pass_recovered"),
        )
        stop_writing = threading.Event()
        # Completions of runs that need nothing else committed are group-committed by one
        # thread (inline runs, in a caller's transaction, write their own).
        self._completer = Completer(
            clock=self.clock,
            on_done=self._written,
            stop_writing=stop_writing,
            max_batch=max(self.settings.CLAIM_BATCH_SIZE, concurrency),
            patterns=patterns,
            outage=self.outage,
        )
        self._execution = Execution(
            clock=self.clock,
            settings=self.settings,
            registry=jobs,
            stop_writing=stop_writing,
            hand_over=None if inline else self._hand_over,
            outage=self.outage,
        )
        # ``serve`` plans only when a schedule may have come due (see ``step``); ``run_pass``
        # plans at every step.
        self._plan_at: datetime | None = None
        self._run_seconds: float | None = None  # moving average of recent runs' durations
        self._pool = ThreadPoolExecutor(concurrency, thread_name_prefix="django_jobs-run")
        self._run_connections: dict[int, BaseDatabaseWrapper] = {}
        # Retry a lost store every 0.5 s, 1 s, 2 s ... at most 5 s apart: back within seconds.
        self._backoff = Backoff(base=0.5, cap=5.0)
        self._next_heartbeat = self.started_at
        self._keeper = LeaseKeeper(
            owner=self.replica_id,
            clock=self.clock,
            lease_for=self.settings.lease,
            inflight=self.inflight,
            outage=self.outage,
            on_cancel=self.wakeup.poke,
        )
        self._retention: RetentionKeeper | None = None  # started by ``serve``

    # --- shared state ---------------------------------------------------------------

    def running(self) -> list[ActiveRun]:
        """Runs whose handler has not returned yet (or, claimed ahead, not started)."""
        return self.inflight.running()

    def _busy(self) -> bool:
        return len(self.inflight) > 0

    def _hand_over(self, active: ActiveRun) -> None:
        self.inflight.hand_over(active)
        self._completer.submit(active)

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
        running = self.inflight.count(RunState.CLAIMED, RunState.RUNNING)
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
        start_now = max(0, self.concurrency - running)  # the rest wait for a thread
        claimed = store.claim_runs(
            owner=self.replica_id,
            now=now,
            lease_for=self.settings.lease,
            limit=asked,
            tenant=self.tenant,
            exclude_keys=paused.PAUSED_SCHEDULES,
            start_now=start_now,
        )
        for occurrence in claimed.dead:
            log.error("occurrence.dead", occurrence=str(occurrence), error_type=store.WORKER_LOST)
        for occurrence in claimed.forged:
            log.error(
                "occurrence.refused", occurrence=str(occurrence), error_type=store.TENANT_MISMATCH
            )
        for n, (lease, schedule) in enumerate(claimed.runs):
            self._start(lease, schedule, now, ahead=n >= start_now)
        return len(claimed.runs) + len(claimed.dead) + len(claimed.forged), asked

    def _jobs(self) -> list[str]:
        """The jobs this replica has handlers for: the only ones it plans."""
        return self._execution.registry.names()

    def _plan(self, now: datetime) -> None:
        """One plan pass, bounded in time (``PASS_BUDGET_SECONDS``): a pass that left work
        (a long gap, a large batch) plans again at the next step, after this step's claim,
        the next heartbeat and timeout enforcement.

        Not the kill switch's schedules (``"*"``: nothing), and only schedules whose job has a
        handler here: in a rolling deploy, an old replica leaves a new job's schedule to the
        replicas that have it. One due for ``_unplannable_after()`` that no replica planned
        is parked saying so (``store.park_unplannable``)."""
        kill_switch = get_settings()  # read afresh at every pass
        if kill_switch.paused_all:
            self._plan_at = now + timedelta(seconds=self.settings.POLL_SECONDS)
            return
        limit, paused, jobs = (
            self.settings.PLAN_BATCH_SIZE,
            kill_switch.PAUSED_SCHEDULES,
            self._jobs(),
        )
        planned = plan_due(
            now=now,
            limit=limit,
            exclude_keys=paused,
            jobs=jobs,
            budget_seconds=PASS_BUDGET_SECONDS,
        )
        for name in store.park_unplannable(
            now=now,
            jobs=jobs,
            overdue=self._unplannable_after(),
            replica=self.replica_id,
            limit=limit,
        ):
            log.error("schedule.invalid", schedule=name, field="job", error_type="UnknownJob")
        if planned.planned:
            store.notify("plan")
        if self._plan_at is None:
            return
        if planned.schedules >= limit or planned.more:
            self._plan_at = now  # more is due: plan again at the next step
            return
        # Nothing more is due until the earliest next_due_at; a NOTIFY (an operator's enable
        # or run-now, another replica's plan), or POLL_SECONDS at the latest, brings it
        # forward. A schedule changed without a notify waits at most that long.
        poll = now + timedelta(seconds=self.settings.POLL_SECONDS)
        due = store.next_schedule_due(exclude_keys=paused, jobs=jobs)
        self._plan_at = poll if due is None else min(due, poll)

    def _unplannable_after(self) -> timedelta:
        """How long a schedule whose job has no handler here may stay due, unplanned, before
        this replica parks it: long enough for any replica that has the job to plan it."""
        return max(timedelta(minutes=1), 10 * timedelta(seconds=self.settings.POLL_SECONDS))

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

    def _start(
        self, lease: store.Lease, schedule: Schedule, now: datetime, *, ahead: bool = False
    ) -> None:
        active = ActiveRun(
            lease=lease,
            schedule=schedule,
            deadline=later(now, schedule.timeout),
            claimed_ahead=ahead,
        )
        self.inflight.add(active)
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
            done.set_result(execute(active, self._execution))
            self._finished(active, done)
            return
        future = self._pool.submit(self._run_in_thread, active)
        future.add_done_callback(functools.partial(self._finished, active))

    def _run_in_thread(self, active: ActiveRun) -> Outcome:
        # The thread's connection stays open for its next run (``execute`` closes it when a
        # run broke it); the worker closes them all when it stops.
        if not self.inflight.start(active, later(self.clock.now(), active.schedule.timeout)):
            return release_unstarted(active, self._execution)  # the replica is stopping
        began = time.perf_counter()  # a duration, not an instant: no clock needed
        try:
            if active.claimed_ahead:
                try:
                    store.mark_started(active.lease, now=self.clock.now())
                except STORE_OUTAGE as exc:
                    return give_back_after_outage(active, self._execution, exc)
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
        if future.cancelled():  # claimed ahead, never started: released at shutdown
            self.inflight.finish(active)
            return
        exc = future.exception()
        if exc is not None:
            self.inflight.finish(active)
            with log_scope(active):  # the worker's keys: the handler's context is gone
                log.error("run.crashed", error_type=type(exc).__name__, error=self._loggable(exc))
            return
        outcome = future.result()
        if outcome != Outcome.HANDED_OVER:  # else the completer finishes it
            self._written(active, outcome)

    def _written(self, active: ActiveRun, outcome: Outcome) -> None:
        """A run's outcome is written (or given up on): counted unless the run was abandoned
        (the loop counted it then), then off the books, so a pass that waits for the books to
        empty sees the count."""
        if not active.abandoned:
            with self._lock:
                self._outcomes[outcome.value] += 1
        self.inflight.finish(active)

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
        """Stop the lease keeper and the run threads (after ``run_pass``). Threads left
        behind (cut off) are not waited for: the process must exit without them."""
        self._keeper.stopped.set()
        if self._keeper.is_alive():
            self._keeper.join(timeout=5)
        self._pool.shutdown(wait=not self.stuck_threads, cancel_futures=True)
        self._stop_completer(timeout=30)
        self._close_run_connections()
        self.wakeup.close()

    def run_pass(self) -> PassSummary:
        """Plan, claim and run what is due now, waiting for every run it started.

        A stop request (``runworker --once`` installs SIGTERM) drains as ``serve`` does: the
        grace, then cancellation, release, and runs that ignore it left behind.
        """
        self._ensure_keeper()
        summary = PassSummary()
        before = Counter(self._outcomes)
        while not self.stopping.is_set():
            claimed, asked = self.step()
            summary.claimed += claimed
            while self._busy() and not self.stopping.is_set():
                self._enforce_timeouts()
                self.wakeup.wait(0.5)  # a finished run pokes: this is only an upper bound
            if claimed < asked or asked == 0:
                break
        if self.stopping.is_set():
            self._drain()
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
        if self.settings.RETENTION_SECONDS > 0 and not self.inline:
            self._retention = RetentionKeeper(
                replica=self.replica_id, clock=self.clock, settings=self.settings
            )
            self._retention.start()
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
                # Not an outage (a constraint, a bad row): log it at a bounded rate and try
                # again shortly; a worker never dies of one bad pass.
                self._pass_errors.failed(exc)
                close_old_connections()
                self.wakeup.wait(self._backoff.next_delay())
                continue
            if self.outage.active or self._pass_errors.active:
                self.outage.recovered()
                self._pass_errors.recovered()
                self._backoff.reset()
            if self.exit_code == EXIT_RESTART:
                break
            if self.wakeup.wait(sleep) == "notify":
                self._plan_at = self.clock.now()
        return self._shutdown()

    def _idle_seconds(self) -> float:
        """Sleep until the earliest of: due work, a run's timeout or cut-off, the next
        heartbeat."""
        now = self.clock.now()
        candidates = [now + timedelta(seconds=self.settings.POLL_SECONDS), self._next_heartbeat]
        kill_switch = get_settings()
        if (
            self.inflight.count(RunState.CLAIMED, RunState.RUNNING) < self.concurrency
            and not kill_switch.paused_all
        ):
            due = store.next_wakeup(
                now=now, exclude_keys=kill_switch.PAUSED_SCHEDULES, jobs=self._jobs()
            )
            if due is not None:
                candidates.append(due)
                if self._plan_at is not None:
                    self._plan_at = min(self._plan_at, due)
        grace = timedelta(seconds=self.settings.TIMEOUT_GRACE_SECONDS)
        for active in self.inflight.in_state(RunState.RUNNING):
            cut_off_at = self._cut_off_at(active, grace)
            candidates.append(active.deadline if cut_off_at is None else cut_off_at)
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
            running=len(self.inflight),
        )
        self._next_heartbeat = now + timedelta(seconds=self.settings.HEARTBEAT_SECONDS)

    @staticmethod
    def _cut_off_at(active: ActiveRun, grace: timedelta) -> datetime | None:
        """When a cancelled run that has not returned is cut off: its grace after it was
        cancelled for a timeout, a lost lease or an outage. Shutdown has its own grace."""
        if active.cancelled_at is None or active.reason == CancelReason.SHUTDOWN:
            return None
        return active.cancelled_at + grace

    def _enforce_timeouts(self) -> None:
        """Cancel runs past their deadline; cut off those that ignore a cancellation (timeout,
        lost lease, outage) past the grace."""
        now = self.clock.now()
        grace = timedelta(seconds=self.settings.TIMEOUT_GRACE_SECONDS)
        for active in self.inflight.in_state(RunState.RUNNING):
            cut_off_at = self._cut_off_at(active, grace)
            if cut_off_at is not None and now >= cut_off_at:
                self._cut_off(active)
            elif now >= active.deadline and self.inflight.cancel(active, CancelReason.TIMEOUT, now):
                log.warning("run.timed_out", occurrence=str(active.lease.occurrence_id))

    def _cut_off(self, active: ActiveRun) -> None:
        """Leave behind the thread of a run that ignores cancellation, and record its attempt.

        A Python thread cannot be killed: the replica stops claiming and exits with code 3 so
        its supervisor restarts it, which ends the handler. Anything the abandoned thread
        writes meanwhile is refused by fencing (a timed-out occurrence is no longer processing
        under its token; a lost lease has another holder).
        """
        if not self.inflight.abandon(active):
            return  # it returned after all
        reason = active.reason
        log.error("run.cut_off", occurrence=str(active.lease.occurrence_id), reason=reason)
        until = active.lease.expires_at  # from the loop: never wait out a long outage here
        if reason == CancelReason.TIMEOUT:
            timeout = Cancelled(f"ran past its timeout of {active.schedule.timeout} and its grace")
            record_failure(
                active, timeout, self._execution, outcome=AttemptOutcome.TIMED_OUT, until=until
            )
            outcome = Outcome.TIMED_OUT
        elif reason == CancelReason.OUTAGE:
            outcome = give_back_after_outage(active, self._execution, until=until)
        else:
            outcome = Outcome.LEASE_LOST
        self._cut_off_count += 1
        with self._lock:
            self._outcomes[outcome.value] += 1
        self.exit_code = EXIT_RESTART
        self.stopping.set()

    def _drain(self) -> None:
        """Stop claiming; give running occurrences the grace period; then cancel them and
        release their leases so another replica can take them at once. Runs still going
        after that are left behind (``stuck_threads``)."""
        until = self.clock.now() + self.settings.shutdown_grace
        while self._busy() and not self.forced.is_set() and self.clock.now() < until:
            if self.exit_code == EXIT_RESTART:
                break  # a run was cut off: the process must end, not wait out the grace
            self._enforce_timeouts()
            self.wakeup.wait(min(1.0, (until - self.clock.now()).total_seconds()))
        for active in self.running():
            self.inflight.cancel(active, CancelReason.SHUTDOWN, self.clock.now())
        # After a cut-off the process must end now (that ends the abandoned handler): the
        # other runs are released, not waited for.
        hurry = self.forced.is_set() or self.exit_code == EXIT_RESTART
        settle = self.clock.now() + timedelta(seconds=0 if hurry else 2)
        while self.running() and self.clock.now() < settle:
            self.wakeup.wait(0.1)
        leftovers = [run for run in self.running() if self.inflight.abandon(run)]
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
            self._execution.stop_writing.set()

    def _shutdown(self) -> int:
        log.info("worker.draining", running=len(self.inflight))
        self._try(lambda: self._heartbeat(ReplicaState.DRAINING, force=True))
        self._drain()
        self._keeper.stopped.set()
        if self._retention is not None:
            # A batch cut short by the exit rolls back whole: no statement is left half-done.
            self._retention.stop()
            self._retention.join(timeout=5)
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
