"""The store on connections that bind parameters on the server and prepare their statements:
Django's ``OPTIONS = {"server_side_binding": True, "prepare_threshold": N}`` with psycopg 3
(docs/performance.md, "Prepared statements"). Not the suite's default: these tests turn it on.

Every connection opened during a test here prepares each statement at its first run
(``prepare_threshold`` 0), and PostgreSQL plans each prepared statement generically
(``plan_cache_mode=force_generic_plan``): the mode a deployment reaches after a statement's
first runs, taken at once, so a statement that only works with client-side binding (a
parameter whose type the server cannot infer, several statements in one call) or whose
generic plan cannot use the partial indexes on ``state`` fails here.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from datetime import timedelta

import pytest
from django.db import connection, connections, transaction

from django_jobs import Run, services, store
from django_jobs.conf import get_settings
from django_jobs.models import Attempt, AttemptOutcome, Occurrence, OccurrenceState, Schedule
from django_jobs.registry import Registry
from django_jobs.safe_error import SafeError
from django_jobs.worker.loop import Worker

from .factories import T0, ScheduleFactory
from .storeutil import LEASE, claim, plan

pytestmark = pytest.mark.django_db(transaction=True)

PREPARED = {
    "server_side_binding": True,
    "prepare_threshold": 0,
    "options": "-c plan_cache_mode=force_generic_plan",
}


@pytest.fixture
def prepared() -> Iterator[None]:
    """Connections opened from now on (this thread's, and every worker thread's) use
    ``PREPARED``; the test's connection is reopened with it. Restored afterwards."""
    options = connection.settings_dict["OPTIONS"]  # shared by every thread's connection
    saved = dict(options)
    connection.close()
    options.update(PREPARED)
    try:
        yield
    finally:
        connections.close_all()
        options.clear()
        options.update(saved)


def prepared_statements() -> list[str]:
    """The text of the statements this connection has prepared on the server."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        return [statement for (statement,) in cursor.fetchall()]


def test_the_connection_binds_on_the_server_and_prepares_generic_plans(prepared) -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_setting('plan_cache_mode'), %s::int", [41])
        assert cursor.fetchone() == ("force_generic_plan", 41)
    assert any("current_setting('plan_cache_mode')" in s for s in prepared_statements())


def _worker(jobs: Registry, clock, *, concurrency: int) -> Worker:
    """A replica with run threads and its completer, on the test's clock."""
    worker = Worker(
        replica_id="prepared",
        clock=clock,
        jobs=jobs,
        listen=False,
        concurrency=concurrency,
        settings=replace(get_settings(), CLAIM_AHEAD=0),
    )
    worker._ensure_keeper()  # the lease keeper and the completer, as serve() starts them
    return worker


def test_a_worker_plans_claims_runs_and_completes_with_prepared_statements(prepared, clock) -> None:
    """The plan pass, the claim, the completer's fenced write and ``run.atomic()`` (hold and
    complete on the run thread), for overlap ``allow`` and ``skip`` schedules."""
    jobs = Registry()
    ran: list[str] = []
    jobs.register("tests.prepared", lambda run: ran.append(run.occurrence_key))

    def atomically(run: Run) -> None:
        with run.atomic():
            ran.append(run.occurrence_key)

    jobs.register("tests.prepared-atomic", atomically)
    allow = [ScheduleFactory.create(job="tests.prepared", next_due_at=T0) for _ in range(3)]
    skip = ScheduleFactory.create(job="tests.prepared-atomic", overlap="skip", next_due_at=T0)
    clock.set(T0 + timedelta(seconds=1))
    worker = _worker(jobs, clock, concurrency=2)
    try:
        summary = worker.run_pass()
    finally:
        worker.close()

    assert summary.claimed == 4
    assert len(ran) == 4
    done = Occurrence.objects.filter(state=OccurrenceState.COMPLETED)
    assert sorted(done.values_list("schedule_id", flat=True)) == sorted(
        [s.pk for s in allow] + [skip.pk]
    )
    assert set(Attempt.objects.values_list("outcome", flat=True)) == {AttemptOutcome.SUCCEEDED}
    skip.refresh_from_db()
    # The overlap guard was set by the claim, and left pointing at the run it guarded.
    assert skip.running_occurrence == done.get(schedule=skip).pk
    # The derived recovery points read the same rows.
    (points,) = services.with_recovery_points(Schedule.objects.filter(pk=skip.pk)).values_list(
        "last_started_at", "last_completed_at"
    )
    assert points == (T0 + timedelta(seconds=1), T0 + timedelta(seconds=1))


