"""``manage.py jobs top``: the fleet in a terminal (issue #37), scoped as the admin's dashboard.

A fleet of two tenants is built the way replicas build it (planned, claimed, failed, dead
through the store) at a fake instant; each test reads ``jobs top`` as one user. The loop is
run with a bounded number of views, and as a real process stopped with Ctrl-C; a real
``runworker`` shows its running occurrence on its replica id.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from io import StringIO
from pathlib import Path
from typing import Any
from uuid import UUID

import psycopg
import pytest
from django.contrib.auth.models import Group, Permission, User
from django.core.management import CommandError, call_command
from django.core.management.base import OutputWrapper
from django.db import connection
from guardian.shortcuts import assign_perm

from django_jobs import store
from django_jobs.cli import Invocation, top
from django_jobs.management.commands.jobs import Command
from django_jobs.models import Occurrence, Schedule
from django_jobs.permissions import grant_tenant
from django_jobs.safe_error import SafeError
from django_jobs.store import watch as store_watch
from django_jobs.testing import FakeClock, use_clock

from .concurrency import wait_until
from .factories import T0, ScheduleFactory
from .processes import ROOT, FileClock, clocked_replica, database_url, log_tail
from .storeutil import claim, plan
from .test_server_side_binding import PREPARED

NOW = T0 + timedelta(hours=1)
HOUR = timedelta(hours=1)
MINUTE = timedelta(minutes=1)


@dataclass(frozen=True)
class Fleet:
    """The occurrences of the two tenants' schedules, by what they are at NOW."""

    acme: Schedule
    globex: Schedule
    acme_running: UUID  # on replica r-acme for 85.7 s
    globex_running: UUID  # on replica r-globex for 30 s
    acme_failed: UUID  # failed 3 min before NOW, a retry an hour later
    globex_dead: UUID  # dead 2 min before NOW
    acme_old_failure: UUID  # failed 40 min before NOW: outside the default window
    acme_due: UUID  # due 5 min before NOW, not started
    globex_due: UUID  # due 1 min before NOW, not started


def _claimed(schedule: Schedule, at: datetime, *, owner: str, now: datetime) -> Any:
    """Plan ``schedule``'s occurrence at ``at`` and claim it (the only one due) at ``now``."""
    plan(schedule, at, now=at)
    (lease,) = claim(owner, now, limit=1, lease_for=HOUR)
    return lease


def build_fleet() -> Fleet:
    acme = ScheduleFactory.create(tenant="acme", key="billing.invoice", queue="default")
    globex = ScheduleFactory.create(tenant="globex", key="reports.daily", queue="reports")
    old = _claimed(acme, NOW - timedelta(minutes=50), owner="r-acme", now=NOW - 50 * MINUTE)
    store.fail(
        old,
        now=NOW - 40 * MINUTE,
        error=SafeError("RuntimeError", "an old failure"),
        retry_at=NOW + HOUR,
    )
    failed = _claimed(acme, NOW - 20 * MINUTE, owner="r-acme", now=NOW - 20 * MINUTE)
    store.fail(
        failed,
        now=NOW - 3 * MINUTE,
        error=SafeError("RuntimeError", "card declined\n  at line 2 of the trace"),
        retry_at=NOW + HOUR,
    )
    dead = _claimed(globex, NOW - 19 * MINUTE, owner="r-globex", now=NOW - 19 * MINUTE)
    store.dead_letter(dead, now=NOW - 2 * MINUTE, error=SafeError("ValueError", "bad report"))
    acme_running = _claimed(
        acme, NOW - 10 * MINUTE, owner="r-acme", now=NOW - timedelta(seconds=85.7)
    )
    globex_running = _claimed(
        globex, NOW - 9 * MINUTE, owner="r-globex", now=NOW - timedelta(seconds=30)
    )
    (acme_due,) = plan(acme, NOW - 5 * MINUTE, now=NOW - 5 * MINUTE)
    (globex_due,) = plan(globex, NOW - MINUTE, now=NOW - MINUTE)
    for replica, beat in (("r-acme", NOW - timedelta(seconds=2)), ("r-globex", NOW - MINUTE)):
        store.heartbeat(
            replica,
            host=f"host-{replica}",
            pid=4242,
            started_at=NOW - HOUR,
            now=beat,
            state="running",
            concurrency=4,
            running=1,
        )
    return Fleet(
        acme=acme,
        globex=globex,
        acme_running=acme_running.occurrence_id,
        globex_running=globex_running.occurrence_id,
        acme_failed=failed.occurrence_id,
        globex_dead=dead.occurrence_id,
        acme_old_failure=old.occurrence_id,
        acme_due=acme_due,
        globex_due=globex_due,
    )


