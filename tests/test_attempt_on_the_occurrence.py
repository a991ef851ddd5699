"""The current attempt on the occurrence row (#38): a claim writes no ``Attempt`` row; the
attempt's history row is inserted once, by the write that ends it (completion, failure,
release, cancel) or by the claim that takes its lapsed lease over. Readers see the attempt
holding the lease through ``Occurrence.current_attempt``.

A replica of the release before (rolling upgrade) inserts an open row when it claims: this
release's ending write ends that row in place, and a takeover counts it as started when it
says ``running``. Migration 0022 moves the open rows of processing occurrences onto them.
"""

from __future__ import annotations

import io
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.db import connection, transaction

from django_jobs import services, store
from django_jobs.models import Attempt, AttemptOutcome, Occurrence, OccurrenceState
from django_jobs.safe_error import SafeError

from .concurrency import backends_waiting_on_locks, on_own_connection, wait_until
from .factories import T0, ScheduleFactory
from .storeutil import LEASE, claim, plan

pytestmark = pytest.mark.django_db

S = timedelta(seconds=1)


def rows(occurrence_id) -> list[tuple[int, str, str]]:
    """Its Attempt (history) rows: number, outcome, replica."""
    found = Attempt.objects.filter(occurrence_id=occurrence_id).order_by("number")
    return list(found.values_list("number", "outcome", "replica"))


def test_a_claim_writes_no_attempt_row_and_the_completion_writes_its_one_row() -> None:
    (occurrence_id,) = plan(ScheduleFactory.create(), T0, now=T0)
    (lease,) = claim("w1", T0 + S)
    assert rows(occurrence_id) == []
    current = Occurrence.objects.get(pk=occurrence_id).current_attempt()
    assert current is not None
    assert (current.number, current.fencing_token, current.replica, current.outcome) == (
        1,
        lease.token,
        "w1",
        AttemptOutcome.RUNNING,
    )
    assert current.started_at == T0 + S

    assert store.complete([lease], now=T0 + 3 * S).accepted
    (attempt,) = Attempt.objects.filter(occurrence_id=occurrence_id)
    assert (attempt.number, attempt.fencing_token, attempt.replica) == (1, lease.token, "w1")
    assert (attempt.outcome, attempt.started_at, attempt.finished_at) == (
        AttemptOutcome.SUCCEEDED,
        T0 + S,
        T0 + 3 * S,
    )
    assert attempt.trigger == "schedule"
    assert Occurrence.objects.get(pk=occurrence_id).current_attempt() is None


def test_a_failed_attempt_keeps_the_trigger_it_ran_for_and_its_error() -> None:
    """The failure sets the occurrence's trigger to ``retry`` for the next attempt; the
    history row says what this one ran for."""
    (occurrence_id,) = plan(ScheduleFactory.create(max_attempts=3), T0, now=T0)
    (lease,) = claim("w1", T0 + S)
    error = SafeError("ValueError", "boom")
    assert store.fail(lease, now=T0 + 2 * S, error=error, retry_at=T0 + 9 * S)
    (attempt,) = Attempt.objects.filter(occurrence_id=occurrence_id)
    assert (attempt.trigger, attempt.outcome, attempt.error_type, attempt.error_message) == (
        "schedule",
        AttemptOutcome.FAILED,
        "ValueError",
        "boom",
    )
    assert Occurrence.objects.get(pk=occurrence_id).trigger == "retry"


def test_a_takeover_writes_the_lost_attempts_row_and_the_late_write_is_fenced_out() -> None:
    (occurrence_id,) = plan(ScheduleFactory.create(max_attempts=5), T0, now=T0)
    (stale,) = claim("w1", T0 + S)
    (current,) = claim("w2", T0 + S + LEASE + S)
    assert rows(occurrence_id) == [(1, AttemptOutcome.LEASE_LOST, "w1")]
    assert Occurrence.objects.get(pk=occurrence_id).failures == 1

    assert not store.complete([stale], now=T0 + LEASE + 3 * S).accepted
    assert rows(occurrence_id) == [(1, AttemptOutcome.FENCED_OUT, "w1")]
    assert store.complete([current], now=T0 + LEASE + 4 * S).accepted
    assert rows(occurrence_id) == [
        (1, AttemptOutcome.FENCED_OUT, "w1"),
        (2, AttemptOutcome.SUCCEEDED, "w2"),
    ]


