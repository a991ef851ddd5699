"""``planner.plan_unreached``: the instant of an ``at`` one-off that ``plan`` never reaches,
because it had passed when the record was written, is decided as any instant is."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from django_jobs.scheduling.planner import PlanRequest, plan, plan_unreached
from django_jobs.scheduling.policies import Misfire
from django_jobs.scheduling.timings import Timing, after, at, every

WRITTEN = datetime(2027, 5, 1, 12, 0, tzinfo=UTC)  # the record's creation, and now
HOUR = timedelta(hours=1)


def request(
    timing: Timing,
    *,
    misfire: Misfire = Misfire.SKIP,
    last: datetime | None = None,
    now: datetime = WRITTEN,
) -> PlanRequest:
    return PlanRequest(
        timing=timing,
        max_delay=HOUR,
        misfire=misfire,
        max_catchup=1,
        last_scheduled_at=last,
        since=WRITTEN,
        now=now,
    )


def test_plan_never_reaches_a_one_off_written_after_its_instant() -> None:
    decision = plan(request(at(WRITTEN - timedelta(minutes=30))))
    assert (decision.run, decision.replay, decision.skip) == ([], [], [])
    assert decision.next_due_at is None  # the bug: nothing planned, nothing due, ever


def test_a_one_off_written_within_its_max_delay_after_its_instant_runs_now() -> None:
    instant = WRITTEN - timedelta(minutes=30)
    decision = plan_unreached(request(at(instant)))
    assert decision is not None
    assert (decision.run, decision.replay, decision.skip) == ([instant], [], [])
    assert decision.last_scheduled_at == instant


def test_a_one_off_written_later_than_its_max_delay_is_skipped_by_misfire_skip() -> None:
    instant = WRITTEN - 2 * HOUR
    decision = plan_unreached(request(at(instant)))
    assert decision is not None
    assert (decision.run, decision.replay, decision.skip) == ([], [], [(instant, "misfire")])


def test_a_one_off_written_later_than_its_max_delay_runs_late_by_replay_once() -> None:
    instant = WRITTEN - 2 * HOUR
    decision = plan_unreached(request(at(instant), misfire=Misfire.REPLAY_ONCE))
    assert decision is not None
    assert (decision.run, decision.replay, decision.skip) == ([], [instant], [])


def test_a_one_off_moved_to_an_instant_before_its_recovery_point_is_decided() -> None:
    instant = WRITTEN + timedelta(minutes=10)
    later = WRITTEN + timedelta(minutes=30)
    decision = plan_unreached(request(at(instant), last=WRITTEN + timedelta(minutes=20), now=later))
    assert decision is not None
    assert decision.run == [instant]


def test_what_plan_reaches_is_left_to_plan() -> None:
    assert plan_unreached(request(at(WRITTEN + HOUR))) is None  # still to come
    assert plan_unreached(request(at(WRITTEN))) is None  # planned by the next pass
    later = WRITTEN + 2 * HOUR  # after the creation, missed: plan decides it
    assert plan_unreached(request(at(WRITTEN + HOUR), now=later)) is None
    # Recurring timings owe nothing from before their record; after() counts from it.
    assert plan_unreached(request(every(timedelta(minutes=5)))) is None
    assert plan_unreached(request(after(timedelta(0)).created(WRITTEN))) is None
