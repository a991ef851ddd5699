"""Attempts that end without an outcome: lost (counted, bounded by max_attempts), claimed ahead
and never started (free), or ended by a store outage (free, and excused after a takeover).
Real PostgreSQL; the outage errors are real ones the server or the driver raises."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any
from uuid import UUID

import psycopg
import pytest
from django.db import IntegrityError, OperationalError, connection, transaction
from django.test import override_settings
from structlog.testing import capture_logs

from django_jobs import store
from django_jobs.models import AttemptOutcome, Occurrence, OccurrenceState
from django_jobs.registry import Registry
from django_jobs.safe_error import SafeError
from django_jobs.worker.executor import MAX_OUTAGE_GIVE_BACKS
from django_jobs.worker.loop import PassSummary, Worker
from django_jobs.worker.outage import OutageLog, is_store_outage
from django_jobs.worker.run import Run

from .concurrency import cut_off_from_the_store, on_own_connection, wait_until
from .factories import T0, ScheduleFactory
from .storeutil import LEASE, claim, plan

pytestmark = pytest.mark.django_db(transaction=True)

LATER = LEASE + timedelta(seconds=1)


def run_one_pass(clock, job: str, handler) -> tuple[UUID, PassSummary]:
    """One occurrence of a new ``max_attempts=1`` schedule of ``handler``, run by a threaded
    worker's ``run_pass`` (an occurrence given back due at once is claimed again in it)."""
    jobs = Registry()
    jobs.register(job, handler)
    schedule = ScheduleFactory.create(job=job, max_attempts=1)
    (occurrence_id,) = plan(schedule, T0, now=T0)
    clock.set(T0)
    # No claiming ahead: after runs averaging under 0.1 s a claim asks for 1 + CLAIM_AHEAD,
    # gets the one occurrence, and run_pass ends there (claimed < asked), before the next
    # give-back is claimed again. Runs that meet an outage are that short on a quiet moment of
    # a loaded suite (two full runs failed with {'outage': 2}).
    with override_settings(DJANGO_JOBS={"CLAIM_AHEAD": 0}):
        worker = Worker(replica_id="w", clock=clock, jobs=jobs, listen=False)
        try:
            return occurrence_id, worker.run_pass()
        finally:
            worker.close()


def outcomes(occurrence_id) -> list[str]:
    """Its attempts' outcomes, the current one's (read from the occurrence row) last."""
    return [a.outcome for a in Occurrence.objects.get(pk=occurrence_id).attempts_so_far()]


def test_lost_attempts_count_and_the_one_that_uses_up_max_attempts_dead_letters(clock) -> None:
    schedule = ScheduleFactory.create(max_attempts=2)
    (occurrence_id,) = plan(schedule, T0, now=T0)
    claim("crashed-1", T0)
    (second,) = claim("crashed-2", T0 + LATER)
    assert second.failures == 1

    taken = store.claim_runs(owner="next", now=T0 + 2 * LATER, lease_for=LEASE, limit=5)

    assert taken.runs == []
    assert taken.dead == [occurrence_id]
    occurrence = Occurrence.objects.get(pk=occurrence_id)
    assert occurrence.state == OccurrenceState.DEAD
    assert (occurrence.failures, occurrence.attempts) == (2, 2)
    assert occurrence.last_error_type == store.WORKER_LOST
    assert "attempt 2 ended without an outcome" in occurrence.last_error_message
    assert "max_attempts (2)" in occurrence.last_error_message
    assert occurrence.lease_owner == ""
    assert outcomes(occurrence_id) == [AttemptOutcome.LEASE_LOST] * 2


def test_an_attempt_claimed_ahead_and_never_started_costs_nothing(clock) -> None:
    schedule = ScheduleFactory.create(max_attempts=1)
    (occurrence_id,) = plan(schedule, T0, now=T0)
    claim(owner="ahead", now=T0, lease_for=LEASE, limit=5, start_now=0)
    assert outcomes(occurrence_id) == [AttemptOutcome.CLAIMED]

    (lease,) = claim("next", T0 + LATER)  # its replica died before a thread took it

    assert lease.failures == 0
    assert outcomes(occurrence_id) == [AttemptOutcome.UNSTARTED, AttemptOutcome.RUNNING]


