"""The worker runs claimed occurrences and writes each outcome through the fenced store."""

from __future__ import annotations

import contextlib
from datetime import timedelta

import pytest
import structlog
from django.core.management import call_command
from django.db import connection
from structlog.testing import capture_logs

from django_jobs import LeaseLost, PermanentFailure, store
from django_jobs.identity import occurrence_id
from django_jobs.models import Attempt, AttemptOutcome, Occurrence, OccurrenceState
from django_jobs.registry import Registry, registry
from django_jobs.worker.loop import Worker
from django_jobs.worker.run import Run
from example_project.billing.models import Statement

from .factories import T0, ScheduleFactory
from .storeutil import LEASE, claim, plan

pytestmark = pytest.mark.django_db


@pytest.fixture
def jobs() -> Registry:
    return Registry()


@pytest.fixture
def effects() -> None:
    # Created inside the test's transaction, so it disappears with the rollback.
    with connection.cursor() as cursor:
        cursor.execute("CREATE TABLE test_effects (occurrence text NOT NULL)")


def effect_count() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM test_effects")
        return int(cursor.fetchone()[0])


def test_due_occurrence_runs_with_its_identity_and_completes(jobs, worker, clock) -> None:
    seen: list[Run] = []
    jobs.register("tests.record", seen.append)
    schedule = ScheduleFactory.create(job="tests.record", tenant="acme")
    plan(schedule, T0, now=T0)
    clock.set(T0 + timedelta(seconds=1))

    summary = worker.run_pass()

    assert (summary.claimed, summary.outcomes["completed"]) == (1, 1)
    (run,) = seen
    assert run.occurrence_key == str(occurrence_id("acme", schedule.key, T0))
    assert (run.scheduled_at, run.attempt, run.fencing_token, run.tenant, run.trigger) == (
        T0,
        1,
        Attempt.objects.get().fencing_token,
        "acme",
        "schedule",
    )
    # The deadline counts from the start of the attempt, not from the scheduled instant.
    assert run.deadline == T0 + timedelta(seconds=1) + schedule.timeout
    assert Occurrence.objects.get().state == OccurrenceState.COMPLETED


def test_failure_is_retried_after_backoff_then_dead_after_max_attempts(jobs, worker, clock) -> None:
    def broken(run: Run) -> None:
        raise RuntimeError(f"attempt {run.attempt} failed")

    jobs.register("tests.broken", broken)
    schedule = ScheduleFactory.create(
        job="tests.broken", max_attempts=3, backoff=timedelta(seconds=10)
    )
    plan(schedule, T0, now=T0)
    clock.set(T0)
    outcomes = []
    for _ in range(3):
        outcomes += list(worker.run_pass().outcomes.elements())
        occurrence = Occurrence.objects.get()
        if occurrence.state == OccurrenceState.FAILED:
            wait = occurrence.due_at - clock.now()
            # Attempt n waits base * 2**(n-1), scaled by a jitter factor in [0.5, 1].
            base = timedelta(seconds=10) * 2 ** (occurrence.failures - 1)
            assert base / 2 <= wait <= base
            clock.set(occurrence.due_at)
    assert outcomes == ["retry", "retry", "dead"]
    occurrence = Occurrence.objects.get()
    assert (occurrence.state, occurrence.failures) == (OccurrenceState.DEAD, 3)
    assert occurrence.last_error_type == "RuntimeError"
    assert occurrence.last_error_message == "attempt 3 failed"
    assert list(Attempt.objects.values_list("trigger", flat=True)) == ["schedule", "retry", "retry"]


def test_permanent_failure_goes_straight_to_dead(jobs, worker, clock) -> None:
    def refuse(run: Run) -> None:
        raise PermanentFailure("statement template missing")

    jobs.register("tests.refuse", refuse)
    schedule = ScheduleFactory.create(job="tests.refuse", max_attempts=5)
    plan(schedule, T0, now=T0)
    clock.set(T0)
    assert list(worker.run_pass().outcomes.elements()) == ["dead"]
    occurrence = Occurrence.objects.get()
    assert (occurrence.state, occurrence.failures) == (OccurrenceState.DEAD, 1)
    assert occurrence.last_error_type == "django_jobs.exceptions.PermanentFailure"


def test_unknown_job_is_dead_lettered_and_the_worker_runs_the_next_occurrence(
    jobs, worker, clock
) -> None:
    ran: list[str] = []
    jobs.register("tests.fine", lambda run: ran.append(run.occurrence_key))
    bad = ScheduleFactory.create(job="tests.nobody-registered-this")
    good = ScheduleFactory.create(job="tests.fine")
    plan(bad, T0, now=T0)
    plan(good, T0 + timedelta(seconds=1), now=T0)
    clock.set(T0 + timedelta(seconds=1))

    summary = worker.run_pass()

    assert sorted(summary.outcomes.elements()) == ["completed", "dead"]
    assert len(ran) == 1
    dead = Occurrence.objects.get(schedule=bad)
    assert dead.state == OccurrenceState.DEAD
    assert "no handler is registered for job 'tests.nobody-registered-this'" in (
        dead.last_error_message
    )