def blocked_behind_a_claim(then, *, claimer: str, at) -> object:
    """Run ``then`` on its own connection while a claim by ``claimer`` at ``at`` holds the
    occurrence's row in a transaction not yet committed; once ``then`` waits for that lock,
    commit the claim; ``then``'s result."""
    claimed, release = threading.Event(), threading.Event()

    def claim_and_hold() -> None:
        with transaction.atomic():
            assert claim(claimer, at)
            claimed.set()
            assert release.wait(timeout=30)

    with ThreadPoolExecutor(2) as pool:
        holder = pool.submit(on_own_connection(claim_and_hold))
        assert claimed.wait(timeout=30)
        waiting = pool.submit(on_own_connection(then))
        wait_until(lambda: backends_waiting_on_locks() == 1, what="the second call to wait")
        release.set()
        holder.result(timeout=30)
        return waiting.result(timeout=30)


@pytest.mark.django_db(transaction=True)
def test_a_late_write_refused_behind_a_takeover_records_fenced_out() -> None:
    """The stale holder's completion waits for the row the takeover holds; once it commits,
    the write is refused, and the lost attempt's row the takeover wrote (after the write's
    statement began) says fenced_out."""
    (occurrence_id,) = plan(ScheduleFactory.create(max_attempts=5), T0, now=T0)
    (stale,) = claim("w1", T0 + S)
    late = T0 + S + LEASE + S
    result = blocked_behind_a_claim(
        lambda: store.complete([stale], now=late), claimer="w2", at=late
    )
    assert result.refused == {occurrence_id}  # type: ignore[attr-defined]
    assert rows(occurrence_id) == [(1, AttemptOutcome.FENCED_OUT, "w1")]


@pytest.mark.django_db(transaction=True)
def test_a_cancel_racing_a_claim_writes_the_claimed_attempts_row(django_user_model) -> None:
    """The cancel waits for the claim's transaction (it locks the occurrence row), then
    cancels the attempt the claim started, and writes its history row."""
    schedule = ScheduleFactory.create()
    (occurrence_id,) = plan(schedule, T0, now=T0)
    root = django_user_model.objects.create_superuser("root", "root@example.com", "x")
    occurrence = Occurrence.objects.get(pk=occurrence_id)

    def cancel() -> Occurrence:
        return services.cancel(occurrence, actor=root, reason="stop", now=T0 + 2 * S)

    blocked_behind_a_claim(cancel, claimer="w1", at=T0 + S)
    assert Occurrence.objects.get(pk=occurrence_id).state == OccurrenceState.CANCELLED
    assert rows(occurrence_id) == [(1, AttemptOutcome.CANCELLED, "w1")]


def test_cancelling_a_running_occurrence_writes_its_attempts_row(django_user_model) -> None:
    schedule = ScheduleFactory.create()
    (occurrence_id,) = plan(schedule, T0, now=T0)
    claim("w1", T0 + S)
    root = django_user_model.objects.create_superuser("root", "root@example.com", "x")
    services.cancel(
        Occurrence.objects.get(pk=occurrence_id), actor=root, reason="stop", now=T0 + 2 * S
    )
    assert rows(occurrence_id) == [(1, AttemptOutcome.CANCELLED, "w1")]
    (attempt,) = Attempt.objects.filter(occurrence_id=occurrence_id)
    assert attempt.finished_at == T0 + 2 * S


# --- A rolling upgrade: claims by the release before, with an open Attempt row -------------


def claimed_by_the_release_before(
    outcome: str, *, left: object = None
) -> tuple[store.Lease, Occurrence]:
    """A claim as the release before wrote it: ``attempt_started_at`` as the attempt before
    left it (``left``; it does not know the column), and an open Attempt row saying
    ``outcome``."""
    (occurrence_id,) = plan(ScheduleFactory.create(max_attempts=5), T0, now=T0)
    (lease,) = claim("old", T0 + S)
    Occurrence.objects.filter(pk=occurrence_id).update(attempt_started_at=left)
    Attempt.objects.create(
        occurrence_id=occurrence_id,
        number=1,
        fencing_token=lease.token,
        replica="old",
        trigger="schedule",
        started_at=T0 + S,
        outcome=outcome,
    )
    return lease, Occurrence.objects.get(pk=occurrence_id)


