"""Faults nobody named, under real ``runworker`` processes on real PostgreSQL: a renewal that
fails with an error that is not an outage, a timeout that passes while the store is gone, a
lease that cannot be confirmed, a job that ends its own session, a job that calls
``sys.exit``. Each broke a promise on 8f518d8 (issue #32); each test fails there.

Handlers note their own beats (``beats``: replica and ``time.monotonic``, which is system-wide
on Linux), so "two replicas executing one occurrence" and "a run outlived its timeout" are
measured from the handlers, not from the database. Every wait is on a condition with a bound.
"""

from __future__ import annotations

import signal
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from django.db import connection
from psycopg import sql

from django_jobs.models import Attempt, AttemptOutcome, Occurrence, OccurrenceState

from .concurrency import wait_until
from .processes import Cluster, Replica
from .test_misbehaving_jobs import beats, due_occurrence, state_of

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.processes]

LEASE = 3  # seconds: the replicas' JOBS_LEASE_SECONDS where leases matter
GRACE = 1  # seconds: their JOBS_TIMEOUT_GRACE_SECONDS
RENEWAL_LEASE = 6  # seconds: the lease of the renewal-that-fails-once test (see there)


def instant(event: dict) -> datetime:
    """The wall-clock instant of a replica's log line."""
    return datetime.fromisoformat(event["timestamp"].replace("Z", "+00:00")).astimezone(UTC)


def first(replica: Replica, event: str) -> dict:
    return next(e for e in replica.events() if e.get("event") == event)


# --- a renewal that fails once, with an error that is not an outage ------------------------


@pytest.fixture
def renewal_fails_once() -> Iterator[str]:
    """The next lease renewal (an UPDATE that moves only a processing row's lease expiry)
    raises once, as a permission change, a statement timeout or a bug would: a trigger, and a
    sequence to count (a sequence is not rolled back with the failed statement)."""
    name = f"renewal_fault_{uuid.uuid4().hex[:8]}"
    ident = sql.Identifier(name)
    statements = [
        sql.SQL("CREATE SEQUENCE {}").format(ident),
        sql.SQL(
            """CREATE FUNCTION {fn}() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                IF NEW.state = 'processing' AND OLD.state = 'processing'
                   AND NEW.fencing_token = OLD.fencing_token
                   AND NEW.lease_expires_at IS DISTINCT FROM OLD.lease_expires_at
                   AND nextval({seq}) = 1 THEN
                    RAISE EXCEPTION 'renewal refused once by the test' USING ERRCODE = 'P0001';
                END IF;
                RETURN NEW;
            END $$"""
        ).format(fn=ident, seq=sql.Literal(name)),
        sql.SQL(
            "CREATE TRIGGER {t} BEFORE UPDATE ON django_jobs_occurrence "
            "FOR EACH ROW EXECUTE FUNCTION {fn}()"
        ).format(t=ident, fn=ident),
    ]
    with connection.cursor() as cursor:
        for statement in statements:
            cursor.execute(statement)
    yield name
    with connection.cursor() as cursor:
        cursor.execute(sql.SQL("DROP TRIGGER {} ON django_jobs_occurrence").format(ident))
        cursor.execute(sql.SQL("DROP FUNCTION {}()").format(ident))
        cursor.execute(sql.SQL("DROP SEQUENCE {}").format(ident))