def jobs_top(*args: str, at: datetime = NOW) -> str:
    out = StringIO()
    with use_clock(FakeClock(at)):
        call_command("jobs", "top", *args, stdout=out)
    return out.getvalue()


def view(*args: str, at: datetime = NOW) -> dict[str, Any]:
    shown: dict[str, Any] = json.loads(jobs_top("--json", *args, at=at))
    return shown


def shown_ids(data: dict[str, Any], part: str) -> set[str]:
    return {line["occurrence"] for line in data[part]["shown"]}


def ids(*occurrences: UUID) -> set[str]:
    return {str(o) for o in occurrences}


@pytest.fixture
def fleet(db) -> Fleet:
    return build_fleet()


@pytest.fixture
def ops(db) -> User:
    return User.objects.create_superuser("ops", "ops@example.com", "x")


def tenant_user(name: str, tenant: str) -> User:
    user = User.objects.create_user(name)
    group = Group.objects.create(name=f"{tenant}-viewers")
    grant_tenant(group, tenant, "view")
    user.groups.add(group)
    return user


def view_replica(user: User) -> None:
    user.user_permissions.add(
        Permission.objects.get(codename="view_replica", content_type__app_label="django_jobs")
    )


# Scoping: what each user sees (the must-show of issue #37).


def test_a_superuser_sees_every_tenants_backlog_running_failures_and_the_replicas(
    fleet, ops
) -> None:
    data = view("--actor", "ops")
    assert data["scope"] == {"tenant": None, "queue": None, "schedules": None}
    assert data["backlog"] == {"due": 2, "capped": False, "oldest_due_age_seconds": 300.0}
    assert [line["occurrence"] for line in data["running"]["shown"]] == [
        str(fleet.acme_running),  # longest running first
        str(fleet.globex_running),
    ]
    assert [line["occurrence"] for line in data["failures"]["shown"]] == [
        str(fleet.globex_dead),  # newest first; the failure 40 min ago is outside 15 min
        str(fleet.acme_failed),
    ]
    assert [r["id"] for r in data["replicas"]["shown"]] == ["r-acme", "r-globex"]


def test_a_user_granted_one_tenant_sees_only_that_tenants_work_and_no_replicas(fleet) -> None:
    tenant_user("alice", "acme")
    data = view("--actor", "alice")
    assert data["scope"]["schedules"] == 1
    assert data["backlog"] == {"due": 1, "capped": False, "oldest_due_age_seconds": 300.0}
    assert shown_ids(data, "running") == ids(fleet.acme_running)
    assert shown_ids(data, "failures") == ids(fleet.acme_failed)
    assert data["replicas"] is None  # the fleet needs django_jobs.view_replica

    text = jobs_top("--once", "--actor", "alice")
    assert str(fleet.acme_running) in text
    assert str(fleet.acme_failed) in text
    for hidden in (fleet.globex_running, fleet.globex_dead, "globex", "Replicas", "r-globex"):
        assert str(hidden) not in text


def test_a_user_granted_one_schedule_sees_only_its_work(fleet) -> None:
    bob = User.objects.create_user("bob")
    assign_perm("django_jobs.view_schedule", bob, fleet.globex)
    data = view("--actor", "bob")
    assert data["backlog"] == {"due": 1, "capped": False, "oldest_due_age_seconds": 60.0}
    assert shown_ids(data, "running") == ids(fleet.globex_running)
    assert shown_ids(data, "failures") == ids(fleet.globex_dead)
    assert data["replicas"] is None


