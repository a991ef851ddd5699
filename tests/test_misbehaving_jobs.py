"""Jobs that misbehave, under real ``runworker`` processes on real PostgreSQL.

A handler that takes its process down on every attempt, one that ignores losing its lease, one
caught by a database outage, one that leaves session state on its connection: the worker
contains each. Every wait is on a condition with a bound.
"""

from __future__ import annotations

import functools
import json
import re
import signal
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from psycopg import sql

from django_jobs.models import Attempt, AttemptOutcome, Occurrence, OccurrenceState
from tests.workerapp.models import Effect

from .concurrency import wait_until
from .factories import ScheduleFactory
from .processes import Cluster, Replica
from .storeutil import plan

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.processes]

LEASE = 3  # seconds: JOBS_LEASE_SECONDS of the replicas whose leases matter here
GRACE = 1  # seconds: JOBS_TIMEOUT_GRACE_SECONDS


def due_occurrence(job: str, *, late_by: timedelta = timedelta(minutes=10), **fields) -> Occurrence:
    """One occurrence of a new schedule of ``job``, due ``late_by`` ago (the real clock)."""
    now = datetime.now(UTC)
    schedule = ScheduleFactory.create(job=job, **fields)
    plan(schedule, now - late_by, now=now)
    return Occurrence.objects.get(schedule=schedule)


def state_of(occurrence: Occurrence) -> str:
    return Occurrence.objects.get(pk=occurrence.pk).state


# --- a handler that kills its process on every attempt ----------------------------------

MAX_STARTS = 6  # the supervisor's patience: a bounded crash loop needs 4 starts


def exited_or_dead(replica: Replica, occurrence: Occurrence) -> bool:
    return not replica.alive or state_of(occurrence) == OccurrenceState.DEAD


def supervise(start, occurrence: Occurrence) -> list[Replica]:
    """Act as the replicas' supervisor: start one, and whenever it exits start a new one,
    until ``occurrence`` is dead or ``MAX_STARTS`` replicas were started."""
    replicas: list[Replica] = []
    while state_of(occurrence) != OccurrenceState.DEAD and len(replicas) < MAX_STARTS:
        replica = start(f"sup-{len(replicas) + 1}", env={"JOBS_LEASE_SECONDS": str(LEASE)})
        replicas.append(replica)
        wait_until(
            functools.partial(exited_or_dead, replica, occurrence),
            timeout=30,
            what=f"{replica.name} to exit or the occurrence to be dead",
        )
    return replicas


def test_a_crash_loop_stops_at_max_attempts_and_the_next_replica_keeps_serving(
    start, tmp_path: Path
) -> None:
    occurrence = due_occurrence("proc.crasher", max_attempts=3)

    replicas = supervise(start, occurrence)

    row = Occurrence.objects.get(pk=occurrence.pk)
    assert (row.state, row.attempts, row.failures) == ("dead", 3, 3)
    crashes = sorted(path.name for path in tmp_path.glob("crash-*"))
    assert crashes == [f"crash-{occurrence.pk}-{n}" for n in (1, 2, 3)], "ran past max_attempts"
    assert row.last_error_type == "WorkerLost"
    # It says the worker stopped while running the attempt, and which attempt that was.
    assert re.search(r"\bworker\b.*\bstopped\b", row.last_error_message), row.last_error_message
    assert re.search(r"\battempt 3\b", row.last_error_message), row.last_error_message
    attempts = Attempt.objects.filter(occurrence=occurrence).order_by("number")
    assert list(attempts.values_list("number", "outcome")) == [
        (n, AttemptOutcome.LEASE_LOST) for n in (1, 2, 3)
    ]
    # Three replicas died running it; the fourth dead-lettered it without running it.
    assert [r.process.poll() for r in replicas] == [1, 1, 1, None]
    survivor = replicas[-1]
    other = due_occurrence("proc.effect")
    wait_until(
        lambda: state_of(other) == OccurrenceState.COMPLETED,
        timeout=30,
        what=f"{survivor.name} to keep serving other work",
    )
    assert list(Effect.objects.values_list("occurrence_key", "replica")) == [
        (str(other.pk), survivor.name)
    ]
    survivor.signal(signal.SIGTERM)
    assert survivor.wait_exit() == 0


# --- a handler that ignores losing its lease --------------------------------------------


def beats(folder: Path, replica: str) -> list[float]:
    """The monotonic instants at which ``replica``'s stubborn handler noted a beat."""
    path = folder / "beats"
    found = []
    for line in path.read_text().splitlines() if path.exists() else []:
        name, _, at = line.partition(" ")
        if name == replica:
            try:
                found.append(float(at))
            except ValueError:  # a line still being written
                continue
    return found


