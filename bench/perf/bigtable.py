"""Big table: the occurrence table grown to N finished rows (generated directly), then

1. the claim's latency with a handful of due rows (quiet: nothing else runs);
2. the claim's latency again while automatic retention (``retention.run_pass``, as a serving
   replica's retention thread runs it) deletes the history past its Limit on another thread
   and connection, against the quiet figure;
3. retention alone: a bounded number of budgeted passes, their rows per second, the slowest
   pass and the slowest purge statement.

Every claim is rolled back, so every sample sees the same due rows."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any
from unittest import mock

from ..postgres import Database
from .thundering import RESET, add_schedules, percentile

if TYPE_CHECKING:  # imported where used: they need Django set up
    from django_jobs.clock import Clock
    from django_jobs.conf import JobsSettings
    from django_jobs.worker.retention import RetentionPass

FILL = """
    INSERT INTO django_jobs_occurrence (
        id, schedule_id, tenant, scheduled_at, state, skip_reason, trigger, due_at,
        lease_owner, fencing_token, attempts, failures, started_at, finished_at,
        last_error_type, last_error_message)
    SELECT gen_random_uuid(), %(schedule)s, '', %(start)s::timestamptz + n * interval '1 second',
           'completed', '', 'schedule', %(start)s::timestamptz + n * interval '1 second',
           '', 1, 1, 0, %(start)s::timestamptz + n * interval '1 second',
           %(start)s::timestamptz + n * interval '1 second', '', ''
    FROM generate_series(%(low)s, %(high)s - 1) AS n
