"""Properties of schedule evaluation and planning, over generated schedules (hypothesis)."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from django_jobs import cron, every
from django_jobs.identity import occurrence_id
from django_jobs.scheduling import planner
from django_jobs.scheduling.policies import Misfire
from django_jobs.scheduling.zones import iana_names

ZONES = sorted(iana_names())
START_2026 = datetime(2026, 1, 1, tzinfo=UTC)


def field(low: int, high: int) -> st.SearchStrategy[str]:
    number = st.integers(low, high).map(str)
    step = st.integers(2, max(2, (high - low) // 2)).map(lambda n: f"*/{n}")
    span = st.tuples(st.integers(low, high), st.integers(low, high)).map(
        lambda ab: f"{min(ab)}-{max(ab)}"
    )
    listed = st.lists(st.integers(low, high), min_size=2, max_size=4, unique=True).map(
        lambda xs: ",".join(map(str, sorted(xs)))
    )
    return st.one_of(st.just("*"), number, step, span, listed)


crons = st.tuples(
    field(0, 59),
    field(0, 23),
    st.one_of(st.just("*"), field(1, 28)),
    st.just("*"),
    st.one_of(st.just("*"), field(0, 6)),
).map(" ".join)
instants = st.integers(0, 365 * 24 * 60).map(lambda m: START_2026 + timedelta(minutes=m))
windows = st.integers(1, 3 * 24 * 60).map(lambda m: timedelta(minutes=m))
timings = st.builds(
    lambda expr, zone, skipped, repeated: cron(expr, zone=zone, skipped=skipped, repeated=repeated),
    crons,
    st.sampled_from(ZONES),
    st.sampled_from(["shift", "skip"]),
    st.sampled_from(["first", "last", "both"]),
)
FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FAST
@given(timing=timings, start=instants, length=windows)
def test_planned_instants_strictly_increase_and_stay_in_the_window(timing, start, length):
    got = timing.between(start, start + length)
    assert all(a < b for a, b in itertools.pairwise(got))
    assert all(start <= i < start + length for i in got)
    assert all(i.tzinfo is UTC and i.second == 0 for i in got)


@FAST
@given(timing=timings, start=instants, length=windows, cut=st.floats(0, 1))
def test_evaluation_does_not_depend_on_how_the_window_is_cut(timing, start, length, cut):
    middle = start + length * cut
    whole = timing.between(start, start + length)
    assert whole == timing.between(start, middle) + timing.between(middle, start + length)


@FAST
@given(timing=timings, start=instants, length=windows, tenant=st.sampled_from(["", "acme"]))
def test_identities_never_repeat(timing, start, length, tenant):
    got = timing.between(start, start + length)
    ids = [occurrence_id(tenant, "prop.schedule", i) for i in got]
    assert len(set(ids)) == len(ids)


@pytest.mark.slow
@FAST
@given(timing=timings, start=instants, first=windows, second=windows)
def test_iter_from_agrees_with_between(timing, start, first, second):
    end = start + first + second
    lazily = []
    for instant in timing.iter_from(start):
        if instant >= end:
            break
        lazily.append(instant)
    assert lazily == timing.between(start, end)


def _request(timing, last, now, misfire=Misfire.SKIP, pending=()):
    return planner.PlanRequest(
        timing=timing,
        max_delay=timedelta(minutes=5),
        misfire=misfire,
        max_catchup=3,
        last_scheduled_at=last,
        since=START_2026,
        now=now,
        pending_missed=pending,
    )


@pytest.mark.slow
@FAST
@given(
    timing=timings,
    last=instants,
    gap=windows,
    misfire=st.sampled_from(list(Misfire)),
)
def test_planning_twice_from_the_same_recovery_point_gives_the_same_decision(
    timing, last, gap, misfire
):
    request = _request(timing, last, last + gap, misfire)
    assert planner.plan(request) == planner.plan(request)


@pytest.mark.slow
@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(timing=timings, last=instants, steps=st.lists(windows, min_size=2, max_size=5))
def test_planning_step_by_step_plans_what_one_pass_plans(timing, last, steps):
    # On time all along (the worker never fell behind): nothing is missed either way.
    def on_time(request):
        return planner.PlanRequest(**{**request.__dict__, "max_delay": timedelta(days=30)})

    end = last + sum(steps, timedelta(0))
    one_pass = planner.plan(on_time(_request(timing, last, end)))
    assume(not one_pass.more)  # within one pass's bound (planner.ON_TIME_LIMIT)
    planned, point, now = [], last, last
    for step in steps:
        now += step
        decision = planner.plan(on_time(_request(timing, point, now)))
        planned += decision.run + decision.replay
        point = decision.last_scheduled_at or point
        assume(decision.summary is None)
    assert planned == one_pass.run
    assert point == (one_pass.last_scheduled_at or last)


@pytest.mark.slow
@FAST
@given(
    interval=st.integers(1, 7200).map(lambda s: timedelta(seconds=s)),
    anchor=instants,
    start=instants,
    length=windows,
)
def test_every_is_anchored_and_never_drifts(interval, anchor, start, length):
    timing = every(interval, anchor=anchor)
    got = timing.between(start, start + length)
    assert all((i - anchor) % interval == timedelta(0) for i in got)
    assert all(b - a == interval for a, b in itertools.pairwise(got))
    assert len(got) == timing.count_between(start, start + length)