def test_a_replica_that_lost_its_lease_stops_the_work_and_asks_for_a_restart(
    start, tmp_path: Path
) -> None:
    # The timeout is far away: only the lease can stop this run.
    due_occurrence("proc.stubborn_beat", timeout=timedelta(minutes=10))
    env = {"JOBS_LEASE_SECONDS": str(LEASE), "JOBS_TIMEOUT_GRACE_SECONDS": str(GRACE)}
    a = start("A", env=env)
    wait_until(lambda: bool(beats(tmp_path, "A")), what="A's handler to beat")

    a.signal(signal.SIGSTOP)  # its lease keeper is frozen too: the lease runs out
    b = start("B", env={**env, "JOBS_SHUTDOWN_GRACE_SECONDS": "1"})  # quick to stop at the end
    wait_until(
        lambda: bool(beats(tmp_path, "B")),
        timeout=30,
        what="B to take the occurrence over once A's lease expired",
    )
    resumed = time.monotonic()
    a.signal(signal.SIGCONT)

    wait_until(
        lambda: not a.alive,
        timeout=LEASE + GRACE + 10,
        what="A to stop the run it lost and exit",
    )
    assert a.process.returncode == 3  # asks its supervisor for a restart
    last = max(beats(tmp_path, "A"))
    # A learns of the loss within a lease of waking, then gives the handler the grace.
    assert last <= resumed + LEASE + GRACE + 0.5, f"A beat {last - resumed:.1f}s after waking"
    assert a.logged("run.cut_off") == 1
    b.stop()


# --- a store outage in the middle of a run ----------------------------------------------

OUTAGE_SECONDS = 8


TERMINAL = {"completed", "dead", "skipped", "cancelled"}


def outage_reader_occurrence(cluster: Cluster) -> tuple[Any, ...]:
    """(id, state, attempts, failures) of the declared occurrence; Nones before it is planned."""
    rows = cluster.rows(
        "SELECT o.id, o.state, o.attempts, o.failures FROM django_jobs_occurrence o"
        " JOIN django_jobs_schedule s ON s.id = o.schedule_id"
        " WHERE s.key = 'proc.outage_reader'"
    )
    return rows[0] if rows else (None, None, None, None)


def test_a_store_outage_inside_a_run_is_not_a_failure_and_the_run_is_retried(
    cluster: Cluster, tmp_path: Path
) -> None:
    # max_attempts=1 (tests/workerapp/schedules.py): an outage counted as a failure kills it.
    replica = Replica(
        "reader",
        tmp_path,
        url=cluster.url,
        env={"JOBS_TEST_DECLARE": "outage_reader", "JOBS_LEASE_SECONDS": "60"},
    )
    try:
        wait_until(lambda: (tmp_path / "reading-1").exists(), timeout=60, what="attempt 1 to read")
        cluster.stop()  # attempt 1 reads until a read fails: its next one
        outage_ends = time.monotonic() + OUTAGE_SECONDS
        replica.wait_logged("store.unavailable", timeout=20)
        # The outage itself lasts a fixed time, longer than a blip: wait for it to pass,
        # watching that the worker lives through it.
        wait_until(
            lambda: time.monotonic() >= outage_ends or not replica.alive,
            timeout=OUTAGE_SECONDS + 10,
            what="the outage to last its seconds",
        )
        assert replica.alive, "the worker died during the outage"
        cluster.start()

        wait_until(
            lambda: outage_reader_occurrence(cluster)[1] in TERMINAL,
            timeout=60,
            what="the occurrence to finish",
        )
        key, state, attempts, failures = outage_reader_occurrence(cluster)
        assert (state, failures) == ("completed", 0), f"{attempts} attempts"
        outcomes = cluster.rows(
            "SELECT a.outcome FROM django_jobs_attempt a"
            " JOIN django_jobs_occurrence o ON o.id = a.occurrence_id"
            " JOIN django_jobs_schedule s ON s.id = o.schedule_id"
            " WHERE s.key = 'proc.outage_reader' ORDER BY a.number"
        )
        assert [outcome for (outcome,) in outcomes] == ["outage", "succeeded"]
        assert cluster.rows("SELECT occurrence_key FROM workerapp_effect") == [(str(key),)]
    finally:
        replica.stop()


# --- session state left on the run thread's connection ----------------------------------


