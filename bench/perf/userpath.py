"""User's path: S schedules declared in a ``schedules.py`` module (``bench/perf/declared``),
written by ``manage.py jobs sync`` and run by replicas started the way a deploy starts them.

1. **Sync.** S new declarations synced, then the same S unchanged: timed in-process
   (``sync_schedules``, what the ratios use) and as ``manage.py jobs sync`` processes (wall
   time; an empty sync's wall time is the process's start-up). The same run's baselines:
   reading the S rows with the ORM, and bulk-inserting S schedule rows (rolled back).
2. **Deploy stall.** S declared and synced, one occurrence due: seconds from starting one
   ``runworker`` process to its first claim, with the declared set unchanged since the last
   sync, then changed (one more declaration), which the replica has to sync.
3. **Burst.** S declared one-offs due at one instant: ``jobs sync``, then W x C replicas
   started ``lead`` seconds before the instant. The thundering second's figures, the
   straggler, and when each replica printed its sync report and first claimed.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from ..chaos.history import ATTEMPTS
from ..postgres import ROOT, Database
from .declared.schedules import declarations, environment
from .measure import Counters, TableWrites, peak_rss_mb, table_writes, writes_between
from .thundering import (
    add_schedules,
    completed,
    our_burst,
    percentile,
    spawn_replica,
    stop_replicas,
    wait_for,
)

NOOP, ATOMIC = "perf.noop", "perf.atomic"
SYNC_LINE = "schedules synced:"  # what runworker and jobs sync print after their sync
MARGIN = timedelta(seconds=1)  # between the replicas' lead and the due instant


def reset(db: Database) -> None:
    """Empty every django_jobs table (audit trail, consumed one-offs and sync state too) and
    the atomic handler's."""
    with psycopg.connect(db.url, autocommit=True) as conn:
        names = [
            name
            for (name,) in conn.execute(
                "SELECT tablename FROM pg_tables"
                " WHERE schemaname = current_schema() AND tablename LIKE 'django\\_jobs\\_%'"
            )
        ]
        tables = sql.SQL(", ").join(sql.Identifier(n) for n in [*names, "perf_write"])
        conn.execute(sql.SQL("TRUNCATE {} CASCADE").format(tables))


def whole_second(instant: datetime) -> datetime:
    return instant.replace(microsecond=0)


def jobs_sync(db: Database, env: dict[str, str]) -> tuple[float, str]:
    """``manage.py jobs sync`` as a process declaring what ``env`` says: its wall time (start-up
    included) and its report's summary."""
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-W", "ignore", str(ROOT / "manage.py"), "jobs", "sync"],
        cwd=ROOT,
        env={
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "bench.perf.settings",
            "DATABASE_URL": db.url,
            "PERF_ROLE": "sync",
            **env,
        },
        capture_output=True,
        text=True,
        timeout=1800,
    )
    wall = time.monotonic() - started
    if done.returncode:
        raise RuntimeError(f"jobs sync exited {done.returncode}: {done.stderr[-2000:]}")
    lines = [line for line in done.stdout.splitlines() if SYNC_LINE in line]
    return wall, lines[-1].split(SYNC_LINE, 1)[1].strip() if lines else ""