def test_view_replica_shows_the_fleet_with_heartbeat_age_and_stale_replicas(fleet) -> None:
    carol = tenant_user("carol", "acme")
    view_replica(carol)
    data = view("--actor", "carol")
    assert shown_ids(data, "running") == ids(fleet.acme_running)  # still one tenant's work
    replicas = {r["id"]: r for r in data["replicas"]["shown"]}
    assert (replicas["r-acme"]["heartbeat_age_seconds"], replicas["r-acme"]["stale"]) == (2, False)
    assert (replicas["r-globex"]["heartbeat_age_seconds"], replicas["r-globex"]["stale"]) == (
        60,
        True,
    )
    text = jobs_top("--once", "--actor", "carol")
    assert "Replicas: 2" in text
    assert "r-globex  host-r-globex  4242  running  1 min ago (stale)  1/4" in text


def test_a_user_who_may_see_nothing_sees_an_empty_view(fleet) -> None:
    User.objects.create_user("nobody")
    data = view("--actor", "nobody")
    assert data["scope"]["schedules"] == 0
    assert (data["backlog"]["due"], data["running"]["total"], data["failures"]["total"]) == (
        0,
        0,
        0,
    )


def test_tenant_narrows_and_never_widens(fleet, ops) -> None:
    data = view("--actor", "ops", "--tenant", "globex")
    assert data["scope"] == {"tenant": "globex", "queue": None, "schedules": 1}
    assert data["backlog"]["due"] == 1
    assert shown_ids(data, "running") == ids(fleet.globex_running)
    assert shown_ids(data, "failures") == ids(fleet.globex_dead)
    tenant_user("alice", "acme")
    assert view("--actor", "alice", "--tenant", "globex")["running"]["total"] == 0


def test_queue_narrows_the_backlog_running_and_failures(fleet, ops) -> None:
    data = view("--actor", "ops", "--queue", "reports")
    assert data["backlog"] == {"due": 1, "capped": False, "oldest_due_age_seconds": 60.0}
    assert shown_ids(data, "running") == ids(fleet.globex_running)
    assert shown_ids(data, "failures") == ids(fleet.globex_dead)
    assert view("--actor", "ops", "--queue", "nothing-here")["backlog"]["due"] == 0


def test_since_widens_the_window_of_failures(fleet, ops) -> None:
    data = view("--actor", "ops", "--since", "3600")
    assert shown_ids(data, "failures") == ids(
        fleet.globex_dead, fleet.acme_failed, fleet.acme_old_failure
    )


def test_a_retried_occurrence_is_listed_once_at_its_last_failure(fleet, ops) -> None:
    retried = ScheduleFactory.create(tenant="initech", key="retry.twice")
    first = _claimed(retried, NOW - 30 * MINUTE, owner="r-acme", now=NOW - 14 * MINUTE)
    store.fail(
        first,
        now=NOW - 13 * MINUTE,
        error=SafeError("RuntimeError", "first"),
        retry_at=NOW - 12 * MINUTE,
    )
    (second,) = claim("r-acme", NOW - 12 * MINUTE, limit=1, lease_for=HOUR)
    store.fail(
        second,
        now=NOW - 11 * MINUTE,
        error=SafeError("RuntimeError", "second"),
        retry_at=NOW + HOUR,
    )
    data = view("--actor", "ops", "--tenant", "initech")
    assert data["failures"]["total"] == 1
    (line,) = data["failures"]["shown"]
    assert (line["occurrence"], line["attempts"], line["error"], line["failed_at"]) == (
        str(first.occurrence_id),
        2,
        "second",
        (NOW - 11 * MINUTE).isoformat(),
    )


# A Django Tasks failure: its message is the traceback (``SafeError.with_traceback``).


def _traceback_of(message: str, *, causes: int = 0) -> SafeError:
    """A real traceback, as the Tasks handler stores it: ``ValueError(message)`` raised in a
    function, from a chain of ``causes`` earlier ones."""

    def report(cause: BaseException | None, said: str) -> None:
        raise ValueError(said) from cause

    error: BaseException | None = None
    for n in range(causes + 1):
        try:
            report(error, message if n == causes else f"cause {n}")
        except ValueError as exc:
            error = exc
    assert error is not None
    return SafeError.with_traceback(error)