def test_a_renewal_that_fails_once_keeps_the_lease_and_no_second_replica_runs_it(
    start, tmp_path: Path, renewal_fails_once: str
) -> None:
    """On 8f518d8 the lease keeper died of the error for good, the replica kept claiming, and
    a second replica took the occurrence over while the first one's handler kept working.

    The lease is twice the other tests': the keeper's restart after its crash (a 0.5 s backoff)
    and its next renewal must land inside the confirmation margin (``(L - G) / 4 + G``) on a
    loaded machine too, or the replica rightly cuts its own run off (seen under load with 3 s).
    The run outlasts the lease by 10 s, so without a kept lease B would claim it."""
    occurrence = due_occurrence("proc.watchful_beat", timeout=timedelta(minutes=10))
    env = {
        "JOBS_LEASE_SECONDS": str(RENEWAL_LEASE),
        "JOBS_TIMEOUT_GRACE_SECONDS": str(GRACE),
        "JOBS_TEST_RUN_SECONDS": str(RENEWAL_LEASE + 10),
    }
    a = start("A", env=env)
    wait_until(lambda: bool(beats(tmp_path, "A")), what="A's handler to beat")
    b = start("B", env={**env, "JOBS_SHUTDOWN_GRACE_SECONDS": "1"})
    b.wait_logged("worker.started")

    wait_until(
        lambda: state_of(occurrence) == OccurrenceState.COMPLETED,
        timeout=60,
        what=lambda: f"the occurrence to complete: {a.log_path.read_text()[-3000:]}",
    )

    assert beats(tmp_path, "B") == [], "a second replica executed the occurrence"
    a_beats = beats(tmp_path, "A")
    assert a_beats[-1] - a_beats[0] > RENEWAL_LEASE + 8, "A's handler was stopped"
    (attempt,) = Attempt.objects.filter(occurrence=occurrence)
    assert (attempt.outcome, attempt.replica) == (AttemptOutcome.SUCCEEDED, "A")
    crash = first(a, "thread.crashed")
    assert (crash["role"], crash["restart"]) == ("lease_keeper", True)
    assert "renewal refused once by the test" in crash["error"]
    assert a.logged("thread.restarted") == 1
    for replica in (a, b):
        replica.signal(signal.SIGTERM)
        assert replica.wait_exit() == 0


# --- deadlines kept while the store is gone --------------------------------------------------


def test_a_timeout_that_passes_during_an_outage_still_ends_the_run(
    cluster: Cluster, tmp_path: Path
) -> None:
    """A handler that ignores cancellation, timeout 5 s, lease 60 s, the store stopped 1 s into
    the run. On 8f518d8 it kept working through the outage (31 s observed): the loop ran the
    failing heartbeat before it enforced timeouts. Now it is cut off at its timeout and grace,
    and the replica exits 3 for a restart."""
    replica = Replica(
        "stubborn",
        tmp_path,
        url=cluster.url,
        env={
            "JOBS_TEST_DECLARE": "stubborn_timeout",
            "JOBS_LEASE_SECONDS": "60",
            "JOBS_TIMEOUT_GRACE_SECONDS": str(GRACE),
        },
    )
    try:
        wait_until(lambda: bool(beats(tmp_path, "stubborn")), timeout=60, what="it to beat")
        began = beats(tmp_path, "stubborn")[0]
        wait_until(lambda: beats(tmp_path, "stubborn")[-1] - began >= 1, what="a second of its run")
        cluster.stop()
        assert replica.wait_exit(timeout=60) == 3
        ran = beats(tmp_path, "stubborn")
        # Timeout 5 s + grace 1 s, and the exit itself; never the length of the outage.
        assert ran[-1] - began < 5 + GRACE + 3, f"it ran {ran[-1] - began:.1f} s"
        cut = first(replica, "run.cut_off")
        assert cut["reason"] == "timeout"
        assert replica.logged("run.timed_out") == 1
    finally:
        replica.stop()
        cluster.start()


def test_an_unconfirmed_lease_is_cut_off_before_it_expires(
    cluster: Cluster, tmp_path: Path
) -> None:
    """Renewal cannot be confirmed (the store is gone): the run is cancelled one renewal
    interval plus the grace before its lease expires, so its cut-off comes before another
    replica may claim it. On 8f518d8 it was cancelled a sixth of the lease before the expiry
    (after it, with the cut-off's grace) and, the loop stuck behind its failing heartbeat,
    never cut off at all: the handler beat on for the whole 60 s the test waited."""
    replica = Replica(
        "unconfirmed",
        tmp_path,
        url=cluster.url,
        env={
            "JOBS_TEST_DECLARE": "stubborn_timeout",
            "JOBS_LEASE_SECONDS": str(LEASE),
            "JOBS_TIMEOUT_GRACE_SECONDS": str(GRACE),
        },
    )
    try:
        wait_until(lambda: bool(beats(tmp_path, "unconfirmed")), timeout=60, what="it to beat")
        cluster.stop()
        assert replica.wait_exit(timeout=60) == 3
    finally:
        replica.stop()
        cluster.start()
    unconfirmed = first(replica, "lease.unconfirmed")
    cut = first(replica, "run.cut_off")
    assert cut["reason"] == "outage"
    # The expiry the store last confirmed, read once it is back (nothing claimed it since).
    ((expires_at,),) = cluster.rows(
        "SELECT o.lease_expires_at FROM django_jobs_occurrence o"
        " JOIN django_jobs_schedule s ON s.id = o.schedule_id"
        " WHERE s.key = 'proc.stubborn_timeout'"
    )
    assert datetime.fromisoformat(unconfirmed["expires_at"]) == expires_at
    interval = (LEASE - GRACE) / 4  # worker/leases.py: renew_every
    assert instant(unconfirmed) <= expires_at - timedelta(seconds=interval + GRACE - 0.3)
    assert instant(cut) < expires_at - timedelta(seconds=interval - 0.3)


