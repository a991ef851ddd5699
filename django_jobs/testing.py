"""Helpers for the tests of projects that use django_jobs (and for django_jobs' own).

``ScheduledJobs`` is the recipe for a project's own tests: it syncs the declared schedules at
a fake instant and runs everything that comes due up to another, each at its own instant, as
a worker that is never late would (docs/worker.md, "Testing your jobs"). ``ScheduledJobsMixin``
gives one to each test of a Django ``TestCase``; the pytest fixture ``scheduled_jobs`` is in
``django_jobs.contrib.pytest``.

``FakeClock`` stands still until the test moves it; ``use_clock(fake)`` makes the admin, the
``jobs`` command, the system checks and ``runworker`` read it (``django_jobs.clock.use_clock``);
``run_due`` runs what is due at the clock's instant, once, inline.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from .clock import Clock, ensure_aware_utc, use_clock

__all__ = [
    "ClockBehind",
    "FakeClock",
    "ScheduledJobs",
    "ScheduledJobsMixin",
    "run_due",
    "use_clock",
]

if TYPE_CHECKING:
    from .declarations import Declaration
    from .registry import Registry
    from .services import SyncReport
    from .worker.loop import PassSummary, Worker

# The most passes one ``run_until`` makes: a bound, so that a schedule of every second over a
# year is refused rather than run for hours.
MAX_STEPS = 10_000
# The most passes at one instant while work is still due there: each plans a batch
# (``PLAN_BATCH_SIZE``), so this is far more than any test needs.
SAME_INSTANT_PASSES = 100


class ClockBehind(AssertionError):
    """The test's clock is behind what it asked for: nothing could be due (a record created
    after the clock's instant), or time asked to move backwards."""


class FakeClock:
    """A clock that stands still until a test sets or advances it.

    Unlike freezegun it keeps ``fold`` and zone information intact, so it is the clock to use
    for anything zone-aware (DST transitions).
    """

    def __init__(self, start: datetime) -> None:
        self._now = ensure_aware_utc(start, name="start")
        self._lock = threading.Lock()

    def now(self) -> datetime:
        with self._lock:
            return self._now

    def set(self, instant: datetime) -> None:
        with self._lock:
            self._now = ensure_aware_utc(instant, name="instant")

    def advance(self, delta: timedelta) -> datetime:
        with self._lock:
            self._now = self._now + delta
            return self._now


def run_due(clock: Clock, *, jobs: Registry | None = None, replica_id: str = "test") -> PassSummary:
    """Plan and run everything due at ``clock.now()``, inline, in the caller's transaction:
    one pass, at that one instant (``ScheduledJobs.run_until`` steps through each instant).

    Uses the real store, fencing and policies. Raises ``ClockBehind`` when a schedule
    record was created after ``clock.now()`` (synced at the real time, say, while the clock is
    in the past): nothing of it could be due, and a silent empty pass would pass the test.
    """
    from .registry import registry

    _need_records_behind(clock.now(), (jobs or registry).names())
    worker = _worker(clock, jobs, replica_id)
    try:
        return worker.run_pass()
    finally:
        worker.close()


def _worker(clock: Clock, jobs: Registry | None, replica_id: str) -> Worker:
    from .registry import registry
    from .worker.loop import Worker

    return Worker(
        replica_id=replica_id, clock=clock, jobs=jobs or registry, listen=False, inline=True
    )


def _need_records_behind(now: datetime, jobs: list[str]) -> None:
    """``ClockBehind`` if an active, enabled schedule record of one of ``jobs`` was created
    after ``now`` (not a job's policy record of enqueued work: its work is due when it is
    enqueued for)."""
    from .models import Origin, Schedule

    planned = Schedule.objects.filter(status="active", enabled=True, job__in=jobs).exclude(
        origin=Origin.ENQUEUE
    )
    late = planned.filter(created_at__gt=now).order_by("created_at")
    first = late.values_list("key", "created_at").first()
    if first is not None:
        key, created = first
        raise ClockBehind(
            f"the test clock is at {now.isoformat()}, before schedule {key!r} was created "
            f"({created.isoformat()}): nothing of it can be due yet. Sync at the clock's "
            "instant (ScheduledJobs(start=...).sync(), or call_command('jobs', 'sync') inside "
            "use_clock(clock)) and move the clock forward from there"
        )


