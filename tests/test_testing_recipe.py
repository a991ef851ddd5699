"""The testing recipe of a project's own tests (``django_jobs.testing``, issue #35): its
schedules synced at a fake instant and run as time passes, each occurrence at its own instant;
a clock behind the records says so instead of running nothing.

Each test here fails on 8f518d8 (``run_due`` there returned an empty pass; the rest was
missing).
"""

from __future__ import annotations

import contextlib
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.test import TestCase

from django_jobs import cron, schedule, services
from django_jobs.models import Occurrence, Schedule
from django_jobs.registry import Registry
from django_jobs.testing import FakeClock, run_due

from .factories import RECORD_DEFAULTS

DEFAULTS = RECORD_DEFAULTS
JAN_1 = datetime(2026, 1, 1, tzinfo=UTC)


def _monthly(ran: list[datetime]) -> tuple[Registry, Any]:
    jobs = Registry()
    jobs.register("orders.report", lambda run: ran.append(run.scheduled_at))
    declared = schedule(
        "orders.monthly-report",
        job="orders.report",
        timing=cron("0 9 1 * *"),
        register=False,
        **DEFAULTS,
    )
    return jobs, declared


@pytest.mark.django_db
def test_run_until_runs_each_month_on_time_not_one_late_run_and_misfires() -> None:
    ran: list[datetime] = []
    jobs, declared = _monthly(ran)
    from django_jobs.testing import ScheduledJobs

    scheduled = ScheduledJobs(JAN_1, jobs=jobs, declarations=[declared])
    summary = scheduled.run_until(datetime(2026, 4, 1, 10, tzinfo=UTC))
    assert ran == [datetime(2026, month, 1, 9, tzinfo=UTC) for month in (1, 2, 3, 4)]
    assert summary.claimed == 4
    states = list(
        Occurrence.objects.filter(schedule__key="orders.monthly-report").values_list(
            "state", flat=True
        )
    )
    assert states == ["completed"] * 4  # none missed, no catch-up run
    with pytest.raises(AssertionError, match="time only moves forward"):
        scheduled.run_until(JAN_1)


@pytest.mark.django_db
def test_run_due_behind_the_records_creation_says_so_instead_of_running_nothing() -> None:
    ran: list[datetime] = []
    jobs, declared = _monthly(ran)
    services.sync_schedules([declared], now=datetime(2026, 6, 1, tzinfo=UTC))  # "real" now
    with pytest.raises(AssertionError) as behind:  # testing.ClockBehind
        run_due(FakeClock(datetime(2026, 3, 1, 9, tzinfo=UTC)), jobs=jobs)
    assert str(behind.value).startswith(
        "the test clock is at 2026-03-01T09:00:00+00:00, before schedule "
        "'orders.monthly-report' was created (2026-06-01T00:00:00+00:00)"
    )


_RAN: list[datetime] = []
_JOBS, _DECLARED = _monthly(_RAN)


try:
    from django_jobs.testing import ScheduledJobsMixin
except ImportError:  # 8f518d8: the recipe fails as a test, not as a collection error
    ScheduledJobsMixin = type("ScheduledJobsMixin", (), {})  # type: ignore[assignment,misc]


class MonthlyReportTests(ScheduledJobsMixin, TestCase):
    """The recipe for Django's own ``TestCase``."""

    scheduled_jobs_start = JAN_1
    scheduled_jobs_registry = _JOBS
    scheduled_jobs_declarations = (_DECLARED,)

    def test_the_mixin_syncs_at_the_start_and_runs_as_time_passes(self) -> None:
        _RAN.clear()
        assert Schedule.objects.get(key="orders.monthly-report").created_at == JAN_1
        self.scheduled_jobs.advance(timedelta(days=40))
        assert [datetime(2026, month, 1, 9, tzinfo=UTC) for month in (1, 2)] == _RAN


class EnqueuedWorkTests(ScheduledJobsMixin, TestCase):
    """``enqueue()`` in a test of the mixin reads its clock: the work is due at the fake
    instant, and ``advance`` runs it."""

    scheduled_jobs_start = JAN_1
    scheduled_jobs_declarations = ()

    def test_enqueued_work_runs_when_the_fake_clock_reaches_it(self) -> None:
        from django_jobs import enqueue
        from django_jobs.registry import registry

        sent: list[int] = []
        registry.register("orders.recipe-confirm", lambda order_id: sent.append(order_id))
        self.addCleanup(registry.unregister, "orders.recipe-confirm")
        enqueue("orders.recipe-confirm", args={"order_id": 42}, after=timedelta(minutes=10))
        self.scheduled_jobs.advance(timedelta(minutes=9))
        assert sent == []
        self.scheduled_jobs.advance(timedelta(minutes=1))
        assert sent == [42]
        (run,) = Occurrence.objects.filter(schedule__job="orders.recipe-confirm")
        assert run.scheduled_at == JAN_1 + timedelta(minutes=10)


with contextlib.suppress(ImportError):  # 8f518d8 has no fixture: its test fails, not the module
    from django_jobs.contrib.pytest import (  # noqa: F401  (the fixtures, as a project uses them)
        scheduled_jobs,
        scheduled_jobs_start,
    )


def test_the_pytest_fixture_syncs_at_its_start_and_the_test_reads_its_clock(
    request: pytest.FixtureRequest,
) -> None:
    from django_jobs import clock

    jobs = request.getfixturevalue("scheduled_jobs")
    assert jobs.synced_at == JAN_1 == jobs.now()
    assert clock.current().now() == JAN_1


@pytest.mark.django_db
def test_run_until_plans_every_batch_at_an_instant_before_moving_on() -> None:
    """Seven hourly schedules and a plan batch of two: a pass at an instant plans two, so
    more passes run there before the clock moves (found by review: the rest misfired)."""
    from django.test import override_settings

    from django_jobs import every
    from django_jobs.testing import ScheduledJobs

    ran: list[str] = []
    jobs = Registry()
    jobs.register("orders.hourly", lambda run: ran.append(run.occurrence_key))
    declared = [
        schedule(
            f"orders.hourly-{n}",
            job="orders.hourly",
            timing=every(hours=1),
            register=False,
            **DEFAULTS,
        )
        for n in range(7)
    ]
    with override_settings(DJANGO_JOBS={"PLAN_BATCH_SIZE": 2}):
        scheduled = ScheduledJobs(JAN_1 + timedelta(minutes=1), jobs=jobs, declarations=declared)
        summary = scheduled.run_until(JAN_1 + timedelta(hours=3, minutes=30))
    assert summary.claimed == len(ran) == 21
    assert not Occurrence.objects.exclude(state="completed").exists()
