"""Real ``runworker`` processes against real PostgreSQL: replicas, kills, pauses, signals.

Leases are 2 seconds here (tests/worker_settings.py) so that faults play out quickly. Every wait
is on a condition with a bound.
"""

from __future__ import annotations

import signal
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest

from django_jobs import store
from django_jobs.models import Attempt, AttemptOutcome, Occurrence, OccurrenceState, Schedule
from tests.workerapp.models import Effect

from .concurrency import wait_until
from .factories import ScheduleFactory
from .storeutil import claim, plan

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.processes]

NOW = datetime.now(UTC)  # the processes use the real clock: plan work that is already due


def due_schedule(job: str, count: int, **fields) -> Schedule:
    schedule = ScheduleFactory.create(job=job, **fields)
    instants = [NOW - timedelta(minutes=10) + timedelta(milliseconds=n) for n in range(count)]
    plan(schedule, *instants, now=NOW)
    return schedule


def state_of(schedule: Schedule) -> Counter[str]:
    return Counter(Occurrence.objects.filter(schedule=schedule).values_list("state", flat=True))


def test_three_replicas_complete_every_occurrence_exactly_once(start) -> None:
    replicas = [start(f"r{n}", concurrency=4) for n in range(3)]
    for replica in replicas:  # each has its signal handlers before it is told to stop
        replica.wait_logged("worker.started")
    # The work comes due once all three serve, and wakes them together: due before, it could
    # all be done by the first replica up before the others had started.
    schedule = due_schedule("proc.effect", 300)
    store.notify("tests.due")

    wait_until(lambda: state_of(schedule)["completed"] == 300, timeout=120, what="300 completions")

    effects = Counter(Effect.objects.values_list("occurrence_key", flat=True))
    keys = {
        str(pk) for pk in Occurrence.objects.filter(schedule=schedule).values_list("pk", flat=True)
    }
    assert set(effects) == keys, "an occurrence was lost"
    assert set(effects.values()) == {1}, "an effect was committed twice"
    succeeded = Attempt.objects.filter(occurrence__schedule=schedule, outcome="succeeded")
    assert succeeded.count() == 300
    assert len(set(succeeded.values_list("replica", flat=True))) >= 2, "one replica did it all"
    for replica in replicas:
        replica.signal(signal.SIGTERM)
        assert replica.wait_exit() == 0


def test_kill_9_mid_run_another_replica_completes_with_a_higher_token(start, tmp_path) -> None:
    schedule = due_schedule("proc.first_attempt_hangs", 1)
    occurrence = Occurrence.objects.get(schedule=schedule)
    doomed = start("doomed")
    wait_until(lambda: (tmp_path / f"started-{occurrence.pk}").exists(), what="attempt 1 to start")

    doomed.process.kill()  # SIGKILL: no cleanup, no release
    doomed.wait_exit()
    survivor = start("survivor")
    wait_until(
        lambda: Occurrence.objects.get(pk=occurrence.pk).state == "completed",
        timeout=60,
        what="the survivor to complete it after the lease expired",
    )

    attempts = list(Attempt.objects.filter(occurrence=occurrence).order_by("number"))
    assert [(a.replica, a.outcome) for a in attempts] == [
        ("doomed", AttemptOutcome.LEASE_LOST),
        ("survivor", AttemptOutcome.SUCCEEDED),
    ]
    lost, won = (a.fencing_token for a in attempts)
    assert won > lost
    assert list(Effect.objects.values_list("token", flat=True)) == [won]
    survivor.signal(signal.SIGTERM)
    assert survivor.wait_exit() == 0


def test_paused_replica_wakes_up_fenced_out_and_its_effect_never_commits(start, tmp_path) -> None:
    schedule = due_schedule("proc.first_attempt_hangs", 1)
    occurrence = Occurrence.objects.get(schedule=schedule)
    paused = start("paused")
    wait_until(lambda: (tmp_path / f"started-{occurrence.pk}").exists(), what="attempt 1 to start")

    paused.signal(signal.SIGSTOP)  # past its lease: its lease keeper is frozen too
    other = start("other")
    wait_until(
        lambda: Occurrence.objects.get(pk=occurrence.pk).state == "completed",
        timeout=60,
        what="the other replica to take over and complete",
    )
    paused.signal(signal.SIGCONT)
    (tmp_path / "go").touch()  # the paused handler now tries run.atomic() with its old token
    paused.wait_logged("lease.lost", timeout=30)

    attempts = list(Attempt.objects.filter(occurrence=occurrence).order_by("number"))
    assert [(a.replica, a.outcome) for a in attempts] == [
        ("paused", AttemptOutcome.LEASE_LOST),
        ("other", AttemptOutcome.SUCCEEDED),
    ]
    won = attempts[1].fencing_token
    assert won > attempts[0].fencing_token
    assert list(Effect.objects.values_list("occurrence_key", "token")) == [
        (str(occurrence.pk), won)
    ]
    assert Occurrence.objects.get(pk=occurrence.pk).state == OccurrenceState.COMPLETED
    for replica in (paused, other):
        replica.signal(signal.SIGTERM)
        assert replica.wait_exit() == 0


