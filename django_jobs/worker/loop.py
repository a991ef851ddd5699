"""The worker loop: plan, claim, run, keep leases, survive outages, shut down gracefully.

``Worker`` holds the replica's parts and drives them from one thread:

- ``replica.py``: its id, clock sync, and its heartbeat, written on a thread of its own while
  this loop shows progress (``Progress``); ``cadence.py``: when it plans;
- ``claims.py``: claiming for its free run threads; ``threads.py``: the run threads;
  ``starts.py``: starts of runs claimed ahead, written together;
  ``executor.py``: one run and its outcome write; ``completer.py``: completions written in
  batches; ``inflight.py``: the books of every run it holds a lease for;
- ``deadlines.py``: timeouts, lease margins and cut-offs, on a thread of their own;
  ``leases.py``: lease renewal;
- ``outage.py``: what to do when the store fails; ``outcomes.py``: what a run ended as;
- ``supervision.py``: what a crash of any of its threads means;
- ``shutdown.py``: the drain.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta

import structlog
from django.db import DatabaseError, connections

from ..clock import Clock, SystemClock
from ..conf import JobsSettings, get_settings
from ..models import ReplicaState
from ..registry import Registry, registry
from .cadence import PlanCadence
from .claims import Claims, Queue, StepResult
from .completer import Completer
from .deadlines import Deadlines, DeadlineWatch
from .executor import Execution
from .inflight import ActiveRun, InFlight, RunState
from .leases import LeaseKeeper
from .outage import RETRY_CAP_SECONDS, LoopOutage
from .outcomes import Outcome, PassSummary, Tally
from .replica import (
    CLOCK_SAMPLES,
    STALL_HEARTBEATS,
    Heartbeat,
    HeartbeatKeeper,
    Progress,
    default_replica_id,
    sync_clock,
)
from .retention import RetentionKeeper
from .shutdown import Drain, try_store
from .supervision import RESTART_CAP_SECONDS, Role, Supervisor
from .threads import RunThreads
from .wakeup import Wakeup, conninfo_from_django

log = structlog.get_logger("django_jobs.worker")

EXIT_RESTART = 3  # a run ignored cancellation and was cut off: restart this process
EXIT_THREAD_FAILED = 4  # a thread of the replica crashed too often: restart this process

# Seconds ``run_pass`` waits for its runs between timeout checks; a finished run pokes the
# loop awake, so this is only an upper bound.
PASS_WAIT_SECONDS = 0.5
# How long an idle replica waits before it looks again at a queue it found at its fleet-wide
# limit (``DJANGO_JOBS["QUEUES"]``): a slot frees when a run on any replica ends, which wakes
# no other replica.
FULL_QUEUE_WAIT_SECONDS = 0.5
# How long ``close`` (after ``run_pass``) waits for the completer's last writes.
COMPLETER_CLOSE_SECONDS = 30.0
THREAD_JOIN_SECONDS = 5.0  # the lease keeper's and retention's threads, at exit


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
        queues: Sequence[tuple[str, int]] = (),
    ) -> None:
        """``inline`` runs each occurrence in the calling thread, inside the caller's
        transaction (for tests; see ``django_jobs.testing.run_due``). ``listen`` opens the
        LISTEN connection that lets other replicas wake this one. ``queues``: the queues it
        serves, each with its run threads (``runworker --queue NAME[:N]``); their sum is its
        concurrency. None given: every queue, with ``concurrency`` threads."""
        self.queues = tuple(Queue(name, threads) for name, threads in queues)
        if self.queues:
            concurrency = sum(q.concurrency for q in self.queues)
        if concurrency < 1:
            raise ValueError(f"concurrency must be 1 or more, got {concurrency}")
        self.replica_id = replica_id or default_replica_id()
        self.clock = clock or SystemClock()
        self.tenant, self.concurrency, self.inline = tenant, concurrency, inline
        self.settings = settings or get_settings()
        self.stopping = threading.Event()  # stop claiming, drain, release, exit
        self.forced = threading.Event()  # a second signal: exit fast
        self.exit_code = 0
        self.failed_role: Role | None = None  # the thread whose crashes stopped the replica
        # Run threads that never returned (cut off, or still running at exit): the process
        # must end without waiting for them (``manage.py runworker`` uses ``os._exit``).
        self.stuck_threads = 0
        self.started_at = self.clock.now()
        self.wakeup = Wakeup(conninfo_from_django() if listen else None)
        # Every run this replica holds a lease for; the loop, the run threads, the keeper and
        # the completer change it only through its transitions.
        self.inflight = InFlight(on_change=self._changed)
        patterns = self.settings.REDACT_PATTERNS
        self.supervisor = Supervisor(on_failure=self._thread_failed, patterns=patterns)
        self._outages = LoopOutage(self.clock, patterns=patterns, wakeup=self.wakeup)
        self.outage = self._outages.outage  # the replica's outage log, shared by every thread
        self._tally = Tally()
        self._cadence = PlanCadence(
            replica_id=self.replica_id,
            settings=self.settings,
            jobs=jobs,
            queues=[q.name for q in self.queues] if self.queues else None,
        )
        self._assemble_heartbeat(concurrency)
        self._retention: RetentionKeeper | None = None  # started by ``serve``
        self._assemble_runs(jobs)
        self._assemble_guards()

    def _assemble_heartbeat(self, concurrency: int) -> None:
        """The replica's heartbeat row, and the thread that writes it while the loop moves."""
        self._heartbeat = Heartbeat(
            replica_id=self.replica_id,
            clock=self.clock,
            started_at=self.started_at,
            concurrency=concurrency,
            inflight=self.inflight,
            every=timedelta(seconds=self.settings.HEARTBEAT_SECONDS),
            lease=self.settings.lease,
            drain=self.settings.shutdown_grace
            + timedelta(seconds=self.settings.TIMEOUT_GRACE_SECONDS),
            queues=[q._asdict() for q in self.queues],
        )
        self._progress = Progress(STALL_HEARTBEATS * self.settings.HEARTBEAT_SECONDS)
        self._heartbeat_keeper = HeartbeatKeeper(
            self._heartbeat,
            progress=self._progress,
            outage=self.outage,
            supervisor=self.supervisor,
        )

    def _assemble_runs(self, jobs: Registry) -> None:
        """The parts that claim, run and write the runs, each holding the ones it needs."""
        stop_writing = threading.Event()  # a forced stop: give up on writes still failing
        self._execution = Execution(
            clock=self.clock,
            settings=self.settings,
            registry=jobs,
            stop_writing=stop_writing,
            # Completions of runs that need nothing else committed are group-committed by
            # the completer (inline runs, in a caller's transaction, write their own).
            hand_over=None if self.inline else self._hand_over,
            outage=self.outage,
        )
        self._threads = RunThreads(
            concurrency=self.concurrency,
            clock=self.clock,
            inflight=self.inflight,
            execution=self._execution,
            tally=self._tally,
            inline=self.inline,
            supervisor=self.supervisor,
        )
        self._completer = Completer(
            clock=self.clock,
            on_done=self._threads.written,
            stop_writing=stop_writing,
            max_batch=max(self.settings.CLAIM_BATCH_SIZE, self.concurrency),
            patterns=self.settings.REDACT_PATTERNS,
            outage=self.outage,
            supervisor=self.supervisor,
        )
        self._claims = Claims(
            replica_id=self.replica_id,
            tenant=self.tenant,
            concurrency=self.concurrency,
            settings=self.settings,
            inflight=self.inflight,
            threads=self._threads,
            stopping=self.stopping,
            queues=self.queues,
        )

    def _assemble_guards(self) -> None:
        """The parts that watch the runs: their deadlines, their leases, and the drain."""
        self._deadlines = Deadlines(
            clock=self.clock,
            settings=self.settings,
            inflight=self.inflight,
            execution=self._execution,
            tally=self._tally,
            on_cut_off=self._must_restart,
        )
        self._watch = DeadlineWatch(self._deadlines, supervisor=self.supervisor)
        self._keeper = LeaseKeeper(
            owner=self.replica_id,
            clock=self.clock,
            lease_for=self.settings.lease,
            inflight=self.inflight,
            outage=self.outage,
            on_cancel=self.wakeup.poke,
            grace=self._deadlines.grace,
            supervisor=self.supervisor,
        )
        self._deadlines.stalled = self._keeper.stalled
        self._drainer = Drain(
            clock=self.clock,
            grace=self.settings.shutdown_grace,
            inflight=self.inflight,
            deadlines=self._deadlines,
            completer=self._completer,
            wakeup=self.wakeup,
            forced=self.forced,
            stop_writing=self._execution.stop_writing,
            cut_off=lambda: self.exit_code != 0,
            patterns=self.settings.REDACT_PATTERNS,
            timeout_grace=self._deadlines.grace,
            outage=self.outage,
        )

    # --- shared state ---------------------------------------------------------------

    def running(self) -> list[ActiveRun]:
        """Runs whose handler has not returned yet (or, claimed ahead, not started)."""
        return self.inflight.running()

    def counted(self) -> Counter[str]:
        """What this replica's runs ended as since it started (``Outcome`` values), for its
        metrics (``runworker --metrics-port``)."""
        return self._tally.snapshot()

    def _busy(self) -> bool:
        return len(self.inflight) > 0

    def _changed(self) -> None:
        """A run started, was cancelled or left the books: wake the loop and the watch."""
        self.wakeup.poke()
        self._watch.poke()

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

    def _must_restart(self) -> None:
        """A run was cut off: stop claiming and exit with ``EXIT_RESTART``."""
        if not self.exit_code:
            self.exit_code = EXIT_RESTART
        self.stopping.set()
        self.wakeup.poke()

    def _thread_failed(self, role: Role, exc: BaseException) -> None:
        """A thread crashed too often (``supervision.py``): stop safely. Claims stop now; the
        runs are cancelled at once and given ``TIMEOUT_GRACE_SECONDS`` to return, then cut
        off and released; the process exits ``EXIT_THREAD_FAILED``."""
        self.failed_role = role
        self.exit_code = EXIT_THREAD_FAILED
        log.error("worker.failed", role=role.value, exit_code=EXIT_THREAD_FAILED)
        self.stopping.set()
        self.wakeup.poke()

    def threads(self) -> dict[str, str]:
        """Each of this replica's threads and its status (``supervision.Status``)."""
        return self.supervisor.status()

    def sync_clock(self, samples: int = CLOCK_SAMPLES) -> None:
        """Align a SystemClock with the database's so all replicas share one timeline."""
        sync_clock(self.clock, samples)

    # --- one step -------------------------------------------------------------------

    def step(self) -> StepResult:
        """Plan what has come due and start as many due occurrences as there are free slots
        (``claims.Claims``)."""
        now = self.clock.now()
        if self._cadence.due(now):
            self._cadence.plan(now)
            self._progress.mark()
        if not self.supervisor.guards_alive():
            return StepResult(0, 0)  # nothing new while a guard of the runs is down
        return self._claims.claim(now)

    def _enforce_timeouts(self) -> None:
        self._deadlines.enforce()

    # --- run what is due now (--once) -----------------------------------------------

    def _ensure_keeper(self) -> None:
        """Start the guards of the runs: the lease keeper, the deadline watch, the completer.
        An inline worker starts none: its runs end inside the call that started them, in the
        caller's transaction, which another connection could not renew anyway."""
        if self.inline:
            return
        if self._keeper.ident is None and not self._keeper.stopped.is_set():
            self._keeper.start()
        if self._watch.ident is None:
            self._watch.start()
        if self._completer.ident is None:
            self._completer.start()

    def close(self) -> None:
        """Stop the lease keeper and the run threads (after ``run_pass``). Threads left
        behind (cut off) are not waited for: the process must exit without them."""
        self._keeper.stopped.set()
        if self._keeper.is_alive():
            self._keeper.join(timeout=THREAD_JOIN_SECONDS)
        self._watch.stop()
        self._threads.shutdown(wait=not self.stuck_threads)
        self._completer.stop_and_wait(COMPLETER_CLOSE_SECONDS)
        self._threads.close_connections()
        self.wakeup.close()

    def run_pass(self) -> PassSummary:
        """Plan, claim and run what is due now, waiting for every run it started.

        A stop request (``runworker --once`` installs SIGTERM) drains as ``serve`` does: the
        grace, then cancellation, release, and runs that ignore it left behind.
        """
        self._ensure_keeper()
        summary = PassSummary()
        before = self._tally.snapshot()
        while not self.stopping.is_set():
            if self.supervisor.restarting():  # a guard is coming back: wait for it
                self.wakeup.wait(PASS_WAIT_SECONDS)
                continue
            claimed, asked = self.step()
            summary.claimed += claimed
            while self._busy() and not self.stopping.is_set():
                self._enforce_timeouts()
                self.wakeup.wait(PASS_WAIT_SECONDS)
            if claimed < asked or asked == 0:
                break
        if self.stopping.is_set():
            self._drain()
        summary.outcomes = self._tally.snapshot() - before
        return summary

    def next_work(self) -> datetime | None:
        """The earliest instant at which planning or claiming has work for this worker
        (``cadence.next_work``): where ``testing.ScheduledJobs`` moves its clock next."""
        return self._cadence.next_work(self.clock.now())

    # --- the long-running loop ------------------------------------------------------

    def start_up(self) -> bool:
        """Sync the clock, waiting out a store outage.

        A worker started while PostgreSQL is down waits for it, with the same backoff and
        bounded logging as a running worker, instead of exiting. Returns False when a stop was
        requested before the store came back. (The schedule sync runs beside serving:
        ``cli.startup.StartupSync``.)
        """
        return self._outages.wait_for_store(self.sync_clock, self.stopping)

    def serve(self) -> int:
        """Run until stopped; return the process exit code (0, or 3 to be restarted)."""
        self._ensure_keeper()
        if self.settings.RETENTION_SECONDS > 0 and not self.inline:
            self._retention = RetentionKeeper(
                replica=self.replica_id,
                clock=self.clock,
                settings=self.settings,
                supervisor=self.supervisor,
            )
            self._retention.start()
        # LISTEN before the first look for work: a NOTIFY of work committed after that look
        # wakes this replica (found by a test under load: a first wait that listened only
        # after the first step missed one, and the work waited for the next poll).
        self.wakeup.listen()
        self._cadence.plan_now(self.clock.now())
        self._progress.mark()
        self._heartbeat_keeper.start()
        log.info(
            "worker.started",
            replica=self.replica_id,
            concurrency=self.concurrency,
            queues=",".join(f"{q.name}:{q.concurrency}" for q in self.queues) or "*",
        )
        while not self.stopping.is_set():
            self._progress.mark()
            try:
                sleep = self._serve_step()
            except DatabaseError as exc:
                self._progress.mark(waiting=RETRY_CAP_SECONDS)  # backing off, not stuck
                self._outages.pass_failed(exc)
                continue
            except Exception as exc:  # a bug: the loop's own pass is supervised too
                self._progress.mark(waiting=RESTART_CAP_SECONDS)
                if self.supervisor.crashed(Role.LOOP, exc):
                    self.wakeup.wait(self.supervisor.restart_delay(Role.LOOP))
                continue
            self._outages.pass_succeeded()
            self.supervisor.recovered(Role.LOOP)
            if self.exit_code:
                break
            self._progress.mark(waiting=sleep)
            if self.wakeup.wait(sleep) == "notify":
                self._cadence.plan_now(self.clock.now())
        return self._shutdown()

    def _serve_step(self) -> float:
        """One pass of ``serve``; returns how long to sleep after it (0: a full batch was
        claimed, more may be due). Deadlines are the watch's (``DeadlineWatch``) and the
        heartbeat is the heartbeat keeper's (``HeartbeatKeeper``), never behind this pass's
        store calls."""
        claimed, asked = self.step()
        return 0.0 if claimed and claimed == asked else self._idle_seconds()

    def _idle_seconds(self) -> float:
        """Sleep until the earliest of: due work (if a thread is free), ``POLL_SECONDS``."""
        now = self.clock.now()
        candidates = [now + timedelta(seconds=self.settings.POLL_SECONDS)]
        free = self.inflight.count(RunState.CLAIMED, RunState.RUNNING) < self.concurrency
        if free and self.supervisor.guards_alive():  # else nothing is claimed: no spinning
            due = self._cadence.next_work(now)
            if due is not None and self._claims.full:
                # A limited queue was at its limit: its due work waits for a slot that a run
                # on any replica frees, so look again shortly instead of at once.
                due = max(due, now + timedelta(seconds=FULL_QUEUE_WAIT_SECONDS))
            if due is not None:
                candidates.append(due)
        return max(0.0, (min(candidates) - now).total_seconds())

    # --- shutdown -------------------------------------------------------------------

    def _drain(self) -> None:
        """Stop claiming; give running occurrences the grace period; then cancel them and
        release their leases so another replica can take them at once (``shutdown.Drain``).
        Runs still going after that are left behind (``stuck_threads``). A replica stopping
        because a thread failed gives its runs no shutdown grace: they are cancelled at once
        and have ``TIMEOUT_GRACE_SECONDS`` to return."""
        self.stuck_threads = self._drainer.run(failed=self.failed_role is not None)

    def _shutdown(self) -> int:
        log.info("worker.draining", running=len(self.inflight))
        self._heartbeat_keeper.stopped.set()
        if self._heartbeat_keeper.is_alive():
            self._heartbeat_keeper.join(timeout=THREAD_JOIN_SECONDS)
        self._try(
            lambda: self._heartbeat.beat(ReplicaState.DRAINING, force=True, threads=self.threads())
        )
        self._drain()
        self._keeper.stopped.set()
        self._watch.stop()
        if self._retention is not None:
            # A batch cut short by the exit rolls back whole: no statement is left half-done.
            self._retention.stop()
            self._retention.join(timeout=THREAD_JOIN_SECONDS)
        self._try(
            lambda: self._heartbeat.beat(ReplicaState.STOPPED, force=True, threads=self.threads())
        )
        self._threads.shutdown(wait=False)
        self._threads.close_connections()
        self.wakeup.close()
        connections.close_all()
        log.info("worker.stopped", exit_code=self.exit_code)
        return self.exit_code

    def _try(self, action: Callable[[], object]) -> None:
        try_store(action, patterns=self.settings.REDACT_PATTERNS, outage=self.outage)


__all__ = [
    "EXIT_RESTART",
    "EXIT_THREAD_FAILED",
    "Outcome",
    "PassSummary",
    "StepResult",
    "Worker",
    "default_replica_id",
]