"""
CHUNK = 1_000_000  # rows per fill statement


def _fill(db: Database, *, schedule: int, start: datetime, low: int, high: int) -> None:
    """Finished occurrences ``low`` to ``high - 1``, one second apart from ``start``."""
    for first in range(low, high, CHUNK):
        db.execute(
            FILL,
            {"schedule": schedule, "start": start, "low": first, "high": min(high, first + CHUNK)},
        )


def _claim_latency(due: int, samples: int) -> list[float]:
    """Seconds per claim of ``due`` due rows, rolled back each time so every sample sees the
    same table."""
    from django.db import transaction

    from django_jobs import store

    times = []
    for _ in range(samples):
        with transaction.atomic():
            started = time.perf_counter()
            store.claim_runs(
                owner="bench", now=datetime.now(UTC), lease_for=timedelta(seconds=30), limit=due
            )
            times.append(time.perf_counter() - started)
            transaction.set_rollback(True)
    return times


@contextmanager
def _timed_batches(times: list[float]) -> Iterator[None]:
    """Time each purge statement a retention pass runs (the real one, wrapped)."""
    from django_jobs import store

    real = store.purge_page

    def timed(*args: Any, **kwargs: Any) -> int:
        started = time.perf_counter()
        try:
            return real(*args, **kwargs)
        finally:
            times.append(time.perf_counter() - started)

    with mock.patch.object(store, "purge_page", timed):
        yield


def _passes(
    *, clock: Clock, settings: JobsSettings, limit: int, stop: threading.Event
) -> list[RetentionPass]:
    """Retention passes back to back on this thread's connection, until caught up, ``limit``
    passes, or ``stop``."""
    from django_jobs.worker import retention

    done: list[RetentionPass] = []
    while len(done) < limit and not stop.is_set():
        result = retention.run_pass(replica="perf-bench", clock=clock, settings=settings)
        if result is None:
            raise RuntimeError("another session holds the retention lock")
        done.append(result)
        if result.caught_up:
            break
    return done


class _Retention(threading.Thread):
    """Retention passes on a thread and connection of their own, as a serving replica runs
    them (here back to back, as when it has a backlog), until caught up or stopped."""

    def __init__(self, *, clock: Clock, settings: JobsSettings, limit: int) -> None:
        super().__init__(name="perf-retention", daemon=True)
        self.clock, self.settings, self.limit = clock, settings, limit
        self.connected = threading.Event()
        self.finished = threading.Event()
        self.stop = threading.Event()
        self.passes: list[RetentionPass] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        from django.db import connection, connections

        try:
            connection.ensure_connection()
            self.connected.set()
            self.passes = _passes(
                clock=self.clock, settings=self.settings, limit=self.limit, stop=self.stop
            )
        except BaseException as exc:  # handed to the measuring thread
            self.error = exc
        finally:
            self.finished.set()
            self.connected.set()
            connections.close_all()


def run(
    db: Database,
    *,
    rows: int,
    due: int = 50,
    samples: int = 200,
    budget_seconds: float = 5.0,
    max_passes: int = 6,
) -> dict[str, Any]:
    from django_jobs.conf import get_settings
    from django_jobs.models import Limit, Schedule
    from django_jobs.testing import FakeClock
    from django_jobs.worker.planning import plan_due

    db.execute(RESET)
    now = datetime.now(UTC).replace(microsecond=0)
    add_schedules(due, job="perf.noop", due=now - timedelta(seconds=5), prefix="perf.due")
    history = Schedule.objects.get(key="perf.due0000000")
    # Every history row is older than the day the Limit keeps: retention may delete them all.
    start = now - timedelta(seconds=rows + 3600 * 24 * 400)
    filled_at = time.perf_counter()
    _fill(db, schedule=history.pk, start=start, low=0, high=rows)
    db.execute("VACUUM ANALYZE django_jobs_occurrence")
    fill_seconds = time.perf_counter() - filled_at

    # Each measurement starts with the fill (or the refill below) written out: a table that
    # grew over months has no such backlog of dirty pages either.
    db.execute("CHECKPOINT")
    plan_due(now=now)  # the due schedules' occurrences
    quiet = _claim_latency(due, samples)

    # Claims while retention runs on another thread (its own connection), right after the
    # quiet claims so that both see the same machine: sampled for as long as a pass runs,
    # at most ``samples`` of them. Keep the newest day; everything older may go, in passes
    # of at most ``budget_seconds`` with the serving default batch size.
    Limit.objects.update_or_create(schedule=history, defaults={"keep_for": timedelta(days=1)})
    settings = dataclasses.replace(get_settings(), RETENTION_BUDGET_SECONDS=budget_seconds)
    clock = FakeClock(now)
    keeper = _Retention(clock=clock, settings=settings, limit=max_passes)
    keeper.start()
    keeper.connected.wait()
    during: list[float] = []
    while not keeper.finished.is_set() and len(during) < samples:
        during += _claim_latency(due, 1)
    keeper.stop.set()
    keeper.join()
    if keeper.error is not None:
        raise keeper.error

    # Retention alone, on a table of ``rows`` rows again: put back what the passes above
    # deleted (the oldest rows, so ``0`` to ``deleted - 1``), then at most ``max_passes``
    # passes back to back, each purge statement timed.
    _fill(db, schedule=history.pk, start=start, low=0, high=sum(p.deleted for p in keeper.passes))
    db.execute("CHECKPOINT")
    batches: list[float] = []
    with _timed_batches(batches):
        alone = _passes(clock=clock, settings=settings, limit=max_passes, stop=threading.Event())
    deleted = sum(p.deleted for p in alone)
    seconds = sum(p.seconds for p in alone)

    quiet_p50, quiet_p99 = percentile(quiet, 50) or 0, percentile(quiet, 99) or 0
    during_p50, during_p99 = percentile(during, 50), percentile(during, 99)
    return {
        "scenario": "big table",
        "rows": rows,
        "fill_s": fill_seconds,
        "claim_p50_ms": quiet_p50 * 1000,
        "claim_p99_ms": quiet_p99 * 1000,
        "retention_batch": settings.PURGE_BATCH_SIZE,
        "retention_passes": len(alone),
        "retention_deleted": deleted,
        "retention_pass_max_s": max((p.seconds for p in alone), default=0.0),
        "retention_batch_max_ms": max(batches, default=0.0) * 1000,
        "retention_rows_per_s": deleted / seconds if seconds else None,
        "claims_during_retention": len(during),
        "claim_p50_during_ms": during_p50 * 1000 if during_p50 is not None else None,
        "claim_p99_during_ms": during_p99 * 1000 if during_p99 is not None else None,
        "claim_p50_during_ratio": during_p50 / quiet_p50 if during_p50 and quiet_p50 else None,
        "claim_p99_during_ratio": during_p99 / quiet_p99 if during_p99 and quiet_p99 else None,
    }