def test_sigterm_drains_within_the_grace_and_releases_unfinished_work(start, tmp_path) -> None:
    schedule = due_schedule("proc.cooperative", 2)
    replica = start(
        "draining",
        concurrency=2,
        env={"JOBS_LEASE_SECONDS": "60", "JOBS_SHUTDOWN_GRACE_SECONDS": "1"},
    )
    wait_until(lambda: len(list(tmp_path.glob("started-*"))) == 2, what="both runs to start")

    replica.signal(signal.SIGTERM)
    assert replica.wait_exit(timeout=30) == 0

    rows = list(Occurrence.objects.filter(schedule=schedule))
    assert {(o.state, o.lease_owner, o.lease_expires_at) for o in rows} == {
        (OccurrenceState.SCHEDULED, "", None)
    }
    outcomes = Attempt.objects.filter(occurrence__schedule=schedule).values_list(
        "outcome", flat=True
    )
    assert sorted(outcomes) == [AttemptOutcome.RELEASED] * 2
    # Released, not left to expire: the 60-second leases are gone and others may claim now.
    taken = claim(owner="next", now=datetime.now(UTC), lease_for=timedelta(seconds=60), limit=5)
    assert len(taken) == 2


def test_a_second_signal_exits_at_once_and_still_releases(start, tmp_path) -> None:
    schedule = due_schedule("proc.stubborn", 1)
    replica = start(
        "impatient", env={"JOBS_LEASE_SECONDS": "60", "JOBS_SHUTDOWN_GRACE_SECONDS": "600"}
    )
    wait_until(lambda: len(list(tmp_path.glob("started-*"))) == 1, what="the run to start")
    replica.signal(signal.SIGTERM)
    replica.wait_logged("worker.draining")
    replica.signal(signal.SIGTERM)
    assert replica.wait_exit(timeout=30) == 0
    assert state_of(schedule) == Counter({"scheduled": 1})


def test_a_handler_that_ignores_cancellation_is_cut_off_at_timeout_plus_grace(start) -> None:
    schedule = due_schedule("proc.stubborn", 1, timeout=timedelta(seconds=1), max_attempts=3)
    replica = start("cutter", env={"JOBS_LEASE_SECONDS": "60", "JOBS_TIMEOUT_GRACE_SECONDS": "1"})

    assert replica.wait_exit(timeout=60) == 3  # asks its supervisor for a restart

    (attempt,) = Attempt.objects.filter(occurrence__schedule=schedule)
    assert attempt.outcome == AttemptOutcome.TIMED_OUT
    assert attempt.finished_at is not None
    assert attempt.finished_at - attempt.started_at >= timedelta(seconds=2)  # timeout + grace
    occurrence = Occurrence.objects.get(schedule=schedule)
    assert (occurrence.state, occurrence.failures, occurrence.lease_owner) == ("failed", 1, "")
    assert replica.logged("run.timed_out") == 1
    assert replica.logged("run.cut_off") == 1


def test_retries_with_backoff_then_dead_and_permanent_failure_straight_to_dead(start) -> None:
    failing = due_schedule("proc.fails", 1, max_attempts=3, backoff=timedelta(milliseconds=200))
    refusing = due_schedule("proc.refuses", 1, max_attempts=3)
    replica = start("retrier")
    wait_until(
        lambda: state_of(failing)["dead"] == 1 and state_of(refusing)["dead"] == 1,
        timeout=60,
        what="both occurrences to be dead",
    )
    failed = list(Attempt.objects.filter(occurrence__schedule=failing).order_by("number"))
    assert [(a.trigger, a.outcome) for a in failed] == [
        ("schedule", "failed"),
        ("retry", "failed"),
        ("retry", "failed"),
    ]
    # Each retry waited its backoff (jittered into [0.5, 1] of 200 ms, then 400 ms).
    ends = [a.finished_at for a in failed]
    assert None not in ends
    assert failed[1].started_at - ends[0] >= timedelta(milliseconds=100)  # type: ignore[operator]
    assert failed[2].started_at - ends[1] >= timedelta(milliseconds=200)  # type: ignore[operator]
    dead = Occurrence.objects.get(schedule=failing)
    assert (dead.last_error_type, dead.last_error_message) == ("RuntimeError", "attempt 3 failed")
    assert Attempt.objects.filter(occurrence__schedule=refusing).count() == 1
    replica.signal(signal.SIGTERM)
    assert replica.wait_exit() == 0