def flushed_writes(db: Database) -> dict[str, TableWrites]:
    """The scheduler tables' row counters, once this process's own backend has flushed its
    statistics (it does before it answers its next statement)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_force_next_flush()")
    return table_writes(db)


def fastest(action: Callable[[], object], times: int = 3) -> float:
    """The shortest of ``times`` runs of ``action``, in seconds."""
    spent = []
    for _ in range(times):
        started = time.perf_counter()
        action()
        spent.append(time.perf_counter() - started)
    return min(spent)


def timed_sync(db: Database, declared: list[Any]) -> tuple[float, dict[str, TableWrites]]:
    """``sync_schedules`` of ``declared`` in this process: seconds, and rows it wrote."""
    from django_jobs import services

    before = flushed_writes(db)
    started = time.perf_counter()
    services.sync_schedules(declared, now=services.now())
    seconds = time.perf_counter() - started
    return seconds, writes_between(flushed_writes(db), before)


def orm_read_seconds(count: int) -> float:
    """Baseline: reading the S declared rows with the ORM, the fastest of three reads."""
    from django_jobs.models import Origin, Schedule

    def read() -> None:
        if len(list(Schedule.objects.filter(origin=Origin.CODE))) < count:
            raise RuntimeError("the declared schedules are not all there")

    return fastest(read)


def bulk_insert_seconds(declared: list[Any]) -> float:
    """Baseline: ``bulk_create`` of the same S schedule rows (fresh keys) in a transaction
    rolled back, the fastest of three."""
    from django.db import transaction

    from django_jobs.models import Origin, Schedule

    now = datetime.now(UTC)

    def insert() -> None:
        with transaction.atomic():
            Schedule.objects.bulk_create(
                Schedule(
                    tenant=d.tenant,
                    key=f"perf.b{n:07d}",
                    origin=Origin.CODE,
                    created_at=now,
                    updated_at=now,
                    next_due_at=now,
                    **d.record_fields(),
                )
                for n, d in enumerate(declared)
            )
            transaction.set_rollback(True)

    return fastest(insert)


def sync_phase(db: Database, count: int, *, due: datetime) -> dict[str, Any]:
    """Step 1: the sync of S new, then S unchanged declarations, against the baselines."""
    declared = declarations(count, due=due, job=NOOP, register=False)
    env = environment(count, due=due, job=NOOP)
    reset(db)
    startup, _ = jobs_sync(db, {"PERF_DECLARED": "0"})
    new_wall, new_report = jobs_sync(db, env)
    unchanged_wall, unchanged_report = jobs_sync(db, env)
    reset(db)
    new_s, new_writes = timed_sync(db, declared)
    unchanged_s, unchanged_writes = timed_sync(db, declared)
    read_s, bulk_s = orm_read_seconds(count), bulk_insert_seconds(declared)
    return {
        "scenario": "user's path: sync",
        "declared": count,
        "startup_process_s": startup,
        "sync_new_process_s": new_wall,
        "sync_unchanged_process_s": unchanged_wall,
        "sync_new_s": new_s,
        "sync_unchanged_s": unchanged_s,
        "orm_read_s": read_s,
        "bulk_insert_s": bulk_s,
        "unchanged_vs_read": unchanged_s / read_s,
        "new_vs_bulk_insert": new_s / bulk_s,
        "new_row_versions_per_declaration": _versions(new_writes) / count,
        "unchanged_row_versions_per_declaration": _versions(unchanged_writes) / count,
        "new_row_versions_by_table": {t: asdict(w) for t, w in new_writes.items()},
        "unchanged_row_versions_by_table": {t: asdict(w) for t, w in unchanged_writes.items()},
        "new_report": new_report,
        "unchanged_report": unchanged_report,
    }


def _versions(writes: dict[str, TableWrites]) -> int:
    return sum(w.versions for w in writes.values())


class StartUp:
    """When each replica started at ``started`` (Unix time) printed its sync report, read
    from its log at every poll of a wait."""

    def __init__(self, started: float, logs: dict[str, Path]) -> None:
        self.started = started
        self.logs = logs
        self.synced: dict[str, float] = {}  # seconds from ``started``
        self.reports: dict[str, str] = {}

    def poll(self) -> None:
        for name, path in self.logs.items():
            if name in self.synced or not path.exists():
                continue
            lines = path.read_text(errors="replace").splitlines()
            found = [line for line in lines if SYNC_LINE in line]
            if found:
                self.synced[name] = time.time() - self.started
                self.reports[name] = found[0].split(SYNC_LINE, 1)[1].strip()

    def wait(
        self, condition: Callable[[], bool], *, timeout: float, what: str, every: float = 0.1
    ) -> None:
        def polled() -> bool:
            self.poll()
            return condition()

        wait_for(polled, timeout=timeout, what=what, every=every)


def first_claims() -> dict[str, datetime]:
    """Each replica's first attempt's start (an ended attempt's row, or a lease held, on its
    occurrence row until it ends), read on the runner's own connection (kept open, so
    polling it costs the server no new backend)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(f"SELECT replica, min(started_at) FROM ({ATTEMPTS}) a GROUP BY 1")
        return dict(cursor.fetchall())


