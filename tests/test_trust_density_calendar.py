"""#33 finding 2, second pass: a business calendar that moves occurrences (``on_excluded=
"next"``/``"previous"``) is bounded where the timing is parsed.

Counting one day of such a rule walks the wall times of the run of excluded days before it
(or after it) too. The review's timing, the densest rule (one a minute) with 365 consecutive
dates excluded and ``on_excluded="next"``, was accepted: one day's count took 14.7-25.5 s,
``upsert_schedule`` 19.2 s, one plan decision with a 0.5 s deadline up to 219.6 s. Now at most
``rrules.MAX_WALLS_PER_DAY`` (8 x 1,440) wall times a day: ``per_day x (longest run + 1)``.
"""

from __future__ import annotations

import time
from datetime import UTC, date, datetime, timedelta
from functools import partial

import pytest
from django.contrib.auth.models import Group, User

from django_jobs import InvalidSchedule, services
from django_jobs.models import Occurrence, Schedule
from django_jobs.permissions import grant_tenant
from django_jobs.scheduling import planner
from django_jobs.scheduling.calendars import Calendar
from django_jobs.scheduling.policies import Misfire
from django_jobs.scheduling.rrules import MAX_WALLS_PER_DAY, rrule
from django_jobs.scheduling.timing import InvalidTiming
from django_jobs.worker.planning import plan_due

from .factories import ScheduleFactory, declaration

SIXTY = ",".join(str(n) for n in range(60))
EVERY_MINUTE = f"FREQ=HOURLY;BYMINUTE={SIXTY}"  # the densest rule accepted
NOW = datetime(2027, 6, 1, 12, tzinfo=UTC)
YEAR_OF_DATES = [date(2027, 1, 1) + timedelta(days=i) for i in range(365)]
WEEK_OF_DATES = [date(2027, 5, 20) + timedelta(days=i) for i in range(7)]  # the longest accepted
PASS_BUDGET = 0.5  # the worker's default PASS_BUDGET_SECONDS
# Durations here are this thread's CPU time (``time.thread_time``): the work the counting does,
# not how long it waited for a core on a loaded machine. The pass deadline below is on the same
# clock, so the test, not the machine's load, says when a pass is out of time.


def _past(deadline: float) -> bool:
    return time.thread_time() > deadline


@pytest.mark.django_db
def test_a_tenant_operator_cannot_save_the_review_timing_and_is_told_what_to_do():
    operator = User.objects.create_user("mallory", is_staff=True)
    group = Group.objects.create(name="acme operators")
    operator.groups.add(group)
    grant_tenant(group, "acme", "view", "change")
    timing = rrule(EVERY_MINUTE, exclude=YEAR_OF_DATES, on_excluded="next")
    began = time.thread_time()
    with pytest.raises(InvalidSchedule, match=r"timing\.exclude") as caught:
        services.upsert_schedule(
            declaration("acme.dense", tenant="acme", timing=timing),
            actor=operator,
            reason="x",
            now=NOW,
        )
    took = time.thread_time() - began
    message = str(caught.value)
    assert "365 consecutive excluded days" in message
    assert "527,040 wall times" in message
    assert "at most 11,520" in message
    assert "at most 7 for this rule" in message
    assert "on_excluded='skip'" in message
    assert took < 5  # on 8f518d8 and after a567a28: 19.2 s, accepted
    assert not Schedule.objects.filter(key="acme.dense").exists()


@pytest.mark.parametrize("on_excluded", ["next", "previous"])
def test_a_week_of_excluded_days_is_the_longest_run_the_densest_rule_may_move(on_excluded):
    rrule(EVERY_MINUTE, exclude=WEEK_OF_DATES, on_excluded=on_excluded).validate()
    eight = [*WEEK_OF_DATES, WEEK_OF_DATES[-1] + timedelta(days=1)]
    with pytest.raises(InvalidTiming) as caught:
        rrule(EVERY_MINUTE, exclude=eight, on_excluded=on_excluded).validate()
    assert caught.value.field == "timing.exclude"
    assert "12,960 wall times" in caught.value.message
    # Skipped occurrences are not moved: nothing is walked twice, any run is fine.
    rrule(EVERY_MINUTE, exclude=YEAR_OF_DATES[:300]).validate()
    # A sparser rule may cross a longer run: a day of it walks as few wall times.
    hourly = "FREQ=HOURLY;BYMINUTE=0"
    rrule(hourly, exclude=YEAR_OF_DATES[:300], on_excluded=on_excluded).validate()


