"""What each operator action will do, in words (``services.consequences``): the sentences the
admin's confirmations and ``manage.py jobs`` answers say."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.test import override_settings

from django_jobs.exceptions import JobsError
from django_jobs.models import Schedule
from django_jobs.services import consequences

from .factories import ScheduleFactory, dead_occurrence
from .storeutil import claim, plan

pytestmark = pytest.mark.django_db


def test_a_replay_says_which_attempt_runs_and_the_fresh_retry_budget():
    schedule = ScheduleFactory.create(
        max_attempts=3, backoff=timedelta(seconds=30), max_backoff=timedelta(minutes=10)
    )
    dead = dead_occurrence(schedule)
    dead.attempts = 3
    said = consequences.replay(dead, schedule)
    assert "runs as attempt 4" in said
    assert "The retry budget starts afresh: up to 3 attempts (4 to 6), 30 s backoff" in said
    assert "then dead letter" in said


def test_a_backoff_at_its_cap_is_said_once():
    schedule = ScheduleFactory.build(
        max_attempts=2, backoff=timedelta(seconds=5), max_backoff=timedelta(seconds=5)
    )
    assert consequences.retry_budget(schedule, 1) == (
        "up to 2 attempts (1 to 2), 5 s backoff (each wait 50-100% of that), then dead letter"
    )


def test_a_single_attempt_budget_names_one_attempt():
    schedule = ScheduleFactory.create(max_attempts=1)
    assert consequences.retry_budget(schedule, 2) == "up to 1 attempt (attempt 2), then dead letter"


def test_cancel_says_what_happens_to_waiting_running_and_finished_occurrences():
    schedule = ScheduleFactory.create()
    occurrence = dead_occurrence(schedule)
    assert "cannot be cancelled" in consequences.cancel(occurrence)
    occurrence.state = "scheduled"
    assert "will not run" in consequences.cancel(occurrence)
    occurrence.state, occurrence.lease_owner = "processing", "host-1:42"
    assert "running on host-1:42: its lease ends now" in consequences.cancel(occurrence)


def test_enable_and_disable_name_the_misfire_policy():
    schedule = ScheduleFactory.create(misfire="replay_once")
    assert "replay once" in consequences.enable(schedule)
    assert "an occurrence already running finishes" in consequences.disable(schedule)
    assert "cancelled" in consequences.disable(schedule, cancel_running=True)


# --- each "waits" sentence agrees with what a claim does (#37 review) ----------------------


def replayed(schedule, occurrence):
    from django.contrib.auth.models import User

    from django_jobs import services

    actor = User.objects.get_or_create(username="root", is_superuser=True)[0]
    return services.replay(occurrence, actor=actor, reason="test", now=T1)


T1 = datetime(2026, 3, 1, 13, tzinfo=UTC)


def test_a_replay_of_a_disabled_schedules_occurrence_says_it_waits_and_no_claim_takes_it():
    schedule = ScheduleFactory.create()
    dead = dead_occurrence(schedule)
    Schedule.objects.filter(pk=schedule.pk).update(enabled=False, disabled_reason="maintenance")
    schedule.refresh_from_db()
    assert f"It waits meanwhile: {schedule} is disabled" in consequences.replay(dead, schedule)
    replayed(schedule, dead)
    assert claim("r", T1) == []
    Schedule.objects.filter(pk=schedule.pk).update(enabled=True, disabled_reason="")
    assert [lease.occurrence_id for lease in claim("r", T1)] == [dead.pk]


def test_a_replay_under_the_kill_switch_says_it_waits_and_no_claim_takes_it():
    schedule = ScheduleFactory.create(tenant="acme")
    dead = dead_occurrence(schedule)
    with override_settings(DJANGO_JOBS={"PAUSED_SCHEDULES": ["acme/*"]}):
        assert "the kill switch DJANGO_JOBS['PAUSED_SCHEDULES'] names" in consequences.replay(
            dead, schedule
        )
        replayed(schedule, dead)
        assert claim("r", T1, exclude_keys=["acme/*"]) == []
    assert "A replica claims it at its next pass." in consequences.replay(dead, schedule)


def test_a_replay_waiting_for_a_running_occurrence_says_so_under_overlap_queue():
    schedule = ScheduleFactory.create(overlap="queue")
    dead = dead_occurrence(schedule)
    plan(schedule, T1, now=T1)
    (running,) = claim("r", T1)
    said = consequences.replay(dead, schedule)
    assert f"It waits until occurrence {running.occurrence_id} ends" in said
    replayed(schedule, dead)
    assert claim("r", T1) == []
    allow = ScheduleFactory.create(overlap="allow")
    assert "It waits" not in consequences.replay(dead_occurrence(allow), allow)


def test_a_retired_recurring_schedules_replay_is_said_refused_and_a_retired_one_offs_reactivated():
    schedule = ScheduleFactory.create()
    dead = dead_occurrence(schedule)
    Schedule.objects.filter(pk=schedule.pk).update(status="retired")
    schedule.refresh_from_db()
    assert consequences.replay(dead, schedule).startswith(f"Refused: {schedule} is retired")
    with pytest.raises(JobsError, match="is retired"):
        replayed(schedule, dead)
    one_off = ScheduleFactory.build(timing_kind="at", status="retired")
    said = consequences.replay(dead, one_off)
    assert f"The retired one-off {one_off} is made active again for it" in said


def test_enabling_a_retired_or_draft_schedule_says_no_replica_runs_it():
    retired = ScheduleFactory.create(status="retired", enabled=False, disabled_reason="x")
    assert "is retired: whether enabled or not, no replica runs" in consequences.enable(retired)
    assert "Replicas claim" not in consequences.enable(retired)


def test_an_enqueued_jobs_record_is_described_by_its_max_delay_not_a_misfire_policy():
    record = ScheduleFactory.build(key="@billing.make_invoice", timing_kind="enqueued")
    for said in (consequences.enable(record), consequences.disable(record)):
        assert "could not start within its max delay" in said
        assert "misfire policy" not in said


def test_cancelling_a_running_occurrence_says_only_fenced_writes_are_refused():
    occurrence = dead_occurrence(ScheduleFactory.create())
    occurrence.state = "processing"
    said = consequences.cancel(occurrence)
    assert "Its outcome and its run.atomic() writes are refused (fenced)" in said
    assert "may already have happened" in said


def test_run_now_of_a_disabled_schedule_is_said_refused():
    schedule = ScheduleFactory.create(enabled=False, disabled_reason="x")
    assert consequences.run_now(schedule).startswith("Refused:")
