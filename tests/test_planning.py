"""The plan pass on real PostgreSQL: misfire after an outage, overlap, bad records."""

from __future__ import annotations

from datetime import timedelta

import pytest
from structlog.testing import capture_logs

from django_jobs import store
from django_jobs.models import AuditRecord, Occurrence, OccurrenceState, Schedule, Trigger
from django_jobs.worker.planning import plan_due

from .factories import T0, ScheduleFactory
from .storeutil import claim

LONG_LEASE = timedelta(hours=6)


def hold(owner, now):
    """Claim with a lease that outlasts the test, so nothing is taken over by expiry."""
    return claim(owner=owner, now=now, lease_for=LONG_LEASE, limit=10)


pytestmark = pytest.mark.django_db

HOUR = timedelta(hours=1)
OUTAGE = timedelta(days=3)


def hourly(**fields) -> Schedule:
    """An hourly schedule created at T0, planned up to T0, then left alone for three days."""
    defaults = dict(
        interval=HOUR,
        anchor=T0,
        max_delay=timedelta(minutes=5),
        created_at=T0,
        next_due_at=T0,
        overlap="allow",
    )
    schedule = ScheduleFactory.create(**{**defaults, **fields})
    plan_due(now=T0)
    return schedule


def states(schedule: Schedule) -> dict[str, list]:
    rows = Occurrence.objects.filter(schedule=schedule).order_by("scheduled_at")
    out: dict[str, list] = {}
    for o in rows:
        label = f"{o.state}:{o.skip_reason}" if o.skip_reason else o.state
        out.setdefault(label, []).append(o.scheduled_at)
    return out


def after_outage(schedule: Schedule) -> dict[str, list]:
    """Come back 3 days and 2 minutes later: the newest instant (T0+72h) is still on time."""
    plan_due(now=T0 + OUTAGE + timedelta(minutes=2))
    return states(schedule)


def test_first_pass_plans_the_instant_at_creation() -> None:
    schedule = hourly()
    assert states(schedule) == {"scheduled": [T0]}
    schedule.refresh_from_db()
    assert (schedule.last_scheduled_at, schedule.next_due_at) == (T0, T0 + HOUR)


def test_misfire_skip_after_a_3_day_outage_runs_none_of_the_missed() -> None:
    schedule = hourly(misfire="skip")
    got = after_outage(schedule)
    # T0 was planned before the outage and never started: it is missed too.
    assert got == {
        "skipped:misfire": [T0 + HOUR * n for n in range(72)],
        "scheduled": [T0 + OUTAGE],
    }


def test_misfire_replay_once_runs_only_the_most_recent_missed() -> None:
    schedule = hourly(misfire="replay_once")
    got = after_outage(schedule)
    assert got["scheduled"] == [T0 + HOUR * 71, T0 + OUTAGE]
    assert len(got["skipped:misfire"]) == 71  # T0 .. T0+70h
    assert got["skipped:misfire"][0] == T0
    assert got["skipped:misfire"][-1] == T0 + HOUR * 70


def test_misfire_replay_all_runs_up_to_max_catchup_oldest_first() -> None:
    schedule = hourly(misfire="replay_all", max_catchup=10)
    got = after_outage(schedule)
    replayed = [T0 + HOUR * n for n in range(62, 72)]
    assert got["scheduled"] == [*replayed, T0 + OUTAGE]
    assert len(got["skipped:misfire"]) == 62  # T0 .. T0+61h
    leases = claim("w", T0 + OUTAGE + timedelta(minutes=2), limit=100)
    assert [lease.scheduled_at for lease in leases] == [*replayed, T0 + OUTAGE]


def test_missed_runs_replayed_by_policy_run_late_with_trigger_catchup() -> None:
    hourly(misfire="replay_all", max_catchup=100, max_delay=HOUR)
    # T0 was planned on time, then the worker died before claiming it. Five hours later the
    # claim leaves it alone: a missed scheduled run waits for the planner's misfire decision.
    assert claim("w", T0 + HOUR * 5) == []
    plan_due(now=T0 + HOUR * 5)
    leases = claim("w", T0 + HOUR * 5, limit=100)
    assert [(lease.scheduled_at, lease.trigger) for lease in leases] == [
        (T0 + HOUR * n, Trigger.CATCHUP) for n in range(4)
    ] + [(T0 + HOUR * 4, Trigger.SCHEDULE), (T0 + HOUR * 5, Trigger.SCHEDULE)]


