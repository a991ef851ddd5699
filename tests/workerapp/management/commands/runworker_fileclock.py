"""``manage.py runworker_fileclock``: ``runworker`` on a clock the test process sets. TEST-ONLY.

Exactly ``runworker``, except that the worker's clock reads the current instant from the file
named by the environment variable ``JOBS_TEST_CLOCK_FILE``: one ISO 8601 instant with its UTC
offset (``2027-03-14T06:30:00+00:00``). The test process writes it (atomically: a temporary
file, then ``os.replace``) to move the replica's time, so an end-to-end test can take a real
worker across dates and DST transitions without waiting for them. Every ``now()`` reads the
file, so a new instant counts from the worker's next look at its clock. The worker still sleeps
on the wall clock between passes (at most ``POLL_SECONDS``), so a test waits for what it expects
with a bound, never for time to pass.

Never use it outside the test suite: a worker whose time someone else controls plans, leases
and expires whatever that file says.
"""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path

from django.core.management.base import CommandError

from django_jobs.clock import Clock, ensure_aware_utc
from django_jobs.management.commands.runworker import Command as RunWorker

CLOCK_FILE = "JOBS_TEST_CLOCK_FILE"


class FileClock:
    """A clock whose instant is the content of a file (see the module's docstring)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.now()  # a missing or unreadable file fails the command at start, not mid-run

    def now(self) -> datetime:
        text = self.path.read_text().strip()
        return ensure_aware_utc(datetime.fromisoformat(text), name=str(self.path))


def write_instant(path: Path, instant: datetime) -> None:
    """Set the clock of the replicas reading ``path`` to ``instant`` (an aware datetime), in
    one atomic step: a reader sees the old instant or the new one, never half a line."""
    text = ensure_aware_utc(instant).isoformat()
    partial = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    partial.write_text(f"{text}\n")
    os.replace(partial, path)


class Command(RunWorker):
    help = f"TEST-ONLY: runworker on the clock read from the file named by ${CLOCK_FILE}."

    def make_clock(self) -> Clock:
        name = os.environ.get(CLOCK_FILE)
        if not name:
            raise CommandError(f"{CLOCK_FILE} must name the clock file (test-only command)")
        try:
            return FileClock(Path(name))
        except (OSError, ValueError) as exc:
            raise CommandError(f"{CLOCK_FILE}={name}: {exc}") from None