def sync_state(db: Database) -> dict[str, Any]:
    """The last sync's record (``django_jobs_syncstate``), empty where there is none."""
    ((exists,),) = db.rows("SELECT to_regclass('django_jobs_syncstate') IS NOT NULL")
    fields = ("synced_by", "schedules", "seconds", "synced_at")
    rows = db.rows(f"SELECT {', '.join(fields)} FROM django_jobs_syncstate") if exists else []
    if not rows:
        return {}
    return {
        name: str(value) if isinstance(value, datetime) else value
        for name, value in zip(fields, rows[0], strict=True)
    }


def stall(
    db: Database, count: int, *, due: datetime, changed: bool, concurrency: int, log_dir: Path
) -> dict[str, Any]:
    """Step 2: one replica started while a run-time schedule is due (the S declarations are
    due at ``due``, later): seconds from its process start to its first claim."""
    name = f"stall-{'changed' if changed else 'unchanged'}"
    add_schedules(1, job=NOOP, due=datetime.now(UTC), prefix=f"perf.{name}.")
    started = time.time()
    env = environment(count, due=due, job=NOOP, extra=changed)
    process = spawn_replica(db, name, concurrency, log_dir, env)
    watch = StartUp(started, {name: log_dir / f"{name}.log"})
    try:
        watch.wait(
            lambda: f"perf-{name}" in first_claims(),
            timeout=600 + count / 100,
            what=f"the first claim of replica {name}",
            every=0.05,
        )
        # A replica may sync beside serving: its report can come after its first claim.
        with contextlib.suppress(TimeoutError):
            watch.wait(lambda: name in watch.synced, timeout=30, what=f"{name}'s report")
    finally:
        stop_replicas([process])
    return {
        "scenario": "user's path: deploy stall",
        "declared": count,
        "declared_set": "changed (one more)" if changed else "unchanged since the last sync",
        "first_claim_s": first_claims()[f"perf-{name}"].timestamp() - started,
        "sync_report_s": watch.synced.get(name),
        "sync_report": watch.reports.get(name),
        "sync_state": sync_state(db),
    }


def backends_gone(db: Database, names: list[str]) -> bool:
    """Whether the server processes of these replicas have exited (and flushed counters)."""
    return not db.rows(
        "SELECT 1 FROM pg_stat_activity"
        " WHERE datname = current_database() AND application_name = ANY(%s)",
        [[f"perf-{name}" for name in names]],
    )


def burst(
    db: Database,
    count: int,
    *,
    job: str,
    lead: float,
    replicas: int,
    concurrency: int,
    sync_estimate: float,
    log_dir: Path,
) -> dict[str, Any]:
    """Step 3: sync S one-offs due at one instant, start the replicas ``lead`` seconds before
    it, and measure the burst from that instant to the last completion."""
    reset(db)
    ahead = 2 * sync_estimate + 2 + lead  # the deploy's sync, then the replicas' lead
    due = whole_second(datetime.now(UTC) + timedelta(seconds=ahead) + MARGIN)
    env = environment(count, due=due, job=job)
    jobs_sync(db, env)
    wait_for(
        lambda: datetime.now(UTC) >= due - timedelta(seconds=lead),
        timeout=ahead + 60,
        what="the deploy",
    )
    names = [f"r{n}" for n in range(1, replicas + 1)]
    started = time.time()
    processes = [spawn_replica(db, name, concurrency, log_dir, env) for name in names]
    watch = StartUp(started, {name: log_dir / f"{name}.log" for name in names})
    spent, cpu, rss = _measure_burst(db, count, due, processes, watch)
    return {
        **_burst_row(
            db, job, (count, replicas, concurrency), due=due, spent=spent, cpu=cpu, rss=rss
        ),
        "lead_s": due.timestamp() - started,
        "slowest_sync_report_s": max(watch.synced.values(), default=None),
        "replica_sync_report_s": watch.synced,
        "replica_first_claim_after_due_s": {
            replica: (at - due).total_seconds() for replica, at in first_claims().items()
        },
        "sync_reports": watch.reports,
        "makespan_vs_procrastinate": None,
        "makespan_vs_floor": None,
    }