def _dead_with(error: SafeError, key: str) -> UUID:
    """An occurrence of a new initech schedule gone dead a minute before NOW with ``error``."""
    row = ScheduleFactory.create(tenant="initech", key=key)
    lease = _claimed(row, NOW - 5 * MINUTE, owner="r-acme", now=NOW - 5 * MINUTE)
    store.dead_letter(lease, now=NOW - MINUTE, error=error)
    return UUID(str(lease.occurrence_id))


def test_a_traceback_shows_its_exception_line_not_its_first(ops) -> None:
    error = _traceback_of("no rows for 2026-03")
    assert error.message.startswith("Traceback (most recent call last):\n")
    dead = _dead_with(error, "tasks.report")
    (line,) = view("--actor", "ops")["failures"]["shown"]
    assert (line["occurrence"], line["error_type"], line["error"]) == (
        str(dead),
        "ValueError",
        "no rows for 2026-03",
    )
    row = next(r for r in jobs_top("--once", "--actor", "ops").splitlines() if str(dead) in r)
    assert row.split()[-7:] == ["dead", "1", "ValueError:", "no", "rows", "for", "2026-03"]
    assert row.endswith("  ValueError: no rows for 2026-03")


def test_a_long_traceback_cut_at_its_start_shows_its_exception_line_cut_at_120(ops) -> None:
    error = _traceback_of("too deep: " + "y" * 300, causes=60)
    assert error.message.startswith("[truncated]…")  # only the traceback's end was kept
    _dead_with(error, "tasks.deep")
    (line,) = view("--actor", "ops")["failures"]["shown"]
    assert line["error"] == "too deep: " + "y" * 109 + "…"
    assert len(line["error"]) == 120


def test_a_message_that_is_no_traceback_shows_its_first_line(ops) -> None:
    _dead_with(SafeError("RuntimeError", "card declined\nTraceback: not one"), "billing.card")
    (line,) = view("--actor", "ops")["failures"]["shown"]
    assert line["error"] == "card declined"


# What the view reads: bounded index ranges, in any binding mode.


def _history(schedule: Schedule, rows: int) -> None:
    """``rows`` occurrences of ``schedule`` over 10 queues, one a second before T0: every
    seventh due and not started, the others completed with one succeeded attempt; the
    statistics refreshed."""
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO django_jobs_occurrence (id, schedule_id, tenant, scheduled_at, state,"
            " skip_reason, trigger, due_at, lease_owner, fencing_token, attempts, failures,"
            " last_error_type, last_error_message, queue, started_at, finished_at)"
            " SELECT gen_random_uuid(), %s, '', %s - make_interval(secs => g),"
            " CASE WHEN g %% 7 = 0 THEN 'scheduled' ELSE 'completed' END,"
            " '', 'schedule', %s - make_interval(secs => g), '', g, 1, 0, '', '', 'q' || g %% 10,"
            " %s - make_interval(secs => g), %s - make_interval(secs => g)"
            " FROM generate_series(1, %s) g",
            [schedule.pk, T0, T0, T0, T0, rows],
        )
        cursor.execute(
            "INSERT INTO django_jobs_attempt (occurrence_id, number, fencing_token, replica,"
            " trigger, started_at, finished_at, outcome, error_type, error_message)"
            " SELECT id, 1, fencing_token, 'r', 'schedule', started_at, finished_at,"
            " 'succeeded', '', '' FROM django_jobs_occurrence WHERE state = 'completed'"
            " ORDER BY scheduled_at"
        )
        cursor.execute("ANALYZE django_jobs_occurrence")
        cursor.execute("ANALYZE django_jobs_attempt")


def _explained(name: str, **params: Any) -> str:
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN " + store_watch.QUERIES[name], params)
        return "\n".join(row[0] for row in cursor.fetchall())


