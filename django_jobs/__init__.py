"""django_jobs: scheduled jobs for Django with fenced PostgreSQL leases.

Declare handlers in ``<app>/jobs.py`` with ``@job`` and schedules in ``<app>/schedules.py``
with ``schedule(...)``; run them with ``manage.py runworker``. See README.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .declarations import InvalidSchedule, schedule
from .exceptions import Cancelled, JobsError, LeaseLost, PermanentFailure
from .registry import job
from .scheduling.calendars import WEEKENDS, Calendar, Holidays
from .scheduling.policies import Misfire, OnExcluded, Overlap, RepeatedTime, Retry, SkippedTime
from .scheduling.rrules import rrule
from .scheduling.timings import after, at, cron, every
from .worker.run import Run

if TYPE_CHECKING:
    from .services.enqueue import enqueue


def __getattr__(name: str) -> Any:
    # ``enqueue`` needs the models: imported on first use, so that settings modules can
    # import this package (``Retry``, ``cron``...) before the apps are loaded.
    if name == "enqueue":
        from .services.enqueue import enqueue

        return enqueue
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "WEEKENDS",
    "Calendar",
    "Cancelled",
    "Holidays",
    "InvalidSchedule",
    "JobsError",
    "LeaseLost",
    "Misfire",
    "OnExcluded",
    "Overlap",
    "PermanentFailure",
    "RepeatedTime",
    "Retry",
    "Run",
    "SkippedTime",
    "after",
    "at",
    "cron",
    "enqueue",
    "every",
    "job",
    "rrule",
    "schedule",
]