# --- a job that ends its own session -----------------------------------------------------------


def test_a_job_that_ends_its_own_session_fails_within_its_attempts(start, tmp_path: Path) -> None:
    """``pg_terminate_backend`` of its own backend on every attempt, ``max_attempts=2``. On
    8f518d8 every run was taken for a store outage and given back with no failure counted:
    205 runs in 26 s. The store answers on a connection of its own, so each is a failure."""
    doomed = due_occurrence("proc.query_of_death", max_attempts=2, backoff=timedelta(0))
    other = due_occurrence("proc.effect")
    replica = start("qod", concurrency=2)

    wait_until(
        lambda: (
            state_of(doomed) == OccurrenceState.DEAD
            and state_of(other) == OccurrenceState.COMPLETED
        ),
        timeout=60,
        what=lambda: f"the doomed run to be dead: {replica.log_path.read_text()[-3000:]}",
    )
    runs = (tmp_path / "query-of-death").read_text().splitlines()
    assert runs == [f"{doomed.pk} 1", f"{doomed.pk} 2"]
    row = Occurrence.objects.get(pk=doomed.pk)
    assert (row.attempts, row.failures) == (2, 2)
    assert row.last_error_type == "django.db.utils.OperationalError"
    outcomes = Attempt.objects.filter(occurrence=doomed).order_by("number")
    assert list(outcomes.values_list("outcome", flat=True)) == [AttemptOutcome.FAILED] * 2
    assert replica.alive
    replica.signal(signal.SIGTERM)
    assert replica.wait_exit() == 0


# --- a handler that raises SystemExit or KeyboardInterrupt -------------------------------------


@pytest.mark.parametrize(
    ("job", "error"),
    [("proc.exits", "SystemExit"), ("proc.interrupted", "KeyboardInterrupt")],
)
def test_a_handler_that_exits_fails_its_attempt_and_the_replica_serves_on(
    start, tmp_path: Path, job: str, error: str
) -> None:
    """On 8f518d8 the run stayed processing until its lease lapsed and was then counted
    ``WorkerLost``; in an inline pass the exception escaped the worker."""
    doomed = due_occurrence(job, max_attempts=2, backoff=timedelta(0))
    replica = start("exits", env={"JOBS_LEASE_SECONDS": "60"})
    wait_until(
        lambda: state_of(doomed) == OccurrenceState.DEAD,
        timeout=30,
        what=lambda: f"the run to be dead: {replica.log_path.read_text()[-3000:]}",
    )
    row = Occurrence.objects.get(pk=doomed.pk)
    assert (row.attempts, row.failures) == (2, 2)
    assert row.last_error_type.rsplit(".", 1)[-1] == error
    outcomes = Attempt.objects.filter(occurrence=doomed).order_by("number")
    assert list(outcomes.values_list("outcome", flat=True)) == [AttemptOutcome.FAILED] * 2
    # The replica lives on and serves other work.
    other = due_occurrence("proc.effect")
    wait_until(lambda: state_of(other) == OccurrenceState.COMPLETED, what="other work to run")
    assert replica.alive
    replica.signal(signal.SIGTERM)
    assert replica.wait_exit() == 0


def test_an_inline_pass_records_a_handlers_system_exit(start, tmp_path: Path) -> None:
    doomed = due_occurrence("proc.exits", max_attempts=1)
    replica = start("once", once=True)
    assert replica.wait_exit(timeout=60) == 0
    row = Occurrence.objects.get(pk=doomed.pk)
    assert (row.state, row.last_error_type.rsplit(".", 1)[-1]) == ("dead", "SystemExit")
    assert "nothing more is due" in replica.log_path.read_text()
