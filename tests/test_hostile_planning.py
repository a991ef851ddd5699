"""Hostile schedule rows already in the database: the worker reports them and goes on.

Rows are written with the ORM, skipping declaration validation, as a bad migration, a manual
``UPDATE`` or an older release could leave them.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from structlog.testing import capture_logs

from django_jobs import services
from django_jobs.models import Attempt, Limit, Occurrence, OccurrenceState, Schedule
from django_jobs.registry import Registry
from django_jobs.testing import run_due
from django_jobs.worker.planning import plan_due

from .factories import T0, ScheduleFactory
from .storeutil import plan

pytestmark = pytest.mark.django_db

CRON = {"timing_kind": "cron", "interval": None, "anchor": None, "cron": "* * * * *"}
HOSTILE_ROWS: dict[str, dict[str, Any]] = {
    "bad-cron": {**CRON, "cron": "61 * * * *"},
    "sql-cron": {**CRON, "cron": "'; DROP TABLE django_jobs_schedule; --"},
    "bad-zone": {**CRON, "time_zone": "Mars/Base"},
    "local-zone": {**CRON, "time_zone": "localtime"},
    "bad-skipped": {**CRON, "skipped_time": "later"},
    "bad-misfire": {"misfire": "retry_forever"},
    "bad-overlap": {"overlap": "sometimes"},
}


@pytest.mark.parametrize("name", list(HOSTILE_ROWS))
def test_a_plan_pass_reports_a_hostile_row_and_plans_the_others(name: str) -> None:
    good = ScheduleFactory.create(key="good", next_due_at=T0, created_at=T0)
    bad = ScheduleFactory.create(key=name, next_due_at=T0, created_at=T0, **HOSTILE_ROWS[name])
    with capture_logs() as logs:
        result = plan_due(now=T0 + timedelta(minutes=2))
    assert result.invalid == [name]
    assert Occurrence.objects.filter(schedule=good).count() == 3
    assert not Occurrence.objects.filter(schedule=bad).exists()
    (event,) = [e for e in logs if e["event"] == "schedule.invalid"]
    assert event["schedule"] == name
    bad.refresh_from_db()
    assert bad.next_due_at is None  # parked: not retried at every pass


def test_a_max_delay_the_database_cannot_add_is_reported_not_an_outage() -> None:
    """Regression: ``scheduled_at + max_delay`` out of range in SQL raised a DataError that
    failed the whole plan pass, at every pass, for every schedule."""
    bad = ScheduleFactory.create(
        key="bad", next_due_at=T0, created_at=T0, max_delay=timedelta(days=999_999_999)
    )
    plan(bad, T0, now=T0)
    good = ScheduleFactory.create(key="good", next_due_at=T0, created_at=T0)
    result = plan_due(now=T0 + timedelta(minutes=5))
    assert result.invalid == ["bad"]
    assert Occurrence.objects.filter(schedule=good).count() == 6


@pytest.mark.parametrize(
    "fields",
    [
        {"anchor": datetime(1, 1, 1, tzinfo=UTC)},
        {"anchor": datetime(9999, 12, 31, 23, 59, tzinfo=UTC)},
        {"interval": timedelta(days=999_999_999)},
        {
            "timing_kind": "at",
            "interval": None,
            "anchor": None,
            "run_at": datetime(1, 1, 1, tzinfo=UTC),
        },
        {
            "timing_kind": "at",
            "interval": None,
            "anchor": None,
            "run_at": datetime(9999, 12, 31, tzinfo=UTC),
        },
    ],
)
def test_extreme_instants_and_intervals_plan_without_crashing(fields: dict) -> None:
    ScheduleFactory.create(key="edge", next_due_at=T0, created_at=T0, **fields)
    good = ScheduleFactory.create(key="good", next_due_at=T0, created_at=T0)
    plan_due(now=T0 + timedelta(minutes=1))
    assert Occurrence.objects.filter(schedule=good).count() == 2


def failing_jobs() -> Registry:
    jobs = Registry()

    def boom(run: object) -> None:
        raise RuntimeError("partner down")

    jobs.register("tests.noop", boom)
    jobs.register("tests.ok", lambda run: None)
    return jobs


def test_a_timeout_beyond_the_calendar_does_not_crash_the_worker(clock) -> None:
    """Regression: ``now + timeout`` overflowed in the claim path and killed the worker."""
    bad = ScheduleFactory.create(key="bad", job="tests.ok", timeout=timedelta(days=999_999_999))
    plan(bad, T0, now=T0)
    clock.set(T0)
    summary = run_due(clock, jobs=failing_jobs())
    assert list(summary.outcomes.elements()) == ["completed"]


def test_a_backoff_beyond_the_calendar_still_records_the_failure(clock) -> None:
    """Regression: ``now + backoff`` overflowed after the handler failed: the run crashed and
    its occurrence stayed processing."""
    huge = timedelta(days=999_999_999)
    bad = ScheduleFactory.create(key="bad", backoff=huge, max_backoff=huge, max_attempts=3)
    plan(bad, T0, now=T0)
    clock.set(T0)
    summary = run_due(clock, jobs=failing_jobs())
    assert list(summary.outcomes.elements()) == ["retry"]
    occurrence = Occurrence.objects.get()
    assert occurrence.state == OccurrenceState.FAILED
    assert occurrence.due_at.year == 9998  # the latest instant django_jobs computes
    assert Attempt.objects.get().error_message == "partner down"


def test_a_purge_with_a_retention_beyond_the_calendar_keeps_everything() -> None:
    """Regression: ``now - keep_for`` out of range failed the purge with a DataError."""
    schedule = ScheduleFactory.create(key="bad")
    Limit.objects.create(schedule=schedule, keep_for=timedelta(days=999_999_999))
    root = User.objects.create_superuser("root", "root@example.com", "x")
    assert services.purge(schedule, actor=root, now=T0) == 0


def test_inspecting_at_the_end_of_the_calendar_shows_no_next_runs() -> None:
    schedule = ScheduleFactory.create(key="edge")
    root = User.objects.create_superuser("root", "root@example.com", "x")
    end = datetime(9999, 12, 31, 23, tzinfo=UTC)
    # Regression: ``now + 7 days`` overflowed and the report crashed.
    report = services.inspect_schedule(schedule, actor=root, now=end)
    assert report.next_runs == []
    assert Schedule.objects.count() == 1
