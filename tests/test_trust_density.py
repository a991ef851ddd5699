"""#33 finding 2: a calendar timing's density is bounded where it is parsed, and one plan
decision stops counting a long gap at the pass's deadline.

``FREQ=HOURLY;BYMINUTE=0,...,59;BYSECOND=0,...,59`` (every second, 369 characters) was
accepted while MINUTELY and SECONDLY were refused; one plan decision over a gap of weeks
walked millions of its wall times. Now at most ``MAX_INSTANTS_PER_DAY`` (1,440: cron's
densest, one a minute) a day, counted from the rule's fields, for rrules and crons, with or
without a business calendar.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.auth.models import User

from django_jobs import InvalidSchedule, cron, services
from django_jobs.models import Occurrence, Schedule
from django_jobs.scheduling import planner
from django_jobs.scheduling.calendars import WEEKENDS
from django_jobs.scheduling.policies import Misfire
from django_jobs.scheduling.rrules import rrule
from django_jobs.scheduling.timing import MAX_INSTANTS_PER_DAY, InvalidTiming
from django_jobs.worker.planning import plan_due

from .factories import T0, ScheduleFactory, declaration

SIXTY = ",".join(str(n) for n in range(60))
EVERY_SECOND = f"FREQ=HOURLY;BYMINUTE={SIXTY};BYSECOND={SIXTY}"  # the review's rule
EVERY_MINUTE = f"FREQ=HOURLY;BYMINUTE={SIXTY}"  # the densest rule accepted
NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def refusal(timing: object) -> InvalidTiming:
    with pytest.raises(InvalidTiming) as caught:
        timing.validate()  # type: ignore[attr-defined]
    return caught.value


def test_the_reviews_every_second_rule_is_refused_naming_the_field_the_count_and_the_bound():
    assert len(EVERY_SECOND) == 369  # the review's rule
    refused = refusal(rrule(EVERY_SECOND))
    assert refused.field == "timing.rrule"
    assert "up to 86,400 instants a day" in refused.message
    assert "at most 1,440 a day" in refused.message


def test_the_rule_is_refused_with_weekends_excluded_and_moved_too():
    for exclude, moved in ((WEEKENDS, "skip"), (WEEKENDS, "next"), ([WEEKENDS], "previous")):
        refused = refusal(rrule(EVERY_SECOND, exclude=exclude, on_excluded=moved))
        assert (refused.field, "86,400" in refused.message) == ("timing.rrule", True)


@pytest.mark.parametrize(
    ("rule", "per_day"),
    [
        (f"FREQ=HOURLY;BYMINUTE={SIXTY};BYSECOND=0,30", 2880),
        (f"FREQ=DAILY;BYHOUR=0,1,2,3,4,5,6,7,8,9,10,11,12;BYMINUTE={SIXTY};BYSECOND=0,1", 1560),
        (f"FREQ=WEEKLY;BYDAY=MO;BYHOUR=9;BYMINUTE=0;BYSECOND={SIXTY}", 60),
    ],
)
def test_a_rule_is_counted_from_its_fields(rule: str, per_day: int) -> None:
    if per_day > MAX_INSTANTS_PER_DAY:
        assert f"up to {per_day:,} instants a day" in refusal(rrule(rule)).message
    else:
        assert rrule(rule).validate().recurrence.per_day() == per_day


def test_the_densest_rule_accepted_is_one_a_minute_as_crons_densest():
    densest = rrule(EVERY_MINUTE).validate()
    assert densest.recurrence.per_day() == MAX_INSTANTS_PER_DAY == 1440
    assert cron("* * * * *").validate().per_day() == MAX_INSTANTS_PER_DAY
    day = datetime(2026, 11, 30, tzinfo=UTC)  # a Monday
    assert densest.count_between(day, day + timedelta(days=1)) == MAX_INSTANTS_PER_DAY
    # A calendar's moves land on the same times of day: Monday holds no more than its own.
    moved = rrule(EVERY_MINUTE, exclude=WEEKENDS, on_excluded="next").validate()
    assert moved.count_between(day, day + timedelta(days=1)) == MAX_INSTANTS_PER_DAY


@pytest.mark.django_db
def test_the_service_layer_refuses_the_rule_and_creates_nothing():
    root = User.objects.create_superuser("root", "root@example.com", "x")
    with pytest.raises(InvalidSchedule, match=r"timing\.rrule.*86,400 instants a day"):
        services.upsert_schedule(
            declaration("acme.every_second", timing=rrule(EVERY_SECOND)),
            actor=root,
            reason="a tenant operator's change",
            now=T0,
        )
    assert not Schedule.objects.filter(key="acme.every_second").exists()


@pytest.mark.django_db
def test_a_row_holding_the_rule_written_behind_the_service_layer_is_parked_naming_rrule():
    row = ScheduleFactory.create(
        key="raw.every_second",
        timing_kind="rrule",
        rrule=EVERY_SECOND,
        cron="",
        interval=None,
        anchor=None,
        created_at=T0 - timedelta(minutes=5),
        next_due_at=T0,
    )
    result = plan_due(now=T0)
    row.refresh_from_db()
    assert result.invalid == [str(row)]
    assert (row.parked_field, row.next_due_at) == ("timing.rrule", None)
    assert "86,400 instants a day" in row.parked_reason
    assert not Occurrence.objects.filter(schedule=row).exists()


def decide_until_caught_up(timing, *, gap: timedelta, misfire: Misfire, catchup: int):
    """Plan passes whose deadline has always passed already; each decision's summary and rows."""
    last, decisions = NOW - gap, []
    for _ in range(200):
        decision = planner.plan(
            planner.PlanRequest(
                timing=timing,
                max_delay=timedelta(seconds=10),
                misfire=misfire,
                max_catchup=catchup,
                last_scheduled_at=last,
                since=last,
                now=NOW,
                expired=lambda: True,
            )
        )
        decisions.append(decision)
        assert decision.last_scheduled_at is not None  # a gap of minutes has a last instant
        last = decision.last_scheduled_at
        if not decision.more:
            return decisions
    raise AssertionError("not caught up in 200 passes")