def test_atomic_commits_the_handlers_write_with_the_completion(
    jobs, worker, clock, effects
) -> None:
    def write(run: Run) -> None:
        with run.atomic(), connection.cursor() as cursor:
            cursor.execute("INSERT INTO test_effects VALUES (%s)", [run.occurrence_key])

    jobs.register("tests.write", write)
    schedule = ScheduleFactory.create(job="tests.write")
    plan(schedule, T0, now=T0)
    clock.set(T0)
    assert list(worker.run_pass().outcomes.elements()) == ["completed"]
    assert effect_count() == 1
    assert Attempt.objects.get().outcome == AttemptOutcome.SUCCEEDED


def test_atomic_with_a_stale_token_rolls_back_the_write_and_raises_lease_lost(
    jobs, worker, clock, effects
) -> None:
    raised: list[BaseException] = []

    def taken_over_midway(run: Run) -> None:
        # While this handler runs, its lease expires and another replica takes over.
        clock.advance(LEASE + timedelta(seconds=1))
        claim("replica-2", clock.now())
        try:
            with run.atomic(), connection.cursor() as cursor:
                cursor.execute("INSERT INTO test_effects VALUES (%s)", [run.occurrence_key])
        except LeaseLost as exc:
            raised.append(exc)
            raise

    jobs.register("tests.zombie", taken_over_midway)
    schedule = ScheduleFactory.create(job="tests.zombie")
    plan(schedule, T0, now=T0)
    clock.set(T0)

    assert list(worker.run_pass().outcomes.elements()) == ["lease_lost"]
    assert len(raised) == 1
    assert effect_count() == 0
    occurrence = Occurrence.objects.get()
    assert (occurrence.state, occurrence.lease_owner) == (OccurrenceState.PROCESSING, "replica-2")


def test_a_stopping_worker_claims_nothing_more(jobs, worker, clock) -> None:
    def first_then_stop(run: Run) -> None:
        worker.request_stop()

    jobs.register("tests.stop", first_then_stop)
    schedule = ScheduleFactory.create(job="tests.stop")
    plan(schedule, T0, T0 + timedelta(seconds=1), T0 + timedelta(seconds=2), now=T0)
    clock.set(T0 + timedelta(seconds=5))

    summary = worker.run_pass()

    # Concurrency 1: it claimed only what it could run, and after the stop nothing more.
    assert (summary.claimed, summary.outcomes["completed"]) == (1, 1)
    states = sorted(Occurrence.objects.values_list("state", flat=True))
    assert states == ["completed", "scheduled", "scheduled"]
    assert len(claim("replica-2", clock.now())) == 2


def test_run_once_skips_a_step_that_already_happened(jobs, worker, clock) -> None:
    sent: list[int] = []

    def mail(run: Run) -> None:
        run.once("mail-sent", lambda: sent.append(run.attempt))
        if run.attempt == 1:
            raise RuntimeError("crashed after sending")

    jobs.register("tests.mail", mail)
    schedule = ScheduleFactory.create(job="tests.mail", backoff=timedelta(0))
    plan(schedule, T0, now=T0)
    clock.set(T0)
    # No backoff: the retry is due at once and runs in the same pass.
    assert sorted(worker.run_pass().outcomes.elements()) == ["completed", "retry"]
    assert sent == [1]  # the second attempt skipped the step the first one did


def test_run_once_refuses_to_record_for_a_stale_token(jobs, worker, clock) -> None:
    def zombie(run: Run) -> None:
        clock.advance(LEASE + timedelta(seconds=1))
        claim("replica-2", clock.now())
        run.once("call-partner", lambda: None)

    jobs.register("tests.zombie-step", zombie)
    schedule = ScheduleFactory.create(job="tests.zombie-step")
    plan(schedule, T0, now=T0)
    clock.set(T0)
    assert list(worker.run_pass().outcomes.elements()) == ["lease_lost"]
    assert not store.step_done(Occurrence.objects.get().pk, "call-partner")


def test_testing_run_due_runs_inline_with_the_real_store(clock) -> None:
    from django_jobs.testing import run_due

    jobs = Registry()
    ran: list[str] = []
    jobs.register("tests.inline", lambda run: ran.append(run.trigger))
    schedule = ScheduleFactory.create(job="tests.inline")
    plan(schedule, T0, now=T0)
    clock.set(T0)
    summary = run_due(clock, jobs=jobs)
    assert (summary.claimed, ran) == (1, ["schedule"])
    assert Occurrence.objects.get().state == OccurrenceState.COMPLETED