@pytest.mark.slow
@pytest.mark.django_db
def test_each_read_walks_an_index_never_the_occurrence_or_attempt_table() -> None:
    """The plans, not timings: over 50,000 finished occurrences and their attempts."""
    schedule = ScheduleFactory.create()
    _history(schedule, 50_000)
    since = T0 - 15 * MINUTE
    for ids in (None, [schedule.pk]):
        scope: dict[str, Any] = {"ids": ids}
        due = _explained("queue_due", **scope, queue="q3", now=T0, cap=10_000)
        running = _explained("running", **scope, queue=None, limit=20, cap=10_000)
        failures = _explained(
            "failures", **scope, queue=None, since=since, now=T0, limit=20, scan=10_000
        )
        assert "Scan on django_jobs_occurrence_qdue" in due, due  # a bitmap or a plain walk
        # Either partial index on processing holds exactly the processing rows.
        assert re.search(r"Index Scan using django_jobs_occurrence_(running|holding)", running), (
            running
        )
        assert "Index Scan Backward using django_jobs_attempt_pkey" in failures, failures
        assert "Index Scan using django_jobs_occurrence_pkey" in failures, failures
        for plan_text in (due, running, failures):
            assert "Seq Scan on django_jobs_occurrence" not in plan_text, plan_text
            assert "Seq Scan on django_jobs_attempt" not in plan_text, plan_text


@pytest.fixture
def prepared() -> Iterator[None]:
    """The test's connection reopened binding on the server with generic plans
    (tests/test_server_side_binding.py says why)."""
    options = connection.settings_dict["OPTIONS"]
    saved = dict(options)
    connection.close()
    options.update(PREPARED)
    try:
        yield
    finally:
        connection.close()
        options.clear()
        options.update(saved)


@pytest.mark.django_db(transaction=True)
def test_the_view_reads_the_same_with_prepared_statements_and_generic_plans(prepared) -> None:
    User.objects.create_superuser("ops", "ops@example.com", "x")
    fleet = build_fleet()
    tenant_user("alice", "acme")
    everything = view("--actor", "ops")
    assert (everything["backlog"]["due"], everything["running"]["total"]) == (2, 2)
    assert shown_ids(everything, "failures") == ids(fleet.globex_dead, fleet.acme_failed)
    reports = view("--actor", "ops", "--queue", "reports")
    assert (reports["backlog"]["due"], shown_ids(reports, "running")) == (
        1,
        ids(fleet.globex_running),
    )
    alice = view("--actor", "alice")
    assert shown_ids(alice, "failures") == ids(fleet.acme_failed)


# The text: words, columns, header.


def test_text_says_durations_and_instants_in_words_in_aligned_columns(fleet, ops) -> None:
    text = jobs_top("--once", "--actor", "ops")
    lines = text.splitlines()
    assert lines[0] == "jobs top at 2026-03-01 13:00:00 UTC as ops: every schedule, every queue"
    assert lines[1] == "Due backlog: 2 not started, the oldest due 5 min ago"
    assert lines[2] == "Running: 2"
    header, acme, globex = lines[3:6]
    assert header.split() == [
        "SCHEDULE",
        "OCCURRENCE",
        "REPLICA",
        "ATTEMPT",
        "RUNNING",
        "FOR",
        "QUEUE",
    ]
    assert acme.split() == [
        "acme/billing.invoice",
        str(fleet.acme_running),
        "r-acme",
        "1",
        "1",
        "min",
        "26",
        "s",  # 85.7 s
        "default",
    ]
    assert globex.split()[-3:] == ["30", "s", "reports"]
    # Columns line up: each starts where its header does.
    for column in ("OCCURRENCE", "REPLICA", "QUEUE"):
        at = header.index(column)
        assert acme[at - 1] == " "
        assert acme[at] != " "
        assert globex[at - 1] == " "
        assert globex[at] != " "
    assert "Failed or dead in the last 15 min: 2" in lines
    failure = next(line for line in lines if str(fleet.acme_failed) in line)
    assert failure.split()[:3] == ["3", "min", "ago"]
    assert failure.rstrip().endswith("failed  1         RuntimeError: card declined")


def test_a_lapsed_lease_is_said_beside_its_time(fleet, ops) -> None:
    text = jobs_top("--once", "--actor", "ops", at=NOW + 2 * HOUR)  # leases were for an hour
    line = next(line for line in text.splitlines() if str(fleet.acme_running) in line)
    assert "2 h 1 min (lease lapsed)" in line


