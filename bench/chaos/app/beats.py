"""A handler's own heartbeats: one line per beat, ``replica monotonic occurrence token job``,
appended to a file of the replica life's own (``$CHAOS_BEATS_DIR/<life>.beats``).

No database is involved, so a beat is written through a store outage, inside a transaction
that is later rolled back, and up to the instant the process dies. ``time.monotonic()`` is
the host's ``CLOCK_MONOTONIC``, one clock for every process of the machine that no skewed or
stepped wall clock moves: the runner compares beats of different replicas on it
(``bench/chaos/beats.py``).
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

BEATS_DIR = "CHAOS_BEATS_DIR"
SUFFIX = ".beats"


class BeatFile:
    """This process's beat file, opened once in append mode: each beat is one ``write`` of
    one line, which the kernel keeps whole and which outlives a SIGKILL or ``os._exit``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._fd: int | None = None

    def _open(self) -> int | None:
        folder = os.environ.get(BEATS_DIR)
        if not folder:
            return None  # not under the campaign (tests, a plain runworker)
        replica = os.environ.get("CHAOS_REPLICA", "") or f"pid{os.getpid()}"
        path = Path(folder) / f"{replica}{SUFFIX}"
        return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def beat(self, occurrence: str, token: int, job: str) -> None:
        with self._lock:
            if self._fd is None:
                self._fd = self._open()
            if self._fd is None:
                return
            replica = os.environ.get("CHAOS_REPLICA", "")
            line = f"{replica} {time.monotonic():.6f} {occurrence} {token} {job}\n"
            os.write(self._fd, line.encode())


BEATS = BeatFile()
