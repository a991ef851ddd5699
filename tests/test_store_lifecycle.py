"""Planning, claiming, retrying, releasing and purging occurrences through the store."""

from __future__ import annotations

from datetime import timedelta

import pytest

from django_jobs import services, store
from django_jobs.identity import occurrence_id
from django_jobs.models import (
    Attempt,
    AttemptOutcome,
    Limit,
    Occurrence,
    OccurrenceState,
    Schedule,
    ScheduleStatus,
    SkipReason,
    Trigger,
)
from django_jobs.safe_error import SafeError
from django_jobs.store import PlannedOccurrence

from .factories import T0, ScheduleFactory
from .storeutil import LEASE, claim, missed_unstarted, plan, purge

pytestmark = pytest.mark.django_db

BOOM = SafeError(type="RuntimeError", message="boom")


def test_plan_returns_only_new_identities_and_uses_the_derived_identity() -> None:
    schedule = ScheduleFactory.create(tenant="acme")
    first = plan(schedule, T0, T0 + timedelta(minutes=1), now=T0)
    again = plan(schedule, T0, T0 + timedelta(minutes=2), now=T0)
    # A set: ``SELECT id FROM inserted`` promises the new identities, not their order.
    assert set(first) == {
        occurrence_id("acme", schedule.key, T0),
        occurrence_id("acme", schedule.key, T0 + timedelta(minutes=1)),
    }
    assert len(first) == 2
    assert again == [occurrence_id("acme", schedule.key, T0 + timedelta(minutes=2))]
    assert set(Occurrence.objects.values_list("tenant", flat=True)) == {"acme"}


def test_plan_advances_last_scheduled_recovery_point_and_never_moves_it_back() -> None:
    schedule = ScheduleFactory.create()
    plan(schedule, T0 + timedelta(hours=2), T0 + timedelta(hours=1), now=T0)
    plan(schedule, T0, now=T0)
    schedule.refresh_from_db()
    assert schedule.last_scheduled_at == T0 + timedelta(hours=2)


def test_skipped_occurrence_is_recorded_with_its_reason_and_never_claimed() -> None:
    schedule = ScheduleFactory.create()
    store.plan(
        [PlannedOccurrence(schedule.pk, "", schedule.key, T0, skip_reason=SkipReason.MISFIRE)],
        now=T0 + timedelta(hours=1),
    )
    occurrence = Occurrence.objects.get()
    assert (occurrence.state, occurrence.skip_reason) == (OccurrenceState.SKIPPED, "misfire")
    assert occurrence.finished_at == T0 + timedelta(hours=1)
    assert claim("w", T0 + timedelta(days=1)) == []


def test_claim_takes_only_due_work_oldest_first() -> None:
    schedule = ScheduleFactory.create()
    plan(schedule, T0 + timedelta(minutes=2), T0, T0 + timedelta(minutes=10), now=T0)
    leases = claim("w", T0 + timedelta(minutes=5))
    assert [lease.scheduled_at for lease in leases] == [T0, T0 + timedelta(minutes=2)]
    assert all(lease.attempt == 1 and lease.trigger == Trigger.SCHEDULE for lease in leases)
    assert all(lease.expires_at == T0 + timedelta(minutes=5) + LEASE for lease in leases)


def test_claim_respects_the_limit() -> None:
    schedule = ScheduleFactory.create()
    plan(schedule, *[T0 + timedelta(seconds=i) for i in range(5)], now=T0)
    assert len(claim("w", T0 + timedelta(minutes=1), limit=3)) == 3
    assert len(claim("w", T0 + timedelta(minutes=1), limit=3)) == 2


