"""A one-off whose instant has passed by the time its record is written (a deploy that lands
late, a run-time one-off created for an instant just past) is decided by its misfire policy
when the record is written, as the planner decides any instant: it runs within its
``max_delay``, and later than that runs late or is recorded skipped, with its log line, audit
record and alert. Before, it was never planned: the record stayed active with nothing due."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.dispatch import Signal
from structlog.testing import capture_logs

from django_jobs import Misfire, at, signals
from django_jobs.identity import occurrence_id
from django_jobs.models import AuditRecord, Occurrence, OccurrenceState, Schedule, Trigger
from django_jobs.services import enable, sync_schedules, upsert_schedule
from django_jobs.testing import use_clock
from django_jobs.worker.planning import plan_due

from .factories import T0, ScheduleFactory, declaration

pytestmark = pytest.mark.django_db

HOUR = timedelta(hours=1)
KEY = "billing.first-statement"


def one_off(instant, *, misfire=Misfire.REPLAY_ONCE, job="tests.noop", **fields):
    """The one-off of the bug report: max_delay 1 h, replay once unless told otherwise."""
    return declaration(KEY, timing=at(instant), max_delay=HOUR, misfire=misfire, job=job, **fields)


def occurrence() -> Occurrence:
    (found,) = Occurrence.objects.filter(schedule__key=KEY)
    return found


def test_a_one_off_declared_after_its_instant_within_max_delay_runs_now(
    jobs, ran, inline_worker, clock
) -> None:
    instant = T0 - timedelta(minutes=30)
    sync_schedules([one_off(instant)], now=T0)
    row = occurrence()
    assert (row.scheduled_at, row.due_at, row.state, row.trigger) == (
        instant,
        instant,
        OccurrenceState.SCHEDULED,
        Trigger.SCHEDULE,
    )
    with use_clock(clock):
        summary = inline_worker(jobs).run_pass()
    assert summary.outcomes["completed"] == 1
    assert ran == [str(occurrence_id("", KEY, instant))]


def test_a_one_off_declared_past_its_max_delay_is_skipped_logged_and_audited() -> None:
    instant = T0 - 2 * HOUR
    with capture_logs() as logs:
        sync_schedules([one_off(instant, misfire=Misfire.SKIP)], now=T0)
    row = occurrence()
    assert (row.scheduled_at, row.state, row.skip_reason, row.finished_at) == (
        instant,
        OccurrenceState.SKIPPED,
        "misfire",
        T0,
    )
    [line] = [e for e in logs if e["event"] == "occurrence.skipped"]
    assert (line["log_level"], line["schedule"], line["occurrence"], line["reason"]) == (
        "warning",
        KEY,
        str(row.pk),
        "misfire",
    )
    assert line["late_seconds"] == 7200
    record = AuditRecord.objects.get(action="misfire.skipped")
    assert (record.actor, record.schedule_id, record.target_type, record.target_id) == (
        "django_jobs.planner",
        row.schedule_id,
        "occurrence",
        str(row.pk),
    )
    assert record.after == {"count": 1, "first": instant.isoformat(), "last": instant.isoformat()}
    assert "later than its max_delay (1:00:00): skipped by misfire policy skip" in record.reason


def test_replay_once_runs_a_one_off_declared_later_than_its_max_delay_late() -> None:
    instant = T0 - 2 * HOUR
    with capture_logs() as logs:
        sync_schedules([one_off(instant)], now=T0)
    row = occurrence()
    assert (row.state, row.trigger) == (OccurrenceState.SCHEDULED, Trigger.CATCHUP)
    [line] = [e for e in logs if e["event"] == "one_off.late"]
    assert (line["occurrence"], line["trigger"], line["late_seconds"]) == (
        str(row.pk),
        "catchup",
        7200,
    )
    assert not AuditRecord.objects.filter(action="misfire.skipped").exists()


def test_a_skipped_late_one_off_is_alerted_once_its_sync_commits(
    django_capture_on_commit_callbacks,
) -> None:
    events: list[signals.OccurrenceEvent] = []

    def receiver(sender: type, *, event: signals.OccurrenceEvent, **kwargs: object) -> None:
        events.append(event)

    skipped: Signal = signals.occurrence_skipped
    skipped.connect(receiver, weak=False)
    try:
        with django_capture_on_commit_callbacks(execute=True):
            sync_schedules([one_off(T0 - 2 * HOUR, misfire=Misfire.SKIP)], now=T0)
    finally:
        skipped.disconnect(receiver)
    [event] = events
    assert (event.key, event.scheduled_at, event.reason) == (KEY, T0 - 2 * HOUR, "misfire")


def test_the_plan_pass_after_a_late_one_off_plans_nothing_more() -> None:
    sync_schedules([one_off(T0 - timedelta(minutes=30))], now=T0)
    plan_due(now=T0 + timedelta(seconds=1))
    assert Occurrence.objects.count() == 1
    schedule = Schedule.objects.get(key=KEY)
    assert (schedule.last_scheduled_at, schedule.next_due_at) == (T0 - timedelta(minutes=30), None)


def test_syncing_the_late_one_off_again_decides_nothing_again() -> None:
    sync_schedules([one_off(T0 - 2 * HOUR, misfire=Misfire.SKIP)], now=T0)
    report = sync_schedules([one_off(T0 - 2 * HOUR, misfire=Misfire.SKIP)], now=T0 + HOUR)
    assert report.unchanged == [KEY]
    assert Occurrence.objects.count() == 1
    assert AuditRecord.objects.filter(action="misfire.skipped").count() == 1


def test_a_one_off_declared_before_its_instant_is_left_to_the_plan_pass() -> None:
    sync_schedules([one_off(T0 + HOUR)], now=T0)
    assert not Occurrence.objects.exists()
    assert Schedule.objects.get(key=KEY).next_due_at == T0 + HOUR


def test_a_run_time_one_off_created_after_its_instant_runs_now(root) -> None:
    instant = T0 - timedelta(minutes=10)
    upsert_schedule(
        one_off(instant, tenant="acme", job="billing.send_statements"),
        actor=root,
        reason="acme's first statement",
        now=T0,
    )
    row = occurrence()
    assert (row.tenant, row.scheduled_at, row.state) == ("acme", instant, OccurrenceState.SCHEDULED)


def test_a_run_time_one_off_moved_to_an_instant_already_past_is_decided(root) -> None:
    later = one_off(T0 + HOUR, tenant="acme", job="billing.send_statements", misfire="skip")
    upsert_schedule(later, actor=root, reason="first statement", now=T0)
    earlier = one_off(T0 - 2 * HOUR, tenant="acme", job="billing.send_statements", misfire="skip")
    upsert_schedule(earlier, actor=root, reason="it was due this morning", now=T0 + HOUR / 2)
    row = occurrence()
    assert (row.scheduled_at, row.state, row.skip_reason) == (
        T0 - 2 * HOUR,
        OccurrenceState.SKIPPED,
        "misfire",
    )
    actions = list(AuditRecord.objects.order_by("pk").values_list("action", flat=True))
    assert actions == ["schedule.created", "schedule.timing_changed", "misfire.skipped"]


def test_enabling_a_one_off_left_stranded_by_an_older_release_decides_its_instant(root) -> None:
    # What the old code left: a record made after its instant, with nothing planned or due.
    stranded = ScheduleFactory.create(
        key=KEY,
        timing_kind="at",
        interval=None,
        anchor=None,
        run_at=T0 - timedelta(minutes=20),
        max_delay=HOUR,
        created_at=T0,
        next_due_at=None,
    )
    enable(stranded, actor=root, reason="W031: stranded one-off", now=T0 + timedelta(minutes=5))
    row = occurrence()
    assert (row.scheduled_at, row.state) == (T0 - timedelta(minutes=20), OccurrenceState.SCHEDULED)