@pytest.fixture
def leak_role() -> Iterator[str]:
    """A role (allowed nothing) for the leaker to switch its session to with SET ROLE."""
    name = f"django_jobs_leak_{uuid.uuid4().hex[:8]}"
    with connection.cursor() as cursor:
        cursor.execute(sql.SQL("CREATE ROLE {} NOLOGIN").format(sql.Identifier(name)))
    yield name
    with connection.cursor() as cursor:
        cursor.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(name)))


@pytest.fixture
def sessions_start_outside_utc() -> Iterator[None]:
    """New sessions of the test database start in a zone other than UTC (as on a server kept
    in local time), so a session reset to its defaults without Django's UTC shows."""
    database = sql.Identifier(connection.settings_dict["NAME"])
    with connection.cursor() as cursor:
        cursor.execute(
            sql.SQL("ALTER DATABASE {} SET TimeZone = 'America/St_Johns'").format(database)
        )
    yield
    with connection.cursor() as cursor:
        cursor.execute(sql.SQL("ALTER DATABASE {} RESET TimeZone").format(database))


def test_session_state_left_by_one_run_is_gone_for_the_next(
    leak_role: str, sessions_start_outside_utc: None, start, tmp_path: Path
) -> None:
    # One run thread, so one connection, serves both; the leaker is due first.
    leaker = due_occurrence("proc.leaker", late_by=timedelta(minutes=10, seconds=1))
    reader = due_occurrence("proc.leak_reader", late_by=timedelta(minutes=10))
    replica = start("isolating", concurrency=1, env={"JOBS_TEST_LEAK_ROLE": leak_role})
    seen_path = tmp_path / f"seen-{reader.pk}.json"
    sequence = tmp_path / "sequence"
    # The reader notes what it saw, then appends to the sequence: wait for the second.
    wait_until(
        lambda: sequence.exists() and f"reader {reader.pk}" in sequence.read_text(),
        timeout=30,
        what="the reader to run",
    )

    assert sequence.read_text().splitlines() == [
        f"leaker {leaker.pk}",  # it got through every statement, before the reader ran
        f"reader {reader.pk}",
    ]
    seen = json.loads(seen_path.read_text())
    inherited = {
        "custom setting": seen["setting"] not in (None, ""),
        "temp table": seen["temp_table"],
        "advisory lock": seen["advisory_locks"] != 0,
        "LISTEN": seen["channels"] != [],
        "prepared statement": seen["prepared_statements"] != 0,
        "application_name": seen["application_name"] == "leaked",
        "role": seen["current_user"] != seen["session_user"],
        "TimeZone": seen["time_zone"] == "Asia/Kathmandu",
    }
    assert [what for what, found in inherited.items() if found] == [], f"the reader saw {seen}"
    # Reset, the session is still Django's: UTC, not the database's default zone.
    assert seen["time_zone"] == "UTC"
    wait_until(
        lambda: {state_of(leaker), state_of(reader)} == {OccurrenceState.COMPLETED},
        what="both runs to complete",
    )
    replica.signal(signal.SIGTERM)
    assert replica.wait_exit() == 0


def test_runworker_once_ends_within_the_grace_of_a_handler_that_ignores_its_timeout(
    start, tmp_path: Path
) -> None:
    occurrence = due_occurrence("proc.stubborn", timeout=timedelta(seconds=1))
    replica = start("once", once=True, env={"JOBS_TIMEOUT_GRACE_SECONDS": "1"})

    # timeout 1 s + grace 1 s, and start-up: well inside the bound, never "for ever".
    assert replica.wait_exit(timeout=30) == 3
    (attempt,) = Attempt.objects.filter(occurrence=occurrence)
    assert attempt.outcome == AttemptOutcome.TIMED_OUT
    assert replica.logged("run.cut_off") == 1


def test_runworker_once_drains_on_sigterm_and_releases_a_handler_that_ignores_it(
    start, tmp_path: Path
) -> None:
    occurrence = due_occurrence("proc.stubborn", timeout=timedelta(hours=1))
    replica = start(
        "once-term",
        once=True,
        env={"JOBS_LEASE_SECONDS": "60", "JOBS_SHUTDOWN_GRACE_SECONDS": "1"},
    )
    wait_until(lambda: len(list(tmp_path.glob("started-*"))) == 1, what="the run to start")

    replica.signal(signal.SIGTERM)

    assert replica.wait_exit(timeout=30) == 0
    occurrence.refresh_from_db()
    assert (occurrence.state, occurrence.lease_owner) == (OccurrenceState.SCHEDULED, "")
    (attempt,) = Attempt.objects.filter(occurrence=occurrence)
    assert attempt.outcome == AttemptOutcome.RELEASED