class ScheduledJobs:
    """The project's declared schedules under test, on a ``FakeClock`` that starts at
    ``start``: ``sync()`` writes them as created at the clock's instant; ``run_until(at)``
    moves the clock forward to ``at`` and runs everything that comes due on the way, each at
    its own instant (a retry at its backoff's end, too), inline, in the caller's transaction.

    So a monthly report tested over three months runs three times, on time: not once with two
    misfires, as one pass at the end would record. Uses the real store, fencing and policies.
    """

    def __init__(
        self,
        start: datetime,
        *,
        jobs: Registry | None = None,
        declarations: Iterable[Declaration] | None = None,
        replica_id: str = "test",
    ) -> None:
        """``jobs``: the handlers (default: every ``@job``); ``declarations``: the schedules
        ``sync()`` writes (default: every ``schedules.py``'s)."""
        from .logging import log_to_stderr_unless_configured

        # A project that has not configured structlog: its test run shows warnings, not every
        # claim at debug on stdout between the runner's own lines.
        log_to_stderr_unless_configured(logging.WARNING)
        self.clock = FakeClock(start)
        self.jobs, self.replica_id = jobs, replica_id
        self.declarations = None if declarations is None else list(declarations)
        self.synced_at: datetime | None = None

    def now(self) -> datetime:
        return self.clock.now()

    def sync(self) -> SyncReport:
        """Write the declared schedules (every ``schedules.py``), created at the clock's
        instant, as ``manage.py jobs sync`` does."""
        from . import services
        from .declarations import declared

        chosen = declared.all() if self.declarations is None else self.declarations
        with use_clock(self.clock):
            report = services.sync_schedules(chosen, now=self.clock.now(), by="tests")
        self.synced_at = self.clock.now()
        return report

    def run_until(self, at: datetime) -> PassSummary:
        """Move the clock to ``at``, running what comes due on the way at each instant it is
        due; syncs first if ``sync()`` was not called. What the passes claimed and how those
        runs ended. ``ClockBehind`` if ``at`` is before the clock."""
        from .worker.outcomes import PassSummary

        at = ensure_aware_utc(at, name="at")
        if at < self.clock.now():
            raise ClockBehind(
                f"run_until({at.isoformat()}): the test clock is already at "
                f"{self.clock.now().isoformat()}; time only moves forward"
            )
        if self.synced_at is None:
            self.sync()
        total = PassSummary()
        worker = _worker(self.clock, self.jobs, self.replica_id)
        try:
            with use_clock(self.clock):
                self._step_through(worker, at, total)
        finally:
            worker.close()
        return total

    def _step_through(self, worker: Worker, at: datetime, total: PassSummary) -> None:
        """Passes at each instant work is due until ``at``, then at ``at``; another pass at
        the same instant while work is still due there (a pass plans one batch)."""
        repeats = 0
        for _ in range(MAX_STEPS):
            _add(total, worker.run_pass())
            due, now = worker.next_work(), self.clock.now()
            if due is not None and due <= now:
                repeats += 1
                if repeats > SAME_INSTANT_PASSES:
                    raise ClockBehind(
                        f"work due at {due.isoformat()} was still due after "
                        f"{SAME_INSTANT_PASSES} passes at {now.isoformat()}: is it held by "
                        "another replica's lease, or its job not in this registry?"
                    )
                continue
            if now >= at:
                return
            repeats = 0
            self.clock.set(at if due is None else min(due, at))
        raise ClockBehind(
            f"run_until({at.isoformat()}) took {MAX_STEPS} passes and reached only "
            f"{self.clock.now().isoformat()}: test a shorter span"
        )

    def advance(self, delta: timedelta) -> PassSummary:
        """``run_until(now + delta)``."""
        return self.run_until(self.clock.now() + delta)


def _add(total: PassSummary, summary: PassSummary) -> None:
    total.claimed += summary.claimed
    total.outcomes += summary.outcomes


class ScheduledJobsMixin:
    """A Django ``TestCase`` mixin: each test gets ``self.scheduled_jobs``, a
    ``ScheduledJobs`` synced at ``scheduled_jobs_start`` (set it on the class) whose clock the
    whole test reads (``use_clock``: ``enqueue()`` is due at the fake instant), of
    ``scheduled_jobs_registry`` and ``scheduled_jobs_declarations`` when those are set (by
    default every ``@job`` and every ``schedules.py``'s declarations)."""

    scheduled_jobs_start: datetime | None = None
    scheduled_jobs_registry: Registry | None = None
    scheduled_jobs_declarations: Iterable[Declaration] | None = None
    scheduled_jobs: ScheduledJobs

    def setUp(self) -> None:
        super().setUp()  # type: ignore[misc]
        start = self.scheduled_jobs_start
        if start is None:
            raise ClockBehind(
                f"{type(self).__name__}: set scheduled_jobs_start = datetime(..., tzinfo=UTC) "
                "on the class: the instant its schedules are synced at"
            )
        self.scheduled_jobs = ScheduledJobs(
            start, jobs=self.scheduled_jobs_registry, declarations=self.scheduled_jobs_declarations
        )
        # For the whole test, so that enqueue(), run-now and the admin read the fake clock.
        scope = use_clock(self.scheduled_jobs.clock)
        scope.__enter__()
        self.addCleanup(scope.__exit__, None, None, None)  # type: ignore[attr-defined]
        self.scheduled_jobs.sync()
