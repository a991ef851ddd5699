"""The pytest fixture of ``django_jobs.testing``: add ``pytest_plugins =
["django_jobs.contrib.pytest"]`` to the project's top ``conftest.py``.

``scheduled_jobs`` is a ``ScheduledJobs`` synced at ``scheduled_jobs_start``, a fixture the
project overrides (by default 2026-01-01 00:00 UTC); it uses pytest-django's ``db``.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from ..testing import ScheduledJobs


@pytest.fixture
def scheduled_jobs_start() -> datetime:
    """The instant the declared schedules are synced at: override it in a conftest."""
    return datetime(2026, 1, 1, tzinfo=UTC)


@pytest.fixture
def scheduled_jobs(db: Any, scheduled_jobs_start: datetime) -> ScheduledJobs:
    """The project's declared schedules, synced at ``scheduled_jobs_start``."""
    jobs = ScheduledJobs(scheduled_jobs_start)
    jobs.sync()
    return jobs
