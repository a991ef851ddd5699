"""Planning ahead (``PLAN_AHEAD_SECONDS``): an instant's occurrence is written before the
instant, so a burst of due work pays no plan pass; it is claimed only once due; overlap
``skip`` is decided when it comes due (by the claim); and a change of the record's timing
withdraws what was planned ahead under the old one.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.auth.models import User
from django.test import override_settings

from django_jobs import at, services, store
from django_jobs.models import Occurrence, OccurrenceState, Schedule
from django_jobs.registry import Registry
from django_jobs.safe_error import SafeError
from django_jobs.scheduling import planner
from django_jobs.scheduling.policies import Misfire, Overlap
from django_jobs.scheduling.timings import Every
from django_jobs.testing import FakeClock, run_due

from .factories import T0, ScheduleFactory, declaration
from .storeutil import claim, plan

AHEAD = timedelta(seconds=30)
EVERY_10S = Every(interval=timedelta(seconds=10), anchor=T0)


def request(**changes: object) -> planner.PlanRequest:
    fields: dict[str, object] = dict(
        timing=EVERY_10S,
        max_delay=timedelta(seconds=5),
        misfire=Misfire.SKIP,
        max_catchup=0,
        last_scheduled_at=None,
        since=T0,
        now=T0,
        ahead=AHEAD,
    )
    return planner.PlanRequest(**{**fields, **changes})  # type: ignore[arg-type]


def seconds(*offsets: int) -> list[datetime]:
    return [T0 + timedelta(seconds=s) for s in offsets]


# --- the planner (pure) ---------------------------------------------------------------------


def test_the_planner_plans_the_instants_up_to_now_plus_ahead_and_is_next_due_after_them() -> None:
    decision = planner.plan(request())
    assert decision.run == seconds(0, 10, 20, 30)
    assert decision.last_scheduled_at == T0 + AHEAD
    assert decision.next_due_at == T0 + timedelta(seconds=40)


def test_the_next_pass_plans_on_from_the_last_instant_planned_ahead() -> None:
    first = planner.plan(request())
    decision = planner.plan(
        request(now=T0 + timedelta(seconds=12), last_scheduled_at=first.last_scheduled_at)
    )
    assert decision.run == seconds(40)  # 0-30 were planned; 40 is within 12 + 30


@pytest.mark.parametrize("overlap", [Overlap.ALLOW, Overlap.QUEUE])
def test_allow_and_queue_are_planned_ahead(overlap: Overlap) -> None:
    assert planner.plan(request(overlap=overlap)).run == seconds(0, 10, 20, 30)


def test_overlap_skip_skips_only_the_instants_due_now_not_those_planned_ahead() -> None:
    """Whether the previous run still runs at a later instant is known only then: the
    planner plans those, and the claim skips them if it still runs."""
    decision = planner.plan(request(overlap=Overlap.SKIP, previous_running=True))
    assert decision.skip == [(T0, "overlap")]
    assert decision.run == seconds(10, 20, 30)
    assert decision.last_scheduled_at == T0 + AHEAD
    assert decision.next_due_at == T0 + timedelta(seconds=40)


def test_which_instants_are_missed_is_decided_against_now_not_the_horizon() -> None:
    """Planning ahead never makes a late instant on time: 30 s ago with a 5 s max_delay is
    missed (misfire skip), the ones after now are on time."""
    decision = planner.plan(request(now=T0 + timedelta(seconds=30), since=T0))
    assert decision.run == seconds(30, 40, 50, 60)
    assert [i for i, _ in decision.skip] == seconds(0, 10, 20)


def test_ahead_zero_plans_at_the_instant_as_before() -> None:
    decision = planner.plan(request(ahead=timedelta(0)))
    assert decision.run == [T0]
    assert decision.next_due_at == T0 + timedelta(seconds=10)


def test_a_negative_ahead_is_refused() -> None:
    with pytest.raises(ValueError, match="ahead must not be negative"):
        planner.plan(request(ahead=timedelta(seconds=-1)))


# --- the worker and the store (real PostgreSQL) ---------------------------------------------

pytestmark_db = pytest.mark.django_db


def one_off(key: str, instant: datetime, **fields: object) -> Schedule:
    return ScheduleFactory.create(
        key=key,
        timing_kind="at",
        interval=None,
        anchor=None,
        run_at=instant,
        next_due_at=instant,
        created_at=T0 - timedelta(minutes=1),
        **fields,
    )


@pytestmark_db
def test_a_one_off_due_in_20_s_is_planned_within_half_the_window_and_run_only_at_its_instant(
    clock: FakeClock, jobs: Registry, ran: list[str]
) -> None:
    """PLAN_AHEAD_SECONDS is 30: a schedule is planned once its next instant comes within
    15 s (``worker.planning.due_within``), its instants up to 30 s ahead."""
    clock.set(T0)
    due = T0 + timedelta(seconds=20)
    one_off("soon", due)

    run_due(clock, jobs=jobs)
    assert not Occurrence.objects.exists()  # 20 s away: not yet
    clock.set(due - timedelta(seconds=15))
    run_due(clock, jobs=jobs)
    planned = Occurrence.objects.get()
    assert (planned.scheduled_at, planned.due_at, planned.state) == (
        due,
        due,
        OccurrenceState.SCHEDULED,
    )
    assert planned.attempts == 0  # written, not claimed before it is due
    assert ran == []
    assert Schedule.objects.get(key="soon").next_due_at is None  # nothing left to plan

    clock.set(due - timedelta(microseconds=1))
    run_due(clock, jobs=jobs)
    assert ran == []

    clock.set(due)
    run_due(clock, jobs=jobs)
    assert ran == [str(planned.id)]
    planned.refresh_from_db()
    assert planned.state == OccurrenceState.COMPLETED


@pytestmark_db
def test_with_plan_ahead_off_nothing_is_written_before_the_instant(
    clock: FakeClock, jobs: Registry
) -> None:
    clock.set(T0)
    one_off("soon", T0 + timedelta(seconds=20))
    with override_settings(DJANGO_JOBS={"PLAN_AHEAD_SECONDS": 0}):
        run_due(clock, jobs=jobs)
    assert not Occurrence.objects.exists()


@pytestmark_db
def test_a_planned_ahead_skip_run_due_while_the_previous_runs_is_skipped_by_the_claim(
    clock: FakeClock,
) -> None:
    """Overlap skip, every 10 s: the run of T0 is still processing when T0 + 10 s (planned
    ahead at T0) comes due: that one is skipped, reason overlap; T0 + 20 s, due after T0's
    run ended, runs."""
    clock.set(T0)
    every = ScheduleFactory.create(
        key="every-10s", interval=timedelta(seconds=10), next_due_at=T0, overlap="skip"
    )
    plan(every, T0, T0 + timedelta(seconds=10), T0 + timedelta(seconds=20), now=T0)
    (first,) = claim("r1", now=T0, lease_for=timedelta(hours=1))
    assert claim("r2", now=T0 + timedelta(seconds=10)) == []
    skipped = Occurrence.objects.get(scheduled_at=T0 + timedelta(seconds=10))
    assert (skipped.state, skipped.skip_reason, skipped.attempts) == (
        OccurrenceState.SKIPPED,
        "overlap",
        0,
    )
    store.complete([first], now=T0 + timedelta(seconds=15))
    (third,) = claim("r2", now=T0 + timedelta(seconds=20))
    assert third.scheduled_at == T0 + timedelta(seconds=20)


@pytestmark_db
def test_a_retry_of_a_skip_schedule_waits_for_the_run_in_progress_instead(
    clock: FakeClock,
) -> None:
    """Only a planned run that never started is skipped: a retry due while another occurrence
    of its schedule runs waits for it, then runs."""
    every = ScheduleFactory.create(key="s", next_due_at=None, overlap="skip")
    minute = timedelta(minutes=1)
    plan(every, T0, now=T0)
    (first,) = claim("r1", now=T0)
    store.fail(first, now=T0, error=SafeError("E", "boom"), retry_at=T0 + 2 * minute)
    plan(every, T0 + minute, now=T0 + minute)
    (running,) = claim("r1", now=T0 + minute, lease_for=timedelta(hours=1))

    assert claim("r2", now=T0 + 2 * minute) == []
    retry = Occurrence.objects.get(pk=first.occurrence_id)
    assert retry.state == OccurrenceState.FAILED  # waiting, not skipped
    store.complete([running], now=T0 + 2 * minute)
    (again,) = claim("r2", now=T0 + 2 * minute)
    assert (again.occurrence_id, again.attempt) == (first.occurrence_id, 2)


@pytestmark_db
def test_the_next_plan_pass_is_ahead_of_the_earliest_instant() -> None:
    one_off("later", T0 + timedelta(minutes=5))
    one_off("sooner", T0 + timedelta(minutes=3), overlap="skip")
    assert store.next_schedule_due(ahead=AHEAD) == T0 + timedelta(minutes=3) - AHEAD
    assert store.next_wakeup(now=T0, ahead=AHEAD) == T0 + timedelta(minutes=3) - AHEAD
    assert store.next_schedule_due() == T0 + timedelta(minutes=3)
    Schedule.objects.all().delete()
    assert store.next_schedule_due(ahead=AHEAD) is None
    assert store.next_wakeup(now=T0, ahead=AHEAD) is None


@pytestmark_db
def test_the_next_plan_pass_of_an_instant_at_year_one_is_still_an_instant_python_holds() -> None:
    first = datetime(1, 1, 1, 0, 0, 10, tzinfo=UTC)
    ScheduleFactory.create(key="ancient", next_due_at=first)
    due = store.next_schedule_due(ahead=AHEAD)
    assert due is not None
    assert due.year == 1


@pytestmark_db
def test_changing_a_run_time_one_off_withdraws_the_occurrence_planned_ahead(
    clock: FakeClock, jobs: Registry, root: User, ran: list[str], registered
) -> None:
    """Planned at T0 for T0 + 10 s, moved to T0 + 13 s before it ran: only the new instant
    runs."""
    registered("tests.noop", lambda run: ran.append(run.scheduled_at.isoformat()), runtime=True)
    clock.set(T0)
    old, new = T0 + timedelta(seconds=10), T0 + timedelta(seconds=13)
    services.upsert_schedule(
        declaration("moved", job="tests.noop", timing=at(old)), actor=root, reason="t", now=T0
    )
    run_due(clock)
    assert list(Occurrence.objects.values_list("scheduled_at", flat=True)) == [old]

    clock.set(T0 + timedelta(seconds=1))
    services.upsert_schedule(
        declaration("moved", job="tests.noop", timing=at(new)),
        actor=root,
        reason="later",
        now=clock.now(),
    )
    assert not Occurrence.objects.exists()  # withdrawn with the change
    run_due(clock)
    assert list(Occurrence.objects.values_list("scheduled_at", flat=True)) == [new]
    for instant in (old, new):
        clock.set(instant)
        run_due(clock)
    assert ran == [new.isoformat()]


@pytestmark_db
def test_a_withdrawal_leaves_an_occurrence_a_claim_has_taken(clock: FakeClock) -> None:
    """A claim that won (its instant came on the claimer's clock) keeps its occurrence."""
    schedule = one_off("racing", T0 + timedelta(seconds=20))
    plan(schedule, T0 + timedelta(seconds=20), now=T0)
    assert claim("fast-clock", now=T0 + timedelta(seconds=20))
    store.withdraw_planned_ahead([schedule.pk], now=T0)  # a clock 20 s behind the claimer's
    assert Occurrence.objects.get().state == OccurrenceState.PROCESSING


@pytestmark_db
def test_a_sync_that_moves_a_declared_one_off_withdraws_the_occurrence_planned_ahead(
    clock: FakeClock, registered
) -> None:
    """The same as upsert, through ``jobs sync``: declared for T0 + 10 s and planned ahead,
    then declared for T0 + 13 s: the old instant's occurrence is gone, the new one planned."""
    from django_jobs.services import sync_schedules

    registered("tests.noop", lambda run: None)
    old, new = T0 + timedelta(seconds=10), T0 + timedelta(seconds=13)
    clock.set(T0)
    sync_schedules([declaration("moved", job="tests.noop", timing=at(old))], now=T0)
    run_due(clock)
    assert list(Occurrence.objects.values_list("scheduled_at", flat=True)) == [old]

    clock.set(T0 + timedelta(seconds=1))
    sync_schedules([declaration("moved", job="tests.noop", timing=at(new))], now=clock.now())
    assert not Occurrence.objects.exists()
    run_due(clock)
    assert list(Occurrence.objects.values_list("scheduled_at", flat=True)) == [new]
