"""``runworker`` processes, restarted under new names: each life of a slot is an incarnation
(``r2.3`` is slot 2's third), so every attempt in the database names the process that made it.

Two threads act on a slot: the injector (stop, kill, restart) and the supervisor (restart a
replica that exited by itself). The slot owns its process and lives and changes them under its
lock, so the supervisor never mistakes an injected death for one of its own to restart; each
fault names the life it hit as the slot reports it, not as it was a moment before.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ..postgres import ROOT


@dataclass
class Incarnation:
    name: str
    skew_seconds: float
    started: datetime
    log_path: Path
    ended: datetime | None = None
    ended_by: str = ""  # sigterm, sigkill, or "" when it exited by itself
    exit_code: int | None = None
    pid: int | None = None
    peak_rss_kib: int | None = None  # the largest VmHWM sampled while it ran

    @property
    def booted(self) -> bool:
        """Whether the worker has logged an event: by then ``runworker`` has installed its
        SIGTERM handler (before, SIGTERM ends the booting process with -15, no drain)."""
        text = self.log_path.read_text(errors="replace")
        return text.startswith("{") or "\n{" in text

    def events(self) -> list[dict[str, Any]]:
        found = []
        for line in self.log_path.read_text(errors="replace").splitlines():
            if line.startswith("{"):
                try:
                    found.append(json.loads(line))
                except json.JSONDecodeError:
                    continue
        return found


@dataclass
class Slot:
    number: int
    concurrency: int
    env: dict[str, str]
    log_dir: Path
    lives: list[Incarnation] = field(default_factory=list)
    process: subprocess.Popen[bytes] | None = None
    _lock: threading.RLock = field(default_factory=threading.RLock, repr=False, init=False)

    @property
    def current(self) -> Incarnation:
        return self.lives[-1]

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self, skew_seconds: float = 0.0) -> Incarnation:
        with self._lock:
            return self._start(skew_seconds)

    def _start(self, skew_seconds: float) -> Incarnation:
        name = f"r{self.number}.{len(self.lives) + 1}"
        life = Incarnation(name, skew_seconds, datetime.now(UTC), self.log_dir / f"{name}.log")
        env = {
            **self.env,
            "CHAOS_REPLICA": name,
            "CHAOS_CLOCK_SKEW_SECONDS": str(skew_seconds),
            "PYTHONUNBUFFERED": "1",
        }
        with life.log_path.open("w") as log:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-W",
                    "ignore",
                    str(ROOT / "manage.py"),
                    "runworker",
                    "--replica-id",
                    name,
                    "--concurrency",
                    str(self.concurrency),
                ],
                cwd=ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        life.pid = self.process.pid
        self.lives.append(life)
        return life

    def _ended(self, by: str, code: int) -> None:
        self.current.ended = self.current.ended or datetime.now(UTC)
        self.current.ended_by = by
        self.current.exit_code = code

    def kill(self) -> tuple[str, datetime]:
        """SIGKILL the current life; return its name and when."""
        with self._lock:
            assert self.process is not None
            at = datetime.now(UTC)
            self.process.send_signal(signal.SIGKILL)
            self.current.ended = at
            self._ended("sigkill", self.process.wait(timeout=30))
            return self.current.name, at

    def terminate(self, timeout: float = 60) -> tuple[str, int]:
        """SIGTERM and wait for the drain; a worker that overstays ``timeout`` is killed.
        Return the life's name and exit code."""
        with self._lock:
            return self.current.name, self._terminate(timeout)

    def _terminate(self, timeout: float) -> int:
        assert self.process is not None
        self.process.send_signal(signal.SIGCONT)
        self.current.ended = datetime.now(UTC)
        self.process.send_signal(signal.SIGTERM)
        try:
            code = self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            code = self.process.wait(timeout=30)
            self._ended("sigterm-overstayed", code)
            return code
        self._ended("sigterm", code)
        return code

    def wait_booted(self, timeout: float = 60) -> None:
        """Wait until the current life has booted or exited (the supervisor may restart the
        slot meanwhile: then its new life), so that a SIGTERM reaches a running worker, as a
        deploy's does."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if not self.alive or self.current.booted:
                    return
            time.sleep(0.1)

    def pause(self) -> tuple[str, datetime]:
        """SIGSTOP the current life; return its name and when."""
        with self._lock:
            assert self.process is not None
            self.process.send_signal(signal.SIGSTOP)
            return self.current.name, datetime.now(UTC)

    def resume(self) -> None:
        with self._lock:
            assert self.process is not None
            self.process.send_signal(signal.SIGCONT)

    def reap(self) -> bool:
        """Record an exit nobody asked for; True when the process had died by itself."""
        with self._lock:
            if self.process is None or self.current.exit_code is not None:
                return False
            code = self.process.poll()
            if code is None:
                return False
            self._ended("", code)
            return True

    def sample_memory(self) -> None:
        """Note the current life's peak resident memory so far (its ``VmHWM``). Skipped while
        the injector acts on this slot: its process and its life may not match then."""
        if not self._lock.acquire(blocking=False):
            return
        try:
            if self.process is None or not self.lives or self.process.poll() is not None:
                return
            peak = _peak_rss_kib(self.process.pid)
            if peak is not None:
                self.current.peak_rss_kib = max(self.current.peak_rss_kib or 0, peak)
        finally:
            self._lock.release()

    def restart_if_exited(self) -> tuple[Incarnation, Incarnation] | None:
        """Start a new life, with the same clock skew, if the current one exited by itself;
        return the life that ended and the new one. Skipped while the injector is acting on
        this slot (it restarts what it stops)."""
        if not self._lock.acquire(blocking=False):
            return None
        try:
            if not self.reap():
                return None
            ended = self.current
            return ended, self._start(ended.skew_seconds)
        finally:
            self._lock.release()


def _peak_rss_kib(pid: int) -> int | None:
    """A process's peak resident set size so far (``VmHWM``, KiB), None once it has gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    for line in status.splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return None


class Supervisor(threading.Thread):
    """Restarts replicas that exit by themselves (the crasher kills one, a replica that cut off
    a run exits 3 to be restarted) within ``every`` seconds, as a process supervisor would,
    and samples each replica's peak memory as often, as its cgroup's accounting would."""

    def __init__(
        self, slots: list[Slot], *, log: Callable[[str], None], every: float = 0.2
    ) -> None:
        super().__init__(name="chaos-supervisor", daemon=True)
        self.slots, self.log, self.every = slots, log, every
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(self.every):
            for slot in self.slots:
                slot.sample_memory()
                restarted = slot.restart_if_exited()
                if restarted is not None:
                    ended, started = restarted
                    self.log(
                        f"{ended.name} exited by itself (code {ended.exit_code});"
                        f" restarted as {started.name}"
                    )

    def stop(self) -> None:
        self.stopped.set()
        if self.is_alive():
            self.join(timeout=30)


def wait_for(condition: Any, *, timeout: float, what: str, every: float = 0.5) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"gave up after {timeout:.0f} s waiting for {what}")
        time.sleep(every)


# How far ahead the campaign's replicas plan (their PLAN_AHEAD_SECONDS, the default): the
# hostile-row check allows the instants a pass planned ahead before a row was corrupted.
PLAN_AHEAD_SECONDS = 30


def worker_env(database_url: str) -> dict[str, str]:
    return {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "bench.chaos.settings",
        "DATABASE_URL": database_url,
        "CHAOS_PLAN_AHEAD_SECONDS": str(PLAN_AHEAD_SECONDS),
    }