def test_json_shape(fleet, ops) -> None:
    data = view("--actor", "ops")
    assert set(data) == {"now", "actor", "scope", "backlog", "running", "failures", "replicas"}
    assert (data["now"], data["actor"]) == ("2026-03-01T13:00:00+00:00", "ops")
    running = data["running"]["shown"][0]
    assert running == {
        "occurrence": str(fleet.acme_running),
        "schedule": "acme/billing.invoice",
        "replica": "r-acme",
        "attempt": 1,
        "queue": "default",
        "started_at": (NOW - timedelta(seconds=85.7)).isoformat(),
        "elapsed_seconds": 85.7,
        "lease_lapsed": False,
    }
    assert (data["running"]["total"], data["running"]["capped"]) == (2, False)
    failure = data["failures"]["shown"][1]
    assert failure == {
        "occurrence": str(fleet.acme_failed),
        "schedule": "acme/billing.invoice",
        "state": "failed",
        "attempts": 1,
        "queue": "default",
        "failed_at": (NOW - 3 * MINUTE).isoformat(),
        "error_type": "RuntimeError",
        "error": "card declined",
    }
    assert data["failures"]["since"] == (NOW - 15 * MINUTE).isoformat()
    assert data["failures"]["read_since"] is None  # every attempt was read
    replica = data["replicas"]["shown"][0]
    assert set(replica) == {
        "id",
        "host",
        "pid",
        "state",
        "heartbeat_at",
        "heartbeat_age_seconds",
        "running",
        "concurrency",
        "queues",
        "stale",
    }


def test_json_prints_one_view_even_without_once(fleet, ops) -> None:
    out = jobs_top("--json", "--actor", "ops")
    assert json.loads(out)["actor"] == "ops"  # one JSON document, then the command returned


# The loop.


def invocation(*args: str, out: StringIO) -> Invocation:
    options = vars(Command().create_parser("manage.py", "jobs").parse_args(["top", *args]))
    return Invocation(options, OutputWrapper(out))


def test_the_watch_redraws_at_each_interval_separated_by_a_blank_line(fleet, ops) -> None:
    out = StringIO()
    clock = FakeClock(NOW)

    def pause(seconds: float) -> None:
        clock.advance(timedelta(seconds=seconds))

    with use_clock(clock):
        top.top(invocation("--actor", "ops", "--interval", "2", out=out), frames=3, pause=pause)
    views = out.getvalue().split("\n\n")
    assert [v.splitlines()[0][:35] for v in views] == [
        "jobs top at 2026-03-01 13:00:00 UTC",
        "jobs top at 2026-03-01 13:00:02 UTC",
        "jobs top at 2026-03-01 13:00:04 UTC",
    ]
    assert top.CLEAR not in out.getvalue()  # not a terminal: no escape codes in a log
    assert "1 min 30 s" in views[2]  # acme's run, 4 s later


class Terminal(StringIO):
    def isatty(self) -> bool:
        return True


def test_a_model_wide_permission_taken_away_applies_from_the_next_view(fleet) -> None:
    """The actor is read again for each view: Django caches a user's permissions on the user
    object, so without that the second view would still show what the first did."""
    dana = User.objects.create_user("dana")
    operators = Group.objects.create(name="operators")
    model_wide = Permission.objects.filter(
        content_type__app_label="django_jobs", codename__in=["view_schedule", "view_replica"]
    )
    operators.permissions.add(*model_wide)
    dana.groups.add(operators)
    out = StringIO()
    clock = FakeClock(NOW)

    def pause(seconds: float) -> None:
        operators.permissions.remove(*model_wide)  # taken away between the two views
        clock.advance(timedelta(seconds=seconds))

    with use_clock(clock):
        top.top(invocation("--actor", "dana", out=out), frames=2, pause=pause)
    first, second = out.getvalue().split("\n\n")
    assert first.splitlines()[0].endswith("as dana: every schedule, every queue")
    assert str(fleet.acme_running) in first
    assert "Replicas: 2" in first
    assert second.splitlines()[0].endswith("as dana: 0 schedules, every queue")
    assert second.splitlines()[1:4] == [
        "Due backlog: none",
        "Running: 0",
        "Failed or dead in the last 15 min: 0",
    ]
    assert "Replicas" not in second