def test_claim_renewal_retry_release_and_completion_with_prepared_statements(prepared) -> None:
    schedule = ScheduleFactory.create()
    plan(schedule, T0, T0 + timedelta(seconds=1), now=T0)
    with transaction.atomic():
        claim_index = _index_scans("django_jobs_occurrence_claim")
        first, second = claim("w", T0 + timedelta(seconds=2))
        # The generic plan of the claim walks the partial claim-order index on the claimable
        # states: the states are literals in its text, not parameters.
        assert _index_scans("django_jobs_occurrence_claim") > claim_index
    assert any("FOR UPDATE OF o SKIP LOCKED" in s for s in prepared_statements())

    (renewed,) = store.renew([first], owner="w", now=T0 + LEASE / 2, lease_for=LEASE)
    assert renewed.expires_at == T0 + LEASE / 2 + LEASE
    retry_at = T0 + timedelta(minutes=1)
    error = SafeError(type="RuntimeError", message="boom")
    assert store.fail(renewed, now=T0 + timedelta(seconds=20), error=error, retry_at=retry_at)
    assert store.release([second], now=T0 + timedelta(seconds=21)).accepted == {
        second.occurrence_id
    }

    # Both due again: the released one at once, the failed one at its retry instant.
    (again,) = claim("w", T0 + timedelta(seconds=30))
    assert again.occurrence_id == second.occurrence_id
    assert store.complete([again], now=T0 + timedelta(seconds=31)).accepted
    (retry,) = claim("w", retry_at)
    assert (retry.occurrence_id, retry.attempt) == (first.occurrence_id, 2)
    assert retry.token > renewed.token
    stale = store.complete([renewed], now=retry_at)  # the first attempt's token: refused
    assert stale.refused == {first.occurrence_id}
    assert store.complete([retry], now=retry_at).accepted == {first.occurrence_id}
    assert set(Occurrence.objects.values_list("state", flat=True)) == {OccurrenceState.COMPLETED}


def _index_scans(index: str) -> int:
    """Scans of ``index`` in this transaction so far."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_get_xact_numscans(%s::regclass)", [index])
        (count,) = cursor.fetchone()
        return int(count)


def test_a_run_threads_connection_outlives_its_session_reset(prepared, clock) -> None:
    """After a run that used the database, the run thread's session is reset
    (``worker/session.py``, ``DEALLOCATE ALL`` among the rest) on the same connection: the
    reset must not be refused for being several statements in a prepared one, which would
    close the connection after every run."""
    jobs = Registry()
    backends: list[int] = []

    def atomically(run: Run) -> None:
        with run.atomic():
            backends.append(connection.connection.info.backend_pid)

    jobs.register("tests.prepared-atomic", atomically)
    schedule = ScheduleFactory.create(job="tests.prepared-atomic")
    plan(schedule, *[T0 + timedelta(seconds=n) for n in range(3)], now=T0)
    clock.set(T0 + timedelta(seconds=3))
    worker = _worker(jobs, clock, concurrency=1)
    try:
        assert worker.run_pass().claimed == 3  # one after the other, on the one run thread
    finally:
        worker.close()
    assert len(backends) == 3
    assert len(set(backends)) == 1, backends
    assert Occurrence.objects.filter(state=OccurrenceState.COMPLETED).count() == 3