def test_a_per_second_schedule_after_3_days_writes_bounded_rows_and_one_summary() -> None:
    schedule = hourly(interval=timedelta(seconds=1), max_delay=timedelta(seconds=5))
    plan_due(now=T0 + OUTAGE)
    skipped = Occurrence.objects.filter(schedule=schedule, state=OccurrenceState.SKIPPED)
    # The 100 most recent missed instants get rows, and so does T0, which had one already.
    assert skipped.count() == 101
    assert skipped.filter(scheduled_at=T0).exists()
    summary = AuditRecord.objects.get(action="misfire.skipped")
    new_missed = 3 * 24 * 3600 - 6  # T0+1s .. now-6s
    assert summary.after["count"] == new_missed - 100
    assert summary.after["first"] == (T0 + timedelta(seconds=1)).isoformat()
    assert summary.after["last"] == (T0 + OUTAGE - timedelta(seconds=106)).isoformat()
    assert summary.target_id == str(schedule.pk)
    assert (
        Occurrence.objects.filter(schedule=schedule, state=OccurrenceState.SCHEDULED).count() == 6
    )


def test_planning_twice_at_the_same_instant_changes_nothing() -> None:
    schedule = hourly(misfire="replay_once")
    now = T0 + OUTAGE + timedelta(minutes=2)
    plan_due(now=now)
    first = states(schedule)
    Schedule.objects.filter(pk=schedule.pk).update(next_due_at=now)
    plan_due(now=now)
    assert states(schedule) == first


def test_overlap_skip_skips_an_occurrence_due_while_the_previous_runs() -> None:
    schedule = hourly(overlap="skip", max_delay=HOUR)
    (running,) = hold("w", T0)
    plan_due(now=T0 + HOUR)
    assert states(schedule)["skipped:overlap"] == [T0 + HOUR]
    store.complete([running], now=T0 + HOUR + timedelta(minutes=1))
    plan_due(now=T0 + HOUR * 2)
    assert states(schedule)["scheduled"] == [T0 + HOUR * 2]


def test_overlap_queue_waits_until_the_previous_one_ends() -> None:
    schedule = hourly(overlap="queue", max_delay=HOUR * 3)
    (running,) = hold("w", T0)
    plan_due(now=T0 + HOUR)
    assert hold("other", T0 + HOUR) == []
    assert states(schedule)["scheduled"] == [T0 + HOUR]
    store.complete([running], now=T0 + HOUR + timedelta(minutes=1))
    (queued,) = hold("other", T0 + HOUR + timedelta(minutes=1))
    assert queued.scheduled_at == T0 + HOUR


def test_overlap_allow_runs_both_at_once() -> None:
    hourly(overlap="allow", max_delay=HOUR * 3)
    hold("w", T0)
    plan_due(now=T0 + HOUR)
    assert len(hold("other", T0 + HOUR)) == 1
    assert Occurrence.objects.filter(state=OccurrenceState.PROCESSING).count() == 2


def test_queue_takes_one_at_a_time_even_within_one_claim() -> None:
    schedule = hourly(overlap="queue", max_delay=HOUR * 10)
    plan_due(now=T0 + HOUR * 3)
    assert len(states(schedule)["scheduled"]) == 4
    assert len(hold("w", T0 + HOUR * 3)) == 1


def test_a_bad_schedule_is_reported_parked_and_does_not_stop_the_others() -> None:
    good = hourly()
    bad = ScheduleFactory.create(
        timing_kind="cron",
        cron="0 9 * * *",
        interval=None,
        time_zone="Mars/Olympus_Mons",
        created_at=T0,
        next_due_at=T0,
    )
    Schedule.objects.filter(pk=good.pk).update(next_due_at=T0 + HOUR)
    with capture_logs() as logs:
        result = plan_due(now=T0 + HOUR)
    assert result.invalid == [str(bad)]
    (event,) = [e for e in logs if e["event"] == "schedule.invalid"]
    assert "Mars/Olympus_Mons" in event["error"]
    bad.refresh_from_db()
    assert bad.next_due_at is None
    assert states(good)["scheduled"] == [T0 + HOUR]