def test_on_a_terminal_each_view_clears_the_screen(fleet, ops) -> None:
    out = Terminal()
    with use_clock(FakeClock(NOW)):
        top.top(invocation("--actor", "ops", out=out), frames=2, pause=lambda _: None)
    assert out.getvalue().count(top.CLEAR) == 2
    assert out.getvalue().startswith(top.CLEAR + "jobs top at")


def test_an_interval_below_half_a_second_is_refused(ops) -> None:
    with pytest.raises(CommandError, match=r"--interval: at least 0.5 seconds, got 0.1"):
        call_command("jobs", "top", "--interval", "0.1", "--actor", "ops")


def _terminate_backend(pid: int) -> None:
    with psycopg.connect(database_url(), autocommit=True) as other:
        other.execute("SELECT pg_terminate_backend(%s)", (pid,))


@pytest.mark.django_db(transaction=True)
def test_a_store_outage_mid_watch_is_said_and_the_next_view_tries_again() -> None:
    User.objects.create_superuser("ops", "ops@example.com", "x")
    build_fleet()
    out = StringIO()
    clock = FakeClock(NOW)
    cut: list[int] = []

    def pause(seconds: float) -> None:
        clock.advance(timedelta(seconds=seconds))
        if not cut:  # after the first view, the server ends this session: a real outage
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_backend_pid()")
                (pid,) = cursor.fetchone()
            _terminate_backend(pid)
            cut.append(pid)

    with use_clock(clock):
        top.top(invocation("--actor", "ops", out=out), frames=3, pause=pause)
    first, outage, again = out.getvalue().split("\n\n")
    assert first.startswith("jobs top at 2026-03-01 13:00:00 UTC")
    assert outage.startswith("2026-03-01 13:00:02 UTC: the store is unreachable (")
    assert outage.rstrip().endswith("trying again in 2 s")
    assert again.startswith("jobs top at 2026-03-01 13:00:04 UTC")
    assert "Running: 2" in again


@pytest.mark.django_db(transaction=True)
def test_once_with_the_store_unreachable_exits_non_zero_saying_so() -> None:
    User.objects.create_superuser("ops", "ops@example.com", "x")
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        (pid,) = cursor.fetchone()
    _terminate_backend(pid)
    try:
        with pytest.raises(CommandError, match="the store is unreachable: OperationalError"):
            jobs_top("--once", "--actor", "ops")
    finally:
        connection.close()