def test_a_claimed_ahead_run_counts_once_a_thread_started_it(clock) -> None:
    schedule = ScheduleFactory.create(max_attempts=1)
    (occurrence_id,) = plan(schedule, T0, now=T0)
    (lease,) = claim(owner="ahead", now=T0, lease_for=LEASE, limit=5, start_now=0)
    store.mark_started([lease], now=T0)

    taken = store.claim_runs(owner="next", now=T0 + LATER, lease_for=LEASE, limit=5)

    assert taken.dead == [occurrence_id]
    assert outcomes(occurrence_id) == [AttemptOutcome.LEASE_LOST]


def test_an_attempt_lost_to_an_outage_is_excused_and_its_dead_letter_revived(clock) -> None:
    schedule = ScheduleFactory.create(max_attempts=1)
    (occurrence_id,) = plan(schedule, T0, now=T0)
    (cut_off,) = claim("cut-off", T0)
    # The store came back; another replica's claim got there first and counted the attempt.
    assert store.claim_runs(owner="next", now=T0 + LATER, lease_for=LEASE, limit=5).dead

    assert store.excuse_outage(cut_off, now=T0 + LATER) is True

    occurrence = Occurrence.objects.get(pk=occurrence_id)
    assert (occurrence.state, occurrence.failures) == (OccurrenceState.SCHEDULED, 0)
    assert (occurrence.last_error_type, occurrence.finished_at) == ("", None)
    assert outcomes(occurrence_id) == [AttemptOutcome.OUTAGE]
    assert store.excuse_outage(cut_off, now=T0 + LATER) is False  # once only
    (again,) = claim("next", T0 + LATER)
    assert again.attempt == 2
    assert again.failures == 0


def test_an_excuse_never_revives_a_dead_letter_that_the_jobs_own_failure_made(clock) -> None:
    """The lost attempt is excused, but the occurrence died of the next holder's own failure
    (its error, under its token): it stays dead."""
    schedule = ScheduleFactory.create(max_attempts=2)
    (occurrence_id,) = plan(schedule, T0, now=T0)
    (cut_off,) = claim("cut-off", T0)
    (holder,) = claim("holder", T0 + LATER)  # the lost attempt counted: failures 1
    error = SafeError(type="billing.PartnerDown", message="the partner refused")
    assert store.dead_letter(holder, now=T0 + LATER, error=error)

    assert store.excuse_outage(cut_off, now=T0 + LATER) is True

    occurrence = Occurrence.objects.get(pk=occurrence_id)
    assert (occurrence.state, occurrence.last_error_type) == (
        OccurrenceState.DEAD,
        "billing.PartnerDown",
    )
    assert outcomes(occurrence_id) == [AttemptOutcome.OUTAGE, AttemptOutcome.FAILED]


def test_an_excused_attempt_gives_back_its_failure_and_leaves_the_new_holder_alone(
    clock,
) -> None:
    schedule = ScheduleFactory.create(max_attempts=3)
    (occurrence_id,) = plan(schedule, T0, now=T0)
    (cut_off,) = claim("cut-off", T0)
    (holder,) = claim("holder", T0 + LATER)

    assert store.excuse_outage(cut_off, now=T0 + LATER) is True

    occurrence = Occurrence.objects.get(pk=occurrence_id)
    assert (occurrence.state, occurrence.failures) == (OccurrenceState.PROCESSING, 0)
    assert (occurrence.lease_owner, occurrence.fencing_token) == ("holder", holder.token)
    assert outcomes(occurrence_id) == [AttemptOutcome.OUTAGE, AttemptOutcome.RUNNING]
    # Only the owner of the attempt can excuse it.
    assert store.excuse_outage(holder, now=T0 + LATER) is False


