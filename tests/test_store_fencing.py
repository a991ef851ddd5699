"""A worker whose lease was taken over cannot write; the current holder can."""

from __future__ import annotations

from datetime import timedelta

import pytest

from django_jobs import store
from django_jobs.models import Attempt, AttemptOutcome, Occurrence, OccurrenceState
from django_jobs.safe_error import SafeError

from .factories import T0, ScheduleFactory
from .storeutil import LEASE, claim, plan

pytestmark = pytest.mark.django_db

BOOM = SafeError(type="RuntimeError", message="boom")


@pytest.fixture
def taken_over(clock):
    """Worker A's lease expired and worker B claimed the occurrence after it."""
    schedule = ScheduleFactory.create()
    clock.set(T0)
    (occurrence_id,) = plan(schedule, T0, now=clock.now())
    (stale,) = claim("worker-a", clock.now())
    clock.advance(LEASE + timedelta(seconds=1))
    (current,) = claim("worker-b", clock.now())
    assert stale.occurrence_id == current.occurrence_id == occurrence_id
    return stale, current


def test_stale_token_cannot_complete(taken_over, clock) -> None:
    stale, current = taken_over
    result = store.complete([stale], now=clock.now())
    assert result.accepted == frozenset()
    assert result.refused == {stale.occurrence_id}
    occurrence = Occurrence.objects.get(pk=stale.occurrence_id)
    assert occurrence.state == OccurrenceState.PROCESSING
    assert occurrence.lease_owner == "worker-b"
    assert occurrence.fencing_token == current.token


def test_refused_completion_is_recorded_on_the_stale_attempt(taken_over, clock) -> None:
    stale, _ = taken_over
    store.complete([stale], now=clock.now())
    attempt = Attempt.objects.get(occurrence_id=stale.occurrence_id, fencing_token=stale.token)
    assert attempt.outcome == AttemptOutcome.FENCED_OUT
    assert attempt.finished_at == clock.now()


def test_stale_token_cannot_fail_or_dead_letter(taken_over, clock) -> None:
    stale, _ = taken_over
    assert store.fail(stale, now=clock.now(), error=BOOM, retry_at=clock.now()) is False
    assert store.dead_letter(stale, now=clock.now(), error=BOOM) is False
    occurrence = Occurrence.objects.get(pk=stale.occurrence_id)
    assert occurrence.state == OccurrenceState.PROCESSING
    assert occurrence.failures == 1  # the expired lease only
    assert occurrence.last_error_message == ""


def test_stale_owner_renews_nothing(taken_over, clock) -> None:
    stale, current = taken_over
    assert store.renew([stale], owner=stale.owner, now=clock.now(), lease_for=LEASE) == []
    (renewed,) = store.renew([current], owner=current.owner, now=clock.now(), lease_for=LEASE)
    assert renewed.expires_at == clock.now() + LEASE


def test_current_holder_completes_after_a_refused_stale_write(taken_over, clock) -> None:
    stale, current = taken_over
    store.complete([stale], now=clock.now())
    result = store.complete([current], now=clock.now())
    assert result.accepted == {current.occurrence_id}
    occurrence = Occurrence.objects.get(pk=current.occurrence_id)
    assert occurrence.state == OccurrenceState.COMPLETED
    assert occurrence.lease_owner == ""
    assert occurrence.lease_expires_at is None
    outcomes = list(Attempt.objects.filter(occurrence=occurrence).values_list("number", "outcome"))
    assert outcomes == [(1, AttemptOutcome.FENCED_OUT), (2, AttemptOutcome.SUCCEEDED)]


def test_completion_is_written_once(taken_over, clock) -> None:
    _, current = taken_over
    assert store.complete([current], now=clock.now()).accepted == {current.occurrence_id}
    second = store.complete([current], now=clock.now())
    assert second.accepted == frozenset()
    assert second.refused == {current.occurrence_id}


def test_taken_over_attempt_is_marked_lease_lost_and_counted_as_failure(taken_over) -> None:
    stale, _ = taken_over
    attempt = Attempt.objects.get(occurrence_id=stale.occurrence_id, fencing_token=stale.token)
    assert attempt.outcome == AttemptOutcome.LEASE_LOST
    assert Occurrence.objects.get(pk=stale.occurrence_id).failures == 1


def test_owner_may_complete_an_expired_lease_nobody_took_over(clock) -> None:
    # The token, not the expiry, is the authority: nobody holds a newer one.
    schedule = ScheduleFactory.create()
    plan(schedule, T0, now=T0)
    (lease,) = claim("worker-a", T0)
    clock.set(T0 + LEASE * 3)
    assert store.complete([lease], now=clock.now()).accepted == {lease.occurrence_id}


def test_a_fenced_write_refuses_leases_of_two_owners(taken_over, clock) -> None:
    stale, current = taken_over
    with pytest.raises(ValueError, match="one owner"):
        store.complete([stale, current], now=clock.now())
