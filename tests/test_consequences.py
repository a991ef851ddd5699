"""What each operator action will do, in words (``services.consequences``): the sentences the
admin's confirmations and ``manage.py jobs`` answers say."""

from __future__ import annotations

from datetime import timedelta

import pytest

from django_jobs.services import consequences

from .factories import ScheduleFactory, dead_occurrence

pytestmark = pytest.mark.django_db


def test_a_replay_says_which_attempt_runs_and_the_fresh_retry_budget():
    schedule = ScheduleFactory(
        max_attempts=3, backoff=timedelta(seconds=30), max_backoff=timedelta(minutes=10)
    )
    dead = dead_occurrence(schedule)
    dead.attempts = 3
    said = consequences.replay(dead, schedule)
    assert "runs as attempt 4" in said
    assert "The retry budget starts afresh: up to 3 attempts (4 to 6), 30 seconds backoff" in said
    assert "then dead letter" in said


def test_a_single_attempt_budget_names_one_attempt():
    schedule = ScheduleFactory(max_attempts=1)
    assert consequences.retry_budget(schedule, 2) == "up to 1 attempt (attempt 2), then dead letter"


def test_cancel_says_what_happens_to_waiting_running_and_finished_occurrences():
    schedule = ScheduleFactory()
    occurrence = dead_occurrence(schedule)
    assert "cannot be cancelled" in consequences.cancel(occurrence)
    occurrence.state = "scheduled"
    assert "will not run" in consequences.cancel(occurrence)
    occurrence.state, occurrence.lease_owner = "processing", "host-1:42"
    assert "running on host-1:42: its lease ends now" in consequences.cancel(occurrence)


def test_enable_and_disable_name_the_misfire_policy():
    schedule = ScheduleFactory(misfire="replay_once")
    assert "replay once" in consequences.enable(schedule)
    assert "an occurrence already running finishes" in consequences.disable(schedule)
    assert "cancelled" in consequences.disable(schedule, cancel_running=True)