def test_a_handler_cut_off_from_the_store_gives_its_occurrence_back_without_a_failure(
    clock,
) -> None:
    """Attempt 1's connection is terminated under it and the store takes no connection (as a
    PostgreSQL restart would do); with max_attempts=1 the occurrence still runs again and
    completes."""

    def reads_through_an_outage(run: Run) -> None:
        if run.attempt == 1:
            cut_off_from_the_store()

    # given back due at once: claimed again in the same pass
    occurrence_id, summary = run_one_pass(clock, "tests.outage", reads_through_an_outage)

    assert dict(summary.outcomes) == {"outage": 1, "completed": 1}
    occurrence = Occurrence.objects.get(pk=occurrence_id)
    assert (occurrence.state, occurrence.failures) == (OccurrenceState.COMPLETED, 0)
    assert outcomes(occurrence_id) == [AttemptOutcome.OUTAGE, AttemptOutcome.SUCCEEDED]


def test_a_handler_that_ends_its_own_session_while_the_store_answers_fails(clock) -> None:
    """A query of death: the handler's own statement ends its session, as the store's restart
    would, but the store answers on a connection of its own: the job's failure, counted, and
    with max_attempts=1 the occurrence is dead after one run, never given back."""
    ran: list[int] = []

    def query_of_death(run: Run) -> None:
        ran.append(run.attempt)
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(pg_backend_pid())")

    occurrence_id, summary = run_one_pass(clock, "tests.query-of-death", query_of_death)

    assert dict(summary.outcomes) == {"dead": 1}
    assert ran == [1]
    occurrence = Occurrence.objects.get(pk=occurrence_id)
    assert (occurrence.state, occurrence.failures) == (OccurrenceState.DEAD, 1)
    assert occurrence.last_error_type == "django.db.utils.OperationalError"
    assert outcomes(occurrence_id) == [AttemptOutcome.FAILED]


def test_outage_give_backs_of_one_occurrence_in_a_row_are_bounded(clock) -> None:
    """Every run meets a store outage: the first MAX_OUTAGE_GIVE_BACKS are given back without
    a failure, the next is counted as one (max_attempts=1: dead)."""

    def always_cut_off(run: Run) -> None:
        cut_off_from_the_store()

    occurrence_id, summary = run_one_pass(clock, "tests.always-out", always_cut_off)

    assert dict(summary.outcomes) == {"outage": MAX_OUTAGE_GIVE_BACKS, "dead": 1}
    occurrence = Occurrence.objects.get(pk=occurrence_id)
    assert (occurrence.state, occurrence.failures) == (OccurrenceState.DEAD, 1)
    assert occurrence.last_error_type == "django_jobs.worker.executor.StoreOutages"
    assert f"{MAX_OUTAGE_GIVE_BACKS + 1} attempts in a row" in occurrence.last_error_message
    assert outcomes(occurrence_id) == [AttemptOutcome.OUTAGE] * MAX_OUTAGE_GIVE_BACKS + [
        AttemptOutcome.FAILED
    ]


# --- which errors are an outage ---------------------------------------------------------


def caught(action) -> BaseException:
    try:
        action()
    except Exception as exc:  # the error under test
        return exc
    raise AssertionError("no error raised")


def test_a_refused_connection_is_an_outage() -> None:
    exc = caught(lambda: psycopg.connect("postgresql://127.0.0.1:1/x", connect_timeout=2))
    assert is_store_outage(exc)
    assert is_store_outage(RuntimeError("wrapped")) is False
    wrapped = caught(lambda: _raise_from(RuntimeError("report failed"), exc))
    assert is_store_outage(wrapped), "an error raised from an outage is an outage"


def _raise_from(error: Exception, cause: BaseException) -> None:
    raise error from cause


