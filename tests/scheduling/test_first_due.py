"""``planner.first_due``: a new schedule is due for planning at its first instant, which is
exactly where the planner would put its ``next_due_at`` after a first pass."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from django_jobs.scheduling.planner import PlanRequest, first_due, plan
from django_jobs.scheduling.policies import Misfire
from django_jobs.scheduling.timings import at, cron, every

T0 = datetime(2027, 3, 13, 12, 0, tzinfo=UTC)


def test_a_one_off_tomorrow_is_due_at_its_instant() -> None:
    tomorrow = T0 + timedelta(days=1)
    assert first_due(at(tomorrow), since=T0, now=T0) == tomorrow


def test_a_one_off_whose_instant_has_come_is_due_now() -> None:
    assert first_due(at(T0), since=T0, now=T0) == T0
    assert first_due(at(T0 - timedelta(hours=1)), since=T0, now=T0) == T0


def test_a_local_cron_is_due_at_its_first_local_instant_across_the_dst_night() -> None:
    # 02:30 New York does not exist on 2027-03-14; "shift" runs it at 03:00 EDT (07:00Z).
    nightly = cron("30 2 * * *", zone="America/New_York", skipped="shift", repeated="first")
    assert first_due(nightly, since=T0, now=T0) == datetime(2027, 3, 14, 7, 0, tzinfo=UTC)


def test_an_interval_is_due_at_its_next_anchored_instant() -> None:
    hourly = every(timedelta(hours=1), anchor=T0 + timedelta(minutes=15))
    assert first_due(hourly, since=T0, now=T0) == T0 + timedelta(minutes=15)


TIMINGS = st.one_of(
    st.sampled_from(["*/7 * * * *", "0 9 * * 1-5", "30 2 * * *", "0 0 1 * *"]).flatmap(
        lambda expr: st.sampled_from(["UTC", "America/New_York", "Australia/Lord_Howe"]).map(
            lambda zone: cron(expr, zone=zone, skipped="shift", repeated="first")
        )
    ),
    st.integers(min_value=1, max_value=10**6).map(lambda s: every(timedelta(seconds=s))),
    st.integers(min_value=-(10**6), max_value=10**7).map(lambda s: at(T0 + timedelta(seconds=s))),
)


@settings(max_examples=200, deadline=None)
@given(timing=TIMINGS, offset=st.integers(min_value=0, max_value=400 * 86400))
def test_first_due_is_where_a_first_plan_pass_would_put_next_due(timing, offset) -> None:
    since = T0 + timedelta(seconds=offset)
    decision = plan(
        PlanRequest(
            timing=timing,
            max_delay=timedelta(minutes=5),
            misfire=Misfire.SKIP,
            max_catchup=1,
            last_scheduled_at=None,
            since=since,
            now=since,
        )
    )
    due = first_due(timing, since=since, now=since)
    if due > since:  # nothing to plan before then: a first pass at ``since`` plans nothing
        assert (decision.run, decision.next_due_at) == ([], due)
    else:  # planned at the next pass, as before
        assert due == since
