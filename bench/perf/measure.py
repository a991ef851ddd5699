"""What a benchmark reads off the machine: PostgreSQL's counters and processes' CPU and memory."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import psycopg

from ..postgres import Database

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU of one process so far (0 when it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def _parent(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (FileNotFoundError, ProcessLookupError):
        return 0


def postgres_pids(db: Database) -> list[int]:
    """The server's postmaster and its children (backends, WAL writer, checkpointer...), found
    from one of our own backends; other servers on the machine are left out."""
    with psycopg.connect(db.url) as conn:  # the backend must live while we look it up
        ((backend,),) = conn.execute("SELECT pg_backend_pid()").fetchall()
        postmaster = _parent(int(backend))
    if not postmaster:
        raise RuntimeError("cannot see PostgreSQL's processes: is the server on this machine?")
    children = [
        int(entry.name)
        for entry in Path("/proc").iterdir()
        if entry.name.isdigit() and _parent(int(entry.name)) == postmaster
    ]
    return [postmaster, *children]


def peak_rss_mb(pid: int) -> float:
    return _status_mb(pid, "VmHWM:")


def rss_mb(pid: int) -> float:
    """The process's resident memory now."""
    return _status_mb(pid, "VmRSS:")


def _status_mb(pid: int, field: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field):
            return int(line.split()[1]) / 1024
    return 0.0


@dataclass
class Counters:
    commits: int
    wal_bytes: int
    postgres_cpu: float
    workers_cpu: float

    @classmethod
    def read(cls, db: Database, worker_pids: list[int]) -> Counters:
        """Read after the workers have exited: a backend flushes its statistics at exit, and
        at most a second late while busy."""
        ((commits, wal),) = db.rows(
            "SELECT xact_commit, pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint"
            " FROM pg_stat_database WHERE datname = current_database()"
        )
        return cls(
            commits=int(commits),
            wal_bytes=int(wal),
            postgres_cpu=sum(cpu_seconds(pid) for pid in postgres_pids(db)),
            workers_cpu=sum(cpu_seconds(pid) for pid in worker_pids),
        )

    def __sub__(self, other: Counters) -> Counters:
        return Counters(
            self.commits - other.commits,
            self.wal_bytes - other.wal_bytes,
            self.postgres_cpu - other.postgres_cpu,
            self.workers_cpu - other.workers_cpu,
        )