def test_a_terminated_session_is_an_outage() -> None:
    def terminated() -> None:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(pg_backend_pid())")

    exc = caught(on_own_connection(terminated))
    assert isinstance(exc, OperationalError)
    assert is_store_outage(exc)


def test_a_read_only_server_is_an_outage() -> None:
    def write_when_read_only() -> None:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("SET TRANSACTION READ ONLY")
            cursor.execute("CREATE TEMP TABLE t (x int)")

    assert is_store_outage(caught(on_own_connection(write_when_read_only)))


def test_errors_of_the_job_itself_are_not_an_outage() -> None:
    def cancelled_statement() -> None:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("SET LOCAL statement_timeout = 1")
            cursor.execute("SELECT pg_sleep(1)")

    def duplicate_key() -> None:
        schedule = ScheduleFactory.create()
        with transaction.atomic():
            ScheduleFactory.create(key=schedule.key, tenant=schedule.tenant)

    timeout = caught(on_own_connection(cancelled_statement))
    assert isinstance(timeout, OperationalError)
    assert not is_store_outage(timeout)
    duplicate = caught(on_own_connection(duplicate_key))
    assert isinstance(duplicate, IntegrityError)
    assert not is_store_outage(duplicate)
    assert not is_store_outage(ValueError("bad input"))


def test_pass_errors_are_logged_at_a_bounded_rate(clock) -> None:
    errors = OutageLog(
        clock,
        events=("worker.pass_failed", "worker.pass_still_failing", "worker.pass_recovered"),
    )
    with capture_logs() as logs:
        for _ in range(100):
            errors.failed(IntegrityError("bad row"))
            clock.advance(timedelta(seconds=1))
        errors.recovered()
    # 100 errors in 100 seconds: the first, one summary per 30 seconds, the recovery.
    assert [e["event"] for e in logs] == [
        "worker.pass_failed",
        *["worker.pass_still_failing"] * 3,
        "worker.pass_recovered",
    ]
    assert [e["suppressed"] for e in logs[1:4]] == [29, 29, 29]


def test_one_outage_found_by_each_connection_in_turn_is_logged_once(clock) -> None:
    """The loop recovers first; the keeper's and a run thread's connections find out they were
    cut on their next use, seconds later: the same outage, not three."""
    outage = OutageLog(clock)
    severed = OperationalError("server closed the connection unexpectedly")
    with capture_logs() as logs:
        outage.failed(severed, during="pass")
        clock.advance(timedelta(seconds=1))
        outage.recovered()
        for during in ("outcome", "renewal"):
            clock.advance(timedelta(seconds=2))
            outage.failed(severed, during=during)
            outage.recovered()
        clock.advance(timedelta(seconds=30))  # a new outage, well after the quiet period
        outage.failed(severed, during="pass")
        outage.recovered()
    assert [e["event"] for e in logs] == [
        "store.unavailable",
        "store.recovered",
        "store.unavailable",
        "store.recovered",
    ]


def test_another_servers_outage_is_the_jobs_own_failure_while_the_store_answers(clock) -> None:
    """A handler whose own dependency (another PostgreSQL) refuses it fails like any handler:
    only the store being out of reach is excused."""

    def partner_down(run: Run) -> None:
        with connection.cursor() as cursor:  # the store answers on this thread
            cursor.execute("SELECT 1")
        psycopg.connect("postgresql://127.0.0.1:1/partner", connect_timeout=2)

    occurrence_id, summary = run_one_pass(clock, "tests.partner", partner_down)

    assert dict(summary.outcomes) == {"dead": 1}
    occurrence = Occurrence.objects.get(pk=occurrence_id)
    assert (occurrence.state, occurrence.failures) == (OccurrenceState.DEAD, 1)
    assert occurrence.last_error_type == "psycopg.OperationalError"
    assert outcomes(occurrence_id) == [AttemptOutcome.FAILED]