@pytest.mark.parametrize(
    "change",
    [
        {"enabled": False, "disabled_reason": "unsafe"},
        {"status": ScheduleStatus.DRAFT, "decider": "cto", "decide_by": T0.date()},
        {"status": ScheduleStatus.RETIRED},
    ],
    ids=["disabled", "draft", "retired"],
)
def test_claim_skips_schedules_that_may_not_run(change) -> None:
    schedule = ScheduleFactory.create()
    plan(schedule, T0, now=T0)
    Schedule.objects.filter(pk=schedule.pk).update(**change)
    assert claim("w", T0 + timedelta(minutes=1)) == []


def test_claim_filters_by_tenant_and_excluded_keys() -> None:
    mine = ScheduleFactory.create(tenant="acme", key="acme.report")
    theirs = ScheduleFactory.create(tenant="globex", key="globex.report")
    frozen = ScheduleFactory.create(tenant="acme", key="acme.frozen")
    for schedule in (mine, theirs, frozen):
        plan(schedule, T0, now=T0)
    leases = claim("w", T0, tenant="acme", exclude_keys=["acme.frozen"])
    assert [lease.schedule_id for lease in leases] == [mine.pk]
    assert leases[0].tenant == "acme"


def _claimed_by_tenant_and_key(exclude_keys: list[str]) -> set[tuple[str, str]]:
    schedules = {
        (tenant, key): ScheduleFactory.create(tenant=tenant, key=key)
        for tenant in ("", "acme", "globex")
        for key in ("billing.x", "billing.y")
    }
    for schedule in schedules.values():
        plan(schedule, T0, now=T0)
    names = {s.pk: name for name, s in schedules.items()}
    return {names[lease.schedule_id] for lease in claim("w", T0, exclude_keys=exclude_keys)}


def test_excluding_a_tenant_star_skips_every_schedule_of_that_tenant_only() -> None:
    assert _claimed_by_tenant_and_key(["acme/*"]) == {
        ("", "billing.x"),
        ("", "billing.y"),
        ("globex", "billing.x"),
        ("globex", "billing.y"),
    }


def test_excluding_tenant_slash_key_skips_that_key_in_that_tenant_only() -> None:
    assert _claimed_by_tenant_and_key(["acme/billing.x"]) == {
        ("", "billing.x"),
        ("", "billing.y"),
        ("acme", "billing.y"),
        ("globex", "billing.x"),
        ("globex", "billing.y"),
    }


def test_excluding_a_bare_key_skips_it_in_every_tenant() -> None:
    assert _claimed_by_tenant_and_key(["billing.x"]) == {
        ("", "billing.y"),
        ("acme", "billing.y"),
        ("globex", "billing.y"),
    }


def test_excluding_an_entry_with_a_slash_also_skips_the_key_it_spells() -> None:
    # Keys may hold "/": the kill switch errs towards pausing (conf.py).
    whole = ScheduleFactory.create(tenant="globex", key="reports/daily")
    split = ScheduleFactory.create(tenant="reports", key="daily")
    other = ScheduleFactory.create(tenant="reports", key="weekly")
    for schedule in (whole, split, other):
        plan(schedule, T0, now=T0)
    leases = claim("w", T0, exclude_keys=["reports/daily"])
    assert [lease.schedule_id for lease in leases] == [other.pk]


def test_excluding_tenant_slash_key_splits_at_the_first_slash() -> None:
    nested = ScheduleFactory.create(tenant="acme", key="reports/daily")
    elsewhere = ScheduleFactory.create(tenant="globex", key="reports/daily")
    for schedule in (nested, elsewhere):
        plan(schedule, T0, now=T0)
    leases = claim("w", T0, exclude_keys=["acme/reports/daily"])
    assert [lease.schedule_id for lease in leases] == [elsewhere.pk]