def _measure_burst(
    db: Database,
    count: int,
    due: datetime,
    processes: list[subprocess.Popen[bytes]],
    watch: StartUp,
) -> tuple[Counters, Counters, float]:
    """Counters from just before ``due`` to the last completion (CPU and peak RSS while the
    replicas live; commits, WAL and rows once their backends have exited)."""
    pids = [p.pid for p in processes]
    try:
        watch.wait(
            lambda: datetime.now(UTC) >= due - timedelta(seconds=0.3),
            timeout=(due - datetime.now(UTC)).total_seconds() + 10,
            what="the due instant",
        )
        before = Counters.read(db, pids)
        watch.wait(
            lambda: completed(db) >= count,
            timeout=1800,
            what=f"{count} completions",
            every=0.2,
        )
        rss = max(peak_rss_mb(pid) for pid in pids)
        cpu = Counters.read(db, pids) - before
    finally:
        stop_replicas(processes)
    wait_for(lambda: backends_gone(db, list(watch.logs)), timeout=30, what="the replicas' backends")
    return Counters.read(db, []) - before, cpu, rss


def _burst_row(
    db: Database,
    job: str,
    shape: tuple[int, int, int],
    *,
    due: datetime,
    spent: Counters,
    cpu: Counters,
    rss: float,
) -> dict[str, Any]:
    """The thundering second's figures for the burst (``shape``: S, W, C), and its straggler:
    the latest start's lateness, and how far it lies beyond the p99."""
    row, late = our_burst(
        db,
        f"user's path ({job.split('.')[1]})",
        shape=shape,
        due=due,
        spent=spent,
        cpu=cpu,
        rss=rss,
    )
    p99 = percentile(late, 99)
    return {
        **row,
        "last_start_lateness_s": max(late),
        "straggler_s": max(late) - p99 if p99 is not None else None,
    }


def bursts(
    db: Database,
    *,
    declared: int,
    lead: float,
    replicas: int,
    concurrency: int,
    jobs: tuple[str, ...] = (NOOP, ATOMIC),
    sync_estimate: float | None = None,
    log_dir: Path,
) -> list[dict[str, Any]]:
    """Step 3: a burst row for each of ``jobs``. Alone (``--scenarios burst``, no
    ``sync_estimate`` measured by step 1), the deploy's sync is allowed a second per 2,000
    declarations, and at least 5 s."""
    estimate = sync_estimate if sync_estimate is not None else max(5.0, declared / 2000)
    return [
        burst(
            db,
            declared,
            job=job,
            lead=lead,
            replicas=replicas,
            concurrency=concurrency,
            sync_estimate=estimate,
            log_dir=log_dir,
        )
        for job in jobs
    ]


def run(
    db: Database,
    *,
    declared: int,
    lead: float,
    replicas: int,
    concurrency: int,
    log_dir: Path,
) -> dict[str, list[dict[str, Any]]]:
    """The three steps for S = ``declared``: one sync row, two stall rows, a burst row for the
    no-op handler and one for the atomic handler."""
    later = whole_second(datetime.now(UTC) + timedelta(days=1))  # declared, never due here
    synced = sync_phase(db, declared, due=later)
    jobs_sync(db, environment(declared, due=later, job=NOOP))  # the deploy's own sync
    stalls = [
        stall(db, declared, due=later, changed=changed, concurrency=concurrency, log_dir=log_dir)
        for changed in (False, True)
    ]
    rows = bursts(
        db,
        declared=declared,
        lead=lead,
        replicas=replicas,
        concurrency=concurrency,
        sync_estimate=synced["sync_new_process_s"],
        log_dir=log_dir,
    )
    return {"userpath sync": [synced], "userpath stall": stalls, "userpath burst": rows}