def test_an_outage_inside_run_atomic_is_not_a_failure(clock) -> None:
    """The connection dies inside ``run.atomic()``: Django's failed rollback closes it, and
    the worker still sees that the store, not the job, was at fault."""

    def cut_off_in_atomic(run: Run) -> None:
        if run.attempt == 1:
            with run.atomic():
                cut_off_from_the_store()

    occurrence_id, summary = run_one_pass(clock, "tests.outage-atomic", cut_off_in_atomic)

    assert dict(summary.outcomes) == {"outage": 1, "completed": 1}
    assert outcomes(occurrence_id) == [AttemptOutcome.OUTAGE, AttemptOutcome.SUCCEEDED]


def test_a_run_claimed_ahead_and_taken_over_before_a_thread_started_it_never_runs(clock) -> None:
    """The crash-loop bound of the 30-minute campaign (seed 20261201, 4 starts of a crasher
    with ``max_attempts`` 3): a replica claimed a run ahead, another took it over before a
    thread got to it, and the first replica, not yet told by its lease keeper, started it
    anyway under its stale token. Its start is now refused, and the handler never runs."""
    ran: list[int] = []
    jobs = Registry()
    jobs.register("tests.counted", lambda run: ran.append(run.fencing_token))
    schedule = ScheduleFactory.create(job="tests.counted", max_attempts=3)
    (occurrence_id,) = plan(schedule, T0, now=T0)
    clock.set(T0)
    worker = Worker(replica_id="ahead", clock=clock, jobs=jobs, listen=False)
    try:
        ((stale, row),) = store.claim_runs(
            owner="ahead", now=T0, lease_for=LEASE, limit=1, start_now=0
        ).runs
        (current,) = claim("next", T0 + LATER)  # the lease lapsed: taken over, not started
        clock.set(T0 + LATER)
        before = worker._tally.snapshot()
        worker._threads.start(stale, row, T0 + LATER, ahead=True)
        wait_until(lambda: not worker.inflight.all(), what="the stale run to end")
        assert (worker._tally.snapshot() - before) == {"lease_lost": 1}
    finally:
        worker.close()
    assert ran == []
    assert outcomes(occurrence_id) == [AttemptOutcome.UNSTARTED, AttemptOutcome.RUNNING]
    assert Occurrence.objects.get(pk=occurrence_id).lease_owner == "next"
    assert current.token > stale.token


@pytest.mark.parametrize("error", [SystemExit(1), KeyboardInterrupt()])
def test_an_inline_pass_records_a_handlers_system_exit_as_its_failure(
    clock, error: BaseException
) -> None:
    """``run_due`` runs handlers in the calling thread: on 8f518d8 a handler's ``SystemExit``
    escaped the pass (and would have ended the test run)."""
    from django_jobs.testing import run_due

    jobs = Registry()

    def exits(run: Run) -> None:
        raise error

    jobs.register("tests.exits", exits)
    schedule = ScheduleFactory.create(job="tests.exits", max_attempts=1)
    (occurrence_id,) = plan(schedule, T0, now=T0)
    clock.set(T0)

    summary = run_due(clock, jobs=jobs)

    assert dict(summary.outcomes) == {"dead": 1}
    occurrence = Occurrence.objects.get(pk=occurrence_id)
    assert occurrence.last_error_type == type(error).__name__
    assert outcomes(occurrence_id) == [AttemptOutcome.FAILED]


def test_a_stop_inside_an_outage_adds_no_line_to_the_spell(clock) -> None:
    """Shutdown's writes (heartbeats, the release, its NOTIFY) go through the replica's outage
    log: a replica stopped while the store is out logs the spell once, not a line a write
    (the 30-minute campaign of seed 20261202 counted 6-7 lines against a bound of 5)."""
    from django_jobs.worker.shutdown import try_store

    outage = OutageLog(clock)

    def write() -> None:
        raise OperationalError("connection refused")

    with capture_logs() as logs:
        outage.failed(OperationalError("connection refused"), during="pass")
        for _ in range(4):
            try_store(write, patterns=(), outage=outage)
    assert [e["event"] for e in logs] == ["store.unavailable"]