def test_weekends_and_holidays_count_in_the_longest_run():
    assert Calendar(weekends=True).validate().longest_run() == 2
    # A Friday before a weekend and the Monday after: four days.
    four = Calendar(dates=(date(2027, 5, 21), date(2027, 5, 24)), weekends=True).validate()
    assert four.longest_run() == 4
    assert MAX_WALLS_PER_DAY // 1440 - 1 == 7


@pytest.mark.parametrize("on_excluded", ["next", "previous"])
def test_counting_a_day_of_the_densest_moved_rule_stays_well_inside_a_pass(on_excluded):
    timing = rrule(EVERY_MINUTE, exclude=WEEK_OF_DATES, on_excluded=on_excluded).validate()
    worst = 0.0
    for offset in range(-2, 10):  # the days before, through and after the week
        day = datetime(2027, 5, 20, tzinfo=UTC) + timedelta(days=offset)
        began = time.thread_time()
        timing.count_between(day, day + timedelta(days=1))
        worst = max(worst, time.thread_time() - began)
    print(f"{on_excluded}: worst day counted in {worst:.3f} s")
    assert worst < PASS_BUDGET  # measured about 0.09 s; on 8f518d8 the year: 14.7-25.5 s


@pytest.mark.parametrize("gap", [timedelta(minutes=1), timedelta(days=40)])
@pytest.mark.parametrize("on_excluded", ["next", "previous"])
def test_the_densest_moved_rule_is_planned_in_passes_of_at_most_a_second(on_excluded, gap):
    """Plan passes with the worker's 0.5 s deadline, as a replica runs them, from a recovery
    point ``gap`` back to caught up: each decision returns within 1 s. (The review's timing:
    23.5 s for a minute's gap, 219.6 s for 40 days.)"""
    timing = rrule(EVERY_MINUTE, exclude=WEEK_OF_DATES, on_excluded=on_excluded).validate()
    last, longest, passes = NOW - gap, 0.0, 0
    while True:
        deadline = time.thread_time() + PASS_BUDGET
        began = time.thread_time()
        decision = planner.plan(
            planner.PlanRequest(
                timing=timing,
                max_delay=timedelta(minutes=5),
                misfire=Misfire.SKIP,
                max_catchup=1,
                last_scheduled_at=last,
                since=datetime(2026, 1, 1, tzinfo=UTC),
                now=NOW,
                expired=partial(_past, deadline),
            )
        )
        longest, passes = max(longest, time.thread_time() - began), passes + 1
        assert decision.last_scheduled_at is not None
        last = decision.last_scheduled_at
        if not decision.more:
            break
        assert passes < 500
    print(f"{on_excluded}, gap {gap}: {passes} passes, longest {longest:.3f} s")
    assert longest <= 1.0
    assert last >= NOW - timedelta(minutes=1)


@pytest.mark.django_db
def test_a_row_holding_the_review_timing_is_parked_naming_the_calendar():
    row = ScheduleFactory.create(
        key="raw.dense_next",
        job="tests.noop",
        timing_kind="rrule",
        rrule=EVERY_MINUTE,
        calendar={
            "holidays": [],
            "weekends": False,
            "dates": [d.isoformat() for d in YEAR_OF_DATES],
        },
        on_excluded="next",
        cron="",
        interval=None,
        anchor=None,
        created_at=NOW - timedelta(days=200),
        next_due_at=NOW,
    )
    began = time.thread_time()
    result = plan_due(now=NOW)
    took = time.thread_time() - began
    row.refresh_from_db()
    assert result.invalid == [str(row)]
    assert (row.parked_field, row.next_due_at) == ("timing.exclude", None)
    assert "365 consecutive excluded days" in row.parked_reason
    assert not Occurrence.objects.filter(schedule=row).exists()
    assert took < 5
