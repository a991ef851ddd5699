"""The pytest fixture of ``django_jobs.testing``: add ``pytest_plugins =
["django_jobs.contrib.pytest"]`` to the project's top ``conftest.py``.

``scheduled_jobs`` is a ``ScheduledJobs`` synced at ``scheduled_jobs_start``, a fixture the
project overrides (by default 2026-01-01 00:00 UTC); it uses pytest-django's ``db``.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from ..testing import ScheduledJobs, use_clock


@pytest.fixture
def scheduled_jobs_start() -> datetime:
    """The instant the declared schedules are synced at: override it in a conftest."""
    return datetime(2026, 1, 1, tzinfo=UTC)


@pytest.fixture
def scheduled_jobs(db: Any, scheduled_jobs_start: datetime) -> Iterator[ScheduledJobs]:
    """The project's declared schedules, synced at ``scheduled_jobs_start``; the test reads
    its clock throughout (``use_clock``: ``enqueue()`` is due at the fake instant)."""
    jobs = ScheduledJobs(scheduled_jobs_start)
    with use_clock(jobs.clock):
        jobs.sync()
        yield jobs