def test_a_give_back_skips_a_row_held_by_another_transaction_without_refusing_it(clock) -> None:
    """The failover test's flake (CI dry run of issue #34): a run's outage give-back met its row
    held for a moment by another statement (the lease keeper's renewal), and the skipped row
    was reported as refused, so the worker took its own lease for lost and the lapse dead-
    lettered a ``max_attempts=1`` run. A held row is neither accepted nor refused; a stale
    token is refused; once the row is free the give-back is accepted."""
    schedule = ScheduleFactory.create(job="tests.held", max_attempts=1)
    (occurrence_id,) = plan(schedule, T0, now=T0)
    (lease,) = claim("w", T0)
    params = {**connection.get_connection_params()}
    for key in ("cursor_factory", "context", "prepare_threshold", "server_side_binding"):
        params.pop(key, None)
    with psycopg.connect(**params) as holder:
        holder.execute(
            "SELECT 1 FROM django_jobs_occurrence WHERE id = %s FOR UPDATE", [occurrence_id]
        )
        held = store.release([lease], now=T0, outcome=AttemptOutcome.OUTAGE)
        holder.rollback()
    assert (held.accepted, held.refused) == (frozenset(), frozenset())

    stale = store.Lease(**{**lease.__dict__, "token": lease.token - 1})
    assert store.release([stale], now=T0, outcome=AttemptOutcome.OUTAGE).refused == {occurrence_id}
    freed = store.release([lease], now=T0, outcome=AttemptOutcome.OUTAGE)
    assert freed.accepted == {occurrence_id}
    assert outcomes(occurrence_id) == [AttemptOutcome.OUTAGE]


def test_a_give_back_waits_out_a_row_held_longer_than_a_moment(clock, monkeypatch) -> None:
    """The failover test's flake again (issue #38's CI run), its likely cause: after a failover
    to a synchronous standby, a statement holding the row (the keeper's renewal) waits in its
    commit until a new standby streams, for seconds, where an outage's give-back gave up after
    five tries 50 ms apart, took its lease for lost, and the lapse dead-lettered a
    ``max_attempts=1`` run. Here the row is held on a second connection until the give-back has
    been skipped five times: it tries again, and the run is given back and completed, no
    failure counted."""
    skipped = threading.Event()
    skips: list[int] = []
    release = store.release

    def counting_release(*args: Any, **kwargs: Any) -> store.WriteResult:
        result = release(*args, **kwargs)
        if not (result.accepted or result.refused):
            skips.append(1)
            if len(skips) == 5:
                skipped.set()
        return result

    monkeypatch.setattr(store, "release", counting_release)
    params = {**connection.get_connection_params()}
    for key in ("cursor_factory", "context", "prepare_threshold", "server_side_binding"):
        params.pop(key, None)
    held = threading.Event()

    def hold(occurrence_id: str) -> None:
        with psycopg.connect(**params) as holder:
            holder.execute(
                "SELECT 1 FROM django_jobs_occurrence WHERE id = %s FOR UPDATE", [occurrence_id]
            )
            held.set()
            skipped.wait(timeout=30)
            holder.rollback()

    def held_through_its_give_back(run: Run) -> None:
        if run.attempt == 1:
            threading.Thread(target=hold, args=[run.occurrence_key], daemon=True).start()
            assert held.wait(timeout=30), "the second connection never took the row"
            cut_off_from_the_store()

    occurrence_id, summary = run_one_pass(clock, "tests.held-give-back", held_through_its_give_back)

    assert len(skips) >= 5, "the row was never held through the give-back"
    assert dict(summary.outcomes) == {"outage": 1, "completed": 1}
    occurrence = Occurrence.objects.get(pk=occurrence_id)
    assert (occurrence.state, occurrence.failures) == (OccurrenceState.COMPLETED, 0)
    assert outcomes(occurrence_id) == [AttemptOutcome.OUTAGE, AttemptOutcome.SUCCEEDED]
