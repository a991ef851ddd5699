"""What a benchmark reads off the machine: PostgreSQL's counters and processes' CPU and memory."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
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


# The scheduler's tables, ours and the peer's: their rows are what a burst writes.
WRITTEN_TABLES = ["django\\_jobs\\_%", "perf\\_%", "procrastinate\\_%"]


@dataclass(frozen=True)
class TableWrites:
    """One table's row counters in ``pg_stat_user_tables`` (cumulative; subtract two reads)."""

    inserted: int = 0
    updated: int = 0  # HOT updates included
    deleted: int = 0
    hot_updated: int = 0

    @property
    def versions(self) -> int:
        """Row versions written: every insert, update and delete makes one."""
        return self.inserted + self.updated + self.deleted

    def __sub__(self, other: TableWrites) -> TableWrites:
        return TableWrites(
            self.inserted - other.inserted,
            self.updated - other.updated,
            self.deleted - other.deleted,
            self.hot_updated - other.hot_updated,
        )


def table_writes(db: Database) -> dict[str, TableWrites]:
    """The row counters of the scheduler's tables. A backend flushes its counters when it
    exits, and at most a second late while busy (PostgreSQL 15 and later: when it goes idle,
    at least a second after its last flush), so read them after the writers have exited."""
    return {
        name: TableWrites(*(int(n) for n in counts))
        for name, *counts in db.rows(
            "SELECT relname, n_tup_ins, n_tup_upd, n_tup_del, n_tup_hot_upd"
            " FROM pg_stat_user_tables WHERE relname LIKE ANY(%s)",
            [WRITTEN_TABLES],
        )
    }


def writes_between(
    after: dict[str, TableWrites], before: dict[str, TableWrites]
) -> dict[str, TableWrites]:
    """Per table, what was written between two reads (tables written nothing left out)."""
    spent = {name: writes - before.get(name, TableWrites()) for name, writes in after.items()}
    return {name: writes for name, writes in sorted(spent.items()) if writes.versions}


@dataclass
class Counters:
    commits: int
    wal_bytes: int
    postgres_cpu: float
    workers_cpu: float
    tables: dict[str, TableWrites] = field(default_factory=dict)
    # From pg_stat_wal (cluster-wide, flushed by each backend as its other statistics are):
    # WAL records written, and how many of them were full-page images.
    wal_records: int = 0
    wal_fpi: int = 0

    @property
    def row_versions(self) -> int:
        return sum(writes.versions for writes in self.tables.values())

    @property
    def hot_updates(self) -> int:
        return sum(writes.hot_updated for writes in self.tables.values())

    @classmethod
    def read(cls, db: Database, worker_pids: list[int]) -> Counters:
        """Read after the workers have exited: a backend flushes its statistics at exit, and
        at most a second late while busy."""
        ((commits, wal, records, fpi),) = db.rows(
            "SELECT xact_commit, pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint,"
            " w.wal_records, w.wal_fpi"
            " FROM pg_stat_database, pg_stat_wal w WHERE datname = current_database()"
        )
        return cls(
            commits=int(commits),
            wal_bytes=int(wal),
            wal_records=int(records),
            wal_fpi=int(fpi),
            postgres_cpu=sum(cpu_seconds(pid) for pid in postgres_pids(db)),
            workers_cpu=sum(cpu_seconds(pid) for pid in worker_pids),
            tables=table_writes(db),
        )

    def __sub__(self, other: Counters) -> Counters:
        return Counters(
            self.commits - other.commits,
            self.wal_bytes - other.wal_bytes,
            self.postgres_cpu - other.postgres_cpu,
            self.workers_cpu - other.workers_cpu,
            writes_between(self.tables, other.tables),
            self.wal_records - other.wal_records,
            self.wal_fpi - other.wal_fpi,
        )
