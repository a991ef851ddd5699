"""``runworker`` processes, restarted under new names: each life of a slot is an incarnation
(``r2.3`` is slot 2's third), so every attempt in the database names the process that made it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
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

    @property
    def current(self) -> Incarnation:
        return self.lives[-1]

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self, skew_seconds: float = 0.0) -> Incarnation:
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
        self.lives.append(life)
        return life

    def _ended(self, by: str, code: int) -> None:
        self.current.ended = self.current.ended or datetime.now(UTC)
        self.current.ended_by = by
        self.current.exit_code = code

    def kill(self) -> datetime:
        assert self.process is not None
        at = datetime.now(UTC)
        self.process.send_signal(signal.SIGKILL)
        self.current.ended = at
        self._ended("sigkill", self.process.wait(timeout=30))
        return at

    def terminate(self, timeout: float = 60) -> int:
        """SIGTERM and wait for the drain; a worker that overstays ``timeout`` is killed."""
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

    def pause(self) -> datetime:
        assert self.process is not None
        self.process.send_signal(signal.SIGSTOP)
        return datetime.now(UTC)

    def resume(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGCONT)

    def reap(self) -> bool:
        """Record an exit nobody asked for; True when the process had died by itself."""
        if self.process is None or self.current.exit_code is not None:
            return False
        code = self.process.poll()
        if code is None:
            return False
        self._ended("", code)
        return True


def wait_for(condition: Any, *, timeout: float, what: str, every: float = 0.5) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"gave up after {timeout:.0f} s waiting for {what}")
        time.sleep(every)


def worker_env(database_url: str) -> dict[str, str]:
    return {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "bench.chaos.settings",
        "DATABASE_URL": database_url,
    }