def test_a_schedules_last_start_and_completion_are_read_from_its_occurrences(
    django_assert_num_queries,
) -> None:
    schedule, idle = ScheduleFactory.create(), ScheduleFactory.create()
    plan(schedule, T0, T0 + timedelta(minutes=1), T0 + timedelta(minutes=2), now=T0)

    def points() -> list[tuple]:
        rows = services.with_recovery_points(Schedule.objects.order_by("pk"))
        with django_assert_num_queries(1):  # every schedule's, in one query
            return list(rows.values_list("pk", "last_started_at", "last_completed_at"))

    assert points() == [(schedule.pk, None, None), (idle.pk, None, None)]
    (first,) = claim("w", T0 + timedelta(seconds=3), limit=1)
    store.complete([first], now=T0 + timedelta(seconds=9))
    at = [T0 + timedelta(seconds=3), T0 + timedelta(seconds=9)]
    assert points() == [(schedule.pk, *at), (idle.pk, None, None)]
    occurrence = Occurrence.objects.get(pk=first.occurrence_id)
    assert (occurrence.started_at, occurrence.finished_at) == tuple(at)

    # A start still running counts; so does one that ended dead. Completions only count.
    (second,) = claim("w", T0 + timedelta(minutes=1, seconds=3), limit=1)
    assert points()[0] == (schedule.pk, T0 + timedelta(minutes=1, seconds=3), at[1])
    assert store.dead_letter(second, now=T0 + timedelta(minutes=1, seconds=5), error=BOOM)
    assert points()[0] == (schedule.pk, T0 + timedelta(minutes=1, seconds=3), at[1])
    (third,) = claim("w", T0 + timedelta(minutes=2, seconds=1), limit=1)
    store.complete([third], now=T0 + timedelta(minutes=2, seconds=2))
    assert points()[0] == (
        schedule.pk,
        T0 + timedelta(minutes=2, seconds=1),
        T0 + timedelta(minutes=2, seconds=2),
    )


def test_failed_attempt_waits_for_its_retry_then_runs_as_attempt_two() -> None:
    schedule = ScheduleFactory.create()
    plan(schedule, T0, now=T0)
    (lease,) = claim("w", T0)
    retry_at = T0 + timedelta(seconds=30)
    assert store.fail(lease, now=T0 + timedelta(seconds=1), error=BOOM, retry_at=retry_at)

    occurrence = Occurrence.objects.get()
    assert (occurrence.state, occurrence.due_at, occurrence.trigger) == (
        OccurrenceState.FAILED,
        retry_at,
        Trigger.RETRY,
    )
    assert (occurrence.last_error_type, occurrence.last_error_message) == ("RuntimeError", "boom")
    assert occurrence.lease_owner == ""
    assert claim("w", retry_at - timedelta(seconds=1)) == []
    (retry,) = claim("w", retry_at)
    assert (retry.attempt, retry.trigger) == (2, Trigger.RETRY)
    assert retry.token > lease.token
    first = Attempt.objects.get(number=1)
    assert (first.outcome, first.error_type, first.error_message) == (
        AttemptOutcome.FAILED,
        "RuntimeError",
        "boom",
    )


def test_dead_letter_keeps_the_safe_error_and_is_never_claimed_again() -> None:
    schedule = ScheduleFactory.create()
    plan(schedule, T0, now=T0)
    (lease,) = claim("w", T0)
    assert store.dead_letter(lease, now=T0, error=BOOM, outcome=AttemptOutcome.TIMED_OUT)
    occurrence = Occurrence.objects.get()
    assert (occurrence.state, occurrence.failures, occurrence.finished_at) == (
        OccurrenceState.DEAD,
        1,
        T0,
    )
    assert Attempt.objects.get().outcome == AttemptOutcome.TIMED_OUT
    assert claim("w", T0 + timedelta(days=1)) == []


def test_released_work_is_claimable_at_once_by_another_replica_and_not_a_failure() -> None:
    schedule = ScheduleFactory.create()
    plan(schedule, T0, now=T0)
    (lease,) = claim("draining", T0)
    result = store.release([lease], now=T0 + timedelta(seconds=2))
    assert result.accepted == {lease.occurrence_id}
    (taken,) = claim("other", T0 + timedelta(seconds=2))
    assert taken.token > lease.token
    occurrence = Occurrence.objects.get()
    assert (occurrence.failures, occurrence.lease_owner) == (0, "other")
    assert Attempt.objects.get(number=1).outcome == AttemptOutcome.RELEASED