@pytest.mark.parametrize("misfire", [Misfire.SKIP, Misfire.REPLAY_ALL])
def test_a_decision_whose_deadline_has_passed_counts_one_day_of_a_long_gap_and_loses_none(
    misfire: Misfire,
) -> None:
    """Before, one decision counted a month of the gap (44,640 wall times of this rule, and
    86,400 a day of the refused one) whatever the pass's budget said."""
    gap = timedelta(days=40)
    decisions = decide_until_caught_up(rrule(EVERY_MINUTE), gap=gap, misfire=misfire, catchup=100)
    heads = [d for d in decisions if d.more]
    assert len(heads) >= 30  # a day each, not a month
    for decision in heads:
        assert decision.summary is not None
        assert decision.summary.count <= MAX_INSTANTS_PER_DAY
        assert decision.summary.last - decision.summary.first < planner.COUNT_CHUNK
    summarised = sum(d.summary.count for d in decisions if d.summary)
    rows = sum(len(d.run) + len(d.replay) + len(d.skip) for d in decisions)
    assert summarised + rows == gap // timedelta(minutes=1)  # every minute accounted for


def test_without_a_deadline_a_decision_still_counts_a_whole_head_window():
    decision = planner.plan(
        planner.PlanRequest(
            timing=rrule(EVERY_MINUTE),
            max_delay=timedelta(seconds=10),
            misfire=Misfire.SKIP,
            max_catchup=0,
            last_scheduled_at=NOW - timedelta(days=365),
            since=NOW - timedelta(days=365),
            now=NOW,
        )
    )
    assert decision.more
    assert decision.summary is not None
    assert decision.summary.count == planner.HEAD_WINDOW // timedelta(minutes=1)