@pytest.mark.processes
@pytest.mark.django_db(transaction=True)
def test_ctrl_c_ends_the_watch_with_exit_status_0_and_no_traceback(tmp_path: Path) -> None:
    User.objects.create_superuser("ops", "ops@example.com", "x")
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.worker_settings",
        "DATABASE_URL": database_url(),
        "PYTHONUNBUFFERED": "1",
    }
    command = [sys.executable, "-W", "ignore", str(ROOT / "manage.py"), "jobs", "top"]
    lines: list[str] = []
    with (
        (tmp_path / "stderr").open("w") as stderr,
        subprocess.Popen(
            [*command, "--actor", "ops", "--interval", "0.5"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        ) as process,
    ):
        reader = threading.Thread(target=lambda: lines.extend(process.stdout or ()), daemon=True)
        reader.start()
        try:
            wait_until(
                lambda: any(line.startswith("jobs top at") for line in lines),
                timeout=60,
                what=lambda: f"the first view: {lines} {(tmp_path / 'stderr').read_text()}",
            )
            process.send_signal(signal.SIGINT)
            assert process.wait(timeout=30) == 0
        finally:
            if process.poll() is None:
                process.kill()
        reader.join(timeout=10)
    errors = (tmp_path / "stderr").read_text()
    assert "Traceback" not in errors, errors
    assert "KeyboardInterrupt" not in errors, errors
    assert "Running: 0" in "".join(lines)


@pytest.mark.processes
@pytest.mark.django_db(transaction=True)
def test_ctrl_c_during_a_read_lets_the_view_finish_then_ends_the_watch(tmp_path: Path) -> None:
    """Ctrl-C while a view's query waits does not cut the query off (psycopg would send a
    cancel request and wait for the server's answer): the view is read and printed, then the
    watch ends with exit status 0. The query is held on a lock another connection takes, and
    Ctrl-C is sent once PostgreSQL shows it waiting for that lock."""
    User.objects.create_superuser("ops", "ops@example.com", "x")
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.worker_settings",
        "DATABASE_URL": database_url(),
        "PYTHONUNBUFFERED": "1",
    }
    table = Occurrence._meta.db_table
    lines: list[str] = []
    with (
        psycopg.connect(database_url()) as locker,
        (tmp_path / "stderr").open("w") as stderr,
        subprocess.Popen(
            [sys.executable, "-W", "ignore", str(ROOT / "manage.py"), "jobs", "top",
             "--actor", "ops", "--interval", "0.5"],
            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=stderr, text=True,
        ) as process,
    ):  # fmt: skip
        reader = threading.Thread(target=lambda: lines.extend(process.stdout or ()), daemon=True)
        reader.start()
        try:
            wait_until(
                lambda: any(line.startswith("jobs top at") for line in lines),
                timeout=60,
                what=lambda: f"the first view: {lines}",
            )
            locker.execute(f'LOCK TABLE "{table}" IN ACCESS EXCLUSIVE MODE')
            wait_until(
                lambda: (
                    locker.execute(
                        "SELECT count(*) FROM pg_locks"
                        " WHERE NOT granted AND relation = %s::regclass",
                        [table],
                    ).fetchone()[0]  # type: ignore[index]
                    > 0
                ),
                timeout=60,
                what="the next view waiting for the lock",
            )
            process.send_signal(signal.SIGINT)
            locker.rollback()  # the lock goes: the view being read finishes
            assert process.wait(timeout=60) == 0
        finally:
            if process.poll() is None:
                process.kill()
        reader.join(timeout=10)
    errors = (tmp_path / "stderr").read_text()
    assert "Traceback" not in errors, errors
    views = [line for line in lines if line.startswith("jobs top at")]
    assert len(views) == 2, lines  # the first, and the one Ctrl-C came during
    assert not any("unreachable" in line for line in lines), lines


# A real replica: its running occurrence, on its replica id, for as long as it has run.


@pytest.mark.processes
@pytest.mark.django_db(transaction=True)
def test_a_real_replicas_running_occurrence_shows_with_its_replica_and_time(
    tmp_path: Path,
) -> None:
    User.objects.create_superuser("ops", "ops@example.com", "x")
    start = datetime.now(UTC).replace(microsecond=0)
    clock = FileClock(tmp_path / "clock", start)
    schedule = ScheduleFactory.create(
        tenant="acme", key="acme.slow", job="proc.first_attempt_hangs"
    )
    plan(schedule, start - timedelta(minutes=10), now=start)
    occurrence = Occurrence.objects.get(schedule=schedule)
    replica = clocked_replica("watched", tmp_path, clock)
    try:
        wait_until(
            lambda: (tmp_path / f"started-{occurrence.pk}").exists(),
            timeout=60,
            what=lambda: f"the replica to start the run: {log_tail(replica)}",
        )
        # 85.7 s later on the replica's clock: it renews its lease at that instant.
        later = start + timedelta(seconds=85.7)
        clock.set(later)
        wait_until(
            lambda: (Occurrence.objects.get(pk=occurrence.pk).lease_expires_at or later) > later,
            timeout=60,
            what=lambda: f"the replica to renew its lease: {log_tail(replica)}",
        )
        text = jobs_top("--once", "--actor", "ops", "--tenant", "acme", at=later)
        row = next(line for line in text.splitlines() if str(occurrence.pk) in line)
        assert row.split() == [
            "acme/acme.slow",
            str(occurrence.pk),
            "watched",
            "1",
            "1",
            "min",
            "26",
            "s",
            "default",
        ]
        assert any(line.split()[:1] == ["watched"] for line in text.splitlines()), text
    finally:
        (tmp_path / "go").touch()  # the handler finishes; the replica stops
        replica.stop()