def test_the_ending_write_ends_an_open_row_of_the_release_before_in_place() -> None:
    lease, occurrence = claimed_by_the_release_before(AttemptOutcome.RUNNING)
    assert [a.outcome for a in occurrence.attempts_so_far()] == [AttemptOutcome.RUNNING]
    assert store.complete([lease], now=T0 + 2 * S).accepted
    assert rows(occurrence.pk) == [(1, AttemptOutcome.SUCCEEDED, "old")]


@pytest.mark.parametrize(
    ("open_row", "ended", "failures"),
    [(AttemptOutcome.RUNNING, AttemptOutcome.LEASE_LOST, 1), ("claimed", "unstarted", 0)],
)
@pytest.mark.parametrize("left", [None, T0], ids=["unset", "a start left by the one before"])
def test_a_takeover_of_a_claim_by_the_release_before_reads_its_open_row(
    open_row, ended, failures, left
) -> None:
    """The open row says whether it started, whatever the column the release before does
    not write holds (a start of the attempt before it)."""
    _, occurrence = claimed_by_the_release_before(open_row, left=left)
    claim("new", T0 + S + LEASE + S)
    assert rows(occurrence.pk) == [(1, ended, "old")]
    assert Occurrence.objects.get(pk=occurrence.pk).failures == failures


# --- Migration 0022 -----------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_migration_0022_copies_open_rows_onto_their_occurrence_and_keeps_them() -> None:
    """The open rows stay for the replicas of the release before that may still run them;
    this release reads them first and ends them in place."""
    schedule = ScheduleFactory.create()
    plan(schedule, T0, T0 + S, now=T0)
    running_id, ahead_id = (o.pk for o in schedule.occurrences.order_by("scheduled_at"))
    claim("w1", T0 + 2 * S, start_now=1)  # the second claimed ahead: not started
    out = io.StringIO()
    try:
        call_command("migrate", "django_jobs", "0021", verbosity=0, stdout=out)
        # Back at 0021: the attempts are open rows, as the release before kept them.
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT occurrence_id, outcome FROM django_jobs_attempt ORDER BY started_at"
            )
            assert dict(cursor.fetchall()) == {running_id: "running", ahead_id: "claimed"}
    finally:
        call_command("migrate", verbosity=0, stdout=out)
    running, ahead = (Occurrence.objects.get(pk=pk) for pk in (running_id, ahead_id))
    assert running.attempt_started_at == T0 + 2 * S
    assert ahead.attempt_started_at is None
    assert [a.outcome for a in running.attempts_so_far()] == [AttemptOutcome.RUNNING]
    assert [a.outcome for a in ahead.attempts_so_far()] == [AttemptOutcome.CLAIMED]
    assert running.state == ahead.state == OccurrenceState.PROCESSING
    lease = store.Lease(
        occurrence_id=running_id,
        token=running.fencing_token,
        owner="w1",
        expires_at=T0 + LEASE,
        schedule_id=running.schedule_id,
        tenant="",
        scheduled_at=T0,
        attempt=1,
        trigger="schedule",
        failures=0,
        args={},
    )
    assert store.complete([lease], now=T0 + 3 * S).accepted
    assert rows(running_id) == [(1, AttemptOutcome.SUCCEEDED, "w1")]


def test_a_run_the_worker_starts_at_once_is_recorded_started_behind_a_dead_lettered_row() -> None:
    """A claim's runs are numbered as the worker counts them: a row a lost attempt
    dead-letters in the same claim is not one. Numbered with it, the first run (which the
    worker starts at once, ``start_now=1``) was recorded claimed ahead, so a crash of its
    replica cost no attempt: a crasher started 4 times with ``max_attempts`` 3 in the
    failover campaign of 2026-12-07."""
    crasher = ScheduleFactory.create(max_attempts=1)
    plan(crasher, T0, now=T0)
    (lost,) = claim("w1", T0 + S)  # started at once; its replica dies
    later = ScheduleFactory.create()
    # Due after the lost lease lapsed: in claim order, behind the row the claim dead-letters.
    (run_id,) = plan(later, lost.expires_at + S / 2, now=T0)
    runs = store.claim_runs(
        owner="w2", now=T0 + S + LEASE + S, lease_for=LEASE, limit=5, start_now=1
    )
    assert runs.dead == [lost.occurrence_id]
    assert [lease.occurrence_id for lease, _ in runs.runs] == [run_id]
    (started,) = Occurrence.objects.get(pk=run_id).attempts_so_far()
    assert started.outcome == AttemptOutcome.RUNNING