@pytest.mark.parametrize("overlap", ["allow", "queue", "skip"])
def test_work_released_after_its_max_delay_is_resumed_not_left_for_the_misfire_planner(
    overlap: str,
) -> None:
    """Found by the fault campaign (seed 7, machine PostgreSQL): a run started on time, then
    released by a SIGTERM after ``max_delay`` had passed, was excluded from claims as 'missed'
    while the planner (which decides only never-started rows) left it alone: stuck forever."""
    schedule = ScheduleFactory.create(max_delay=timedelta(seconds=30), overlap=overlap)
    plan(schedule, T0, now=T0)
    (lease,) = claim("draining", T0)
    later = T0 + timedelta(minutes=5)
    store.release([lease], now=later)
    assert missed_unstarted(schedule, now=later) == []
    (resumed,) = claim("other", later)
    assert (resumed.occurrence_id, resumed.attempt) == (lease.occurrence_id, 2)


def test_a_never_started_run_past_its_max_delay_still_waits_for_the_misfire_planner() -> None:
    schedule = ScheduleFactory.create(max_delay=timedelta(seconds=30))
    plan(schedule, T0, now=T0)
    later = T0 + timedelta(minutes=5)
    assert claim("late", later) == []
    assert missed_unstarted(schedule, now=later) == [T0]


def test_renew_extends_the_lease_and_keeps_it_from_being_taken() -> None:
    schedule = ScheduleFactory.create()
    plan(schedule, T0, now=T0)
    (lease,) = claim("w", T0)
    halfway = T0 + LEASE / 2
    (renewed,) = store.renew([lease], owner="w", now=halfway, lease_for=LEASE)
    assert renewed.expires_at == halfway + LEASE
    assert claim("other", T0 + LEASE + timedelta(seconds=1)) == []
    assert Occurrence.objects.get().lease_expires_at == halfway + LEASE


def test_renew_under_another_owner_name_is_refused() -> None:
    schedule = ScheduleFactory.create()
    plan(schedule, T0, now=T0)
    (lease,) = claim("w", T0)
    assert store.renew([lease], owner="impostor", now=T0, lease_for=LEASE) == []


def _finished(schedule, *instants):
    plan(schedule, *instants, now=T0)
    leases = claim("w", instants[-1], limit=len(instants))
    store.complete(leases, now=instants[-1])


def test_purge_removes_finished_occurrences_older_than_keep_for() -> None:
    schedule = ScheduleFactory.create()
    Limit.objects.create(schedule=schedule, keep_for=timedelta(days=2))
    days = [T0 + timedelta(days=d) for d in range(5)]
    _finished(schedule, *days)
    plan(schedule, T0 - timedelta(days=30), now=T0)  # old but never run: must stay
    deleted = purge(now=T0 + timedelta(days=5), batch_size=2)
    assert deleted == 3
    remaining = sorted(Occurrence.objects.values_list("scheduled_at", flat=True))
    assert remaining == [T0 - timedelta(days=30), days[3], days[4]]
    assert Attempt.objects.count() == 2


def test_purge_keeps_the_newest_keep_last() -> None:
    schedule = ScheduleFactory.create()
    other = ScheduleFactory.create()
    Limit.objects.create(schedule=schedule, keep_last=2)
    instants = [T0 + timedelta(minutes=m) for m in range(6)]
    _finished(schedule, *instants)
    _finished(other, *instants)  # no Limit: untouched
    assert purge(now=T0 + timedelta(days=1), batch_size=100) == 4
    kept = sorted(
        Occurrence.objects.filter(schedule=schedule).values_list("scheduled_at", flat=True)
    )
    assert kept == instants[-2:]
    assert Occurrence.objects.filter(schedule=other).count() == 6