@pytest.mark.django_db(transaction=True)  # runs execute on their own threads and connections
def test_runworker_once_syncs_declared_schedules_runs_due_work_and_exits(capsys) -> None:
    ran: list[str] = []
    registry.register("tests.cli", lambda run: ran.append(run.occurrence_key))
    try:
        schedule = ScheduleFactory.create(job="tests.cli")
        plan(schedule, T0, now=T0)  # long due by the real clock
        call_command("runworker", "--once", "--replica-id", "cli-replica")
    finally:
        registry.unregister("tests.cli")
    out = capsys.readouterr().out
    assert "django_jobs worker cli-replica started" in out
    # The example project's billing app declares four schedules; its one-off runs at once.
    # (The real clock runs on: on a slow machine a heartbeat may come due during the passes.)
    synced = "schedules synced: 4 created, 0 updated, 0 retired, 0 unchanged; runbooks written for"
    assert f"{synced} 4" in out
    assert f"ran {Attempt.objects.count()} occurrence(s)" in out
    assert Occurrence.objects.get(schedule__key="billing.first-statement").state == "completed"
    assert ran == [str(Occurrence.objects.get(schedule=schedule).pk)]
    assert Statement.objects.count() == 1
    assert set(Attempt.objects.values_list("replica", flat=True)) == {"cli-replica"}


def test_store_hold_refuses_a_stale_lease(clock) -> None:
    schedule = ScheduleFactory.create()
    plan(schedule, T0, now=T0)
    (stale,) = claim("a", T0)
    claim("b", T0 + LEASE + timedelta(seconds=1))
    assert store.hold(stale) is False


def test_each_run_has_its_own_logging_scope_cleared_after(jobs, worker, clock) -> None:
    seen: dict = {}
    jobs.register("tests.scope", lambda run: seen.update(structlog.contextvars.get_contextvars()))
    schedule = ScheduleFactory.create(job="tests.scope", tenant="acme")
    plan(schedule, T0, now=T0)
    clock.set(T0)
    with capture_logs() as logs:
        worker.run_pass()
    occurrence = Occurrence.objects.get()
    assert seen == {
        "schedule": str(schedule),
        "occurrence": str(occurrence.pk),
        "attempt": 1,
        "tenant": "acme",
        "token": occurrence.fencing_token,
    }
    assert structlog.contextvars.get_contextvars() == {}
    (completed,) = [e for e in logs if e["event"] == "occurrence.completed"]
    assert completed["log_level"] == "info"


@pytest.mark.django_db(transaction=True)
def test_a_handler_that_leaves_a_transaction_open_does_not_poison_the_next_run(clock) -> None:
    from django.db import transaction

    jobs = Registry()
    opened: list[bool] = []

    def leaky(run: Run) -> None:
        transaction.atomic().__enter__()  # never exited: the connection is left in a transaction
        opened.append(connection.in_atomic_block)

    jobs.register("tests.leaky", leaky)
    jobs.register("tests.next", lambda run: opened.append(connection.in_atomic_block))
    leaky_schedule = ScheduleFactory.create(job="tests.leaky")
    next_schedule = ScheduleFactory.create(job="tests.next")
    plan(leaky_schedule, T0, now=T0)
    plan(next_schedule, T0 + timedelta(seconds=1), now=T0)
    clock.set(T0 + timedelta(seconds=1))
    worker = Worker(replica_id="scoped", clock=clock, jobs=jobs, listen=False)
    try:
        summary = worker.run_pass()
    finally:
        worker.close()
    # The leaked transaction was rolled back with its connection; the next run started clean.
    assert opened == [True, False]
    assert sorted(summary.outcomes.elements()) == ["completed", "retry"]
    leaky_occurrence = Occurrence.objects.get(schedule=leaky_schedule)
    assert leaky_occurrence.state == OccurrenceState.FAILED
    assert "returned with a database transaction still open" in leaky_occurrence.last_error_message


@pytest.mark.django_db(transaction=True)
def test_a_run_thread_keeps_its_connection_between_runs_unless_a_run_broke_it(clock) -> None:
    """One connection per run thread, not one per run (CONN_MAX_AGE=0 does not apply to the
    worker's threads); a run that leaves its connection unusable gets it replaced."""
    jobs = Registry()
    backends: list[int] = []

    def note_backend(run: Run) -> None:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            backends.append(cursor.fetchone()[0])

    def kill_own_backend(run: Run) -> None:
        note_backend(run)
        with connection.cursor() as cursor, contextlib.suppress(Exception):
            # The handler swallows the error; its connection is dead all the same.
            cursor.execute("SELECT pg_terminate_backend(pg_backend_pid())")

    jobs.register("tests.note", note_backend)
    jobs.register("tests.kill", kill_own_backend)
    schedules = [ScheduleFactory.create(job=job) for job in ("tests.note",) * 2 + ("tests.kill",)]
    last = ScheduleFactory.create(job="tests.note")
    for n, schedule in enumerate([*schedules, last]):
        plan(schedule, T0 + timedelta(seconds=n), now=T0)
    worker = Worker(replica_id="pooled", clock=clock, jobs=jobs, listen=False, concurrency=1)
    try:
        for n in range(4):  # one due occurrence per pass, on the pool's one thread
            clock.set(T0 + timedelta(seconds=n))
            worker.run_pass()
    finally:
        worker.close()
    assert len(backends) == 4
    assert backends[0] == backends[1] == backends[2], "consecutive runs share one connection"
    assert backends[3] != backends[2], "the connection the third run killed was replaced"
