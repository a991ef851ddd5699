"""Arguments on schedules: declared with ``schedule(..., args={...})`` and checked then, kept on
the record, snapshotted on each occurrence when it is planned, handed to the handler as
``run.args``; a change of them is audited and never reaches an occurrence already planned.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.db import connection

from django_jobs import every, services
from django_jobs.declarations import InvalidSchedule
from django_jobs.exceptions import JobsError
from django_jobs.models import AuditRecord, Occurrence, Schedule
from django_jobs.registry import Registry
from django_jobs.services import sync_schedules
from django_jobs.testing import FakeClock, run_due, use_clock
from django_jobs.validation import ARGS_MAX_BYTES

from .factories import T0, ScheduleFactory, declaration
from .storeutil import plan

pytestmark = pytest.mark.django_db

STATEMENTS = {"customer": "acme", "accounts": [3, 5], "dry_run": False}
EVERY_MINUTE = every(timedelta(minutes=1), anchor=T0)


def statements(**fields: Any):
    return declaration("billing.statements", job="billing.statements", **fields)


def recording() -> tuple[Registry, list[dict[str, Any]]]:
    """A registry whose ``billing.statements`` handler records the arguments of each run."""
    seen: list[dict[str, Any]] = []
    jobs = Registry()
    jobs.register("billing.statements", lambda run: seen.append(run.args))
    return jobs, seen


# --- declared and checked -------------------------------------------------------------------


def test_declared_arguments_are_kept_as_the_database_gives_them_back() -> None:
    declared = statements(args={"accounts": (3, 5), "limit": 2.5, "note": None})
    assert declared.args == {"accounts": [3, 5], "limit": 2.5, "note": None}
    assert statements().args == {}


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["acme"], "must be a JSON object (a dict with str keys), got list"),
        ({"since": datetime(2026, 1, 1, tzinfo=UTC)}, "args['since']: must be JSON"),
        ({"rate": float("nan")}, "args['rate']: must be a finite number, got nan"),
        ({"ids": [1, {2: "x"}]}, "args['ids'][1]: keys must be str, got int 2"),
        ({"name": "a\x00b"}, "args['name']: must not contain NUL characters"),
        ({"blob": "x" * ARGS_MAX_BYTES}, f"at most {ARGS_MAX_BYTES} bytes as JSON"),
    ],
)
def test_arguments_json_cannot_hold_are_refused_naming_the_schedule_and_the_field(
    args: object, says: str
) -> None:
    with pytest.raises(InvalidSchedule) as refused:
        statements(args=args)
    assert refused.value.field == "args"
    assert says in str(refused.value)
    assert str(refused.value).startswith("schedule 'billing.statements': args: ")


def test_arguments_are_checked_after_the_fields_before_them() -> None:
    with pytest.raises(InvalidSchedule) as refused:
        statements(operating_owner="", args=["acme"])
    assert refused.value.field == "operating_owner"


# --- kept, snapshotted, run -----------------------------------------------------------------


def test_a_scheduled_job_receives_its_declared_arguments(clock: FakeClock) -> None:
    sync_schedules([statements(timing=EVERY_MINUTE, args=STATEMENTS)], now=T0)
    assert Schedule.objects.get().args == STATEMENTS
    jobs, seen = recording()
    clock.set(T0)
    run_due(clock, jobs=jobs)
    assert seen == [STATEMENTS]
    assert Occurrence.objects.get(scheduled_at=T0).args == STATEMENTS


def test_an_occurrence_planned_before_an_argument_change_runs_with_the_old_ones(
    clock: FakeClock,
) -> None:
    """T0 + 1 min is planned ahead at T0 + 45 s (within half of ``PLAN_AHEAD_SECONDS``, 30
    s); the arguments change at T0 + 50 s; that occurrence runs with the old ones, the next
    instant with the new."""
    sync_schedules([statements(timing=EVERY_MINUTE, args={"customer": "acme"})], now=T0)
    jobs, seen = recording()
    for at in (T0, T0 + timedelta(seconds=45)):
        clock.set(at)
        run_due(clock, jobs=jobs)
    planned_ahead = Occurrence.objects.get(scheduled_at=T0 + timedelta(minutes=1))
    assert planned_ahead.args == {"customer": "acme"}

    changed_at = T0 + timedelta(seconds=50)
    report = sync_schedules(
        [statements(timing=EVERY_MINUTE, args={"customer": "globex"})], now=changed_at
    )
    assert report.updated == ["billing.statements"]
    assert Occurrence.objects.filter(pk=planned_ahead.pk).exists()  # not withdrawn

    for minute in (1, 2):
        clock.set(T0 + timedelta(minutes=minute))
        run_due(clock, jobs=jobs)
    assert seen == [{"customer": "acme"}, {"customer": "acme"}, {"customer": "globex"}]


def test_an_argument_change_is_audited_with_the_arguments_before_and_after() -> None:
    sync_schedules([statements(args={"customer": "acme"})], now=T0)
    sync_schedules([statements(args={"customer": "globex"})], now=T0 + timedelta(hours=1))
    changed = AuditRecord.objects.get(action="schedule.arguments_changed")
    assert (changed.before, changed.after) == (
        {"args": {"customer": "acme"}},
        {"args": {"customer": "globex"}},
    )
    assert changed.actor == "django_jobs.sync"
    # The same arguments again (key order aside): nothing changes, nothing is audited.
    report = sync_schedules([statements(args={"customer": "globex"})], now=T0 + timedelta(hours=2))
    assert report.unchanged == ["billing.statements"]


def test_a_timing_and_argument_change_together_is_a_timing_change() -> None:
    sync_schedules([statements(args={"customer": "acme"})], now=T0)
    sync_schedules(
        [statements(timing=EVERY_MINUTE, args={"customer": "globex"})],
        now=T0 + timedelta(hours=1),
    )
    changed = AuditRecord.objects.get(action="schedule.timing_changed")
    assert changed.after["args"] == {"customer": "globex"}


def test_an_occurrence_inserted_by_the_previous_release_has_no_arguments() -> None:
    """A replica of the release before arguments, during a rolling deploy, plans without the
    column: the database's default fills it in, and the run gets ``{}``."""
    schedule = ScheduleFactory.create(args={"customer": "acme"})
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO django_jobs_occurrence (id, schedule_id, tenant, scheduled_at, state,"
            " skip_reason, trigger, due_at, lease_owner, fencing_token, attempts, failures,"
            " last_error_type, last_error_message) VALUES (gen_random_uuid(), %s, '', %s,"
            " 'scheduled', '', 'schedule', %s, '', 0, 0, 0, '', '')",
            [schedule.pk, T0, T0],
        )
    assert Occurrence.objects.get().args == {}


def test_store_plan_snapshots_the_schedules_arguments() -> None:
    schedule = ScheduleFactory.create(args={"customer": "acme"})
    plan(schedule, T0, now=T0)
    assert Occurrence.objects.get(scheduled_at=T0).args == {"customer": "acme"}


# --- run-now with arguments of its own ------------------------------------------------------


@pytest.fixture
def ops():
    from django.contrib.auth.models import User

    return User.objects.create_superuser("ops", "ops@example.com", "x")


def jobs(*argv: str) -> str:
    out = StringIO()
    call_command("jobs", *argv, stdout=out)
    return out.getvalue()


def test_run_now_with_overriding_arguments_runs_with_them_and_is_audited_with_them(
    ops, clock: FakeClock, registered
) -> None:
    registered("billing.statements", lambda run: None, runtime=True)  # offered at run time
    sync_schedules([statements(timing=EVERY_MINUTE, args={"customer": "acme"})], now=T0)
    clock.set(T0 + timedelta(seconds=5))
    with use_clock(clock):
        planned = json.loads(
            jobs(
                "run-now",
                "billing.statements",
                "--actor",
                "ops",
                "--reason",
                "statement for globex, resent",
                "--args",
                '{"customer": "globex", "accounts": [7]}',
                "--json",
            )
        )
    override = {"customer": "globex", "accounts": [7]}
    assert Occurrence.objects.get(pk=planned["occurrence"]).args == override
    audited = AuditRecord.objects.get(action="run_now")
    assert (audited.actor, audited.reason) == ("ops", "statement for globex, resent")
    assert audited.after["args"] == override
    jobs_, seen = recording()
    run_due(clock, jobs=jobs_)
    assert override in seen


def test_run_now_without_arguments_runs_with_the_schedules(ops, clock: FakeClock) -> None:
    schedule = ScheduleFactory.create(key="billing.statements", args={"customer": "acme"})
    occurrence = services.run_now(schedule, actor=ops, reason="again", now=T0)
    assert occurrence.args == {"customer": "acme"}
    assert "args" not in AuditRecord.objects.get(action="run_now").after


def test_run_now_arguments_json_cannot_hold_are_refused_and_nothing_is_planned(ops) -> None:
    schedule = ScheduleFactory.create(key="billing.statements")
    with pytest.raises(JobsError, match=r"run-now of schedule .*: args: args\['rate'\]: must be"):
        services.run_now(schedule, actor=ops, reason="again", now=T0, args={"rate": float("inf")})
    with pytest.raises(CommandError, match="--args: not JSON"):
        jobs("run-now", "billing.statements", "--actor", "ops", "--reason", "x", "--args", "{")
    with pytest.raises(CommandError, match="--args: must be a JSON object"):
        jobs("run-now", "billing.statements", "--actor", "ops", "--reason", "x", "--args", "[1]")
    assert not Occurrence.objects.exists()
    assert not AuditRecord.objects.filter(action="run_now").exists()


def test_a_run_time_schedules_arguments_are_upserted_and_their_change_audited(ops) -> None:
    """``upsert_schedule`` (a schedule per customer, made at run time) keeps arguments as
    ``jobs sync`` does."""
    made = services.upsert_schedule(
        declaration("acme.statements", tenant="acme", args={"customer": "acme"}),
        actor=ops,
        reason="new",
        now=T0,
    )
    assert made.args == {"customer": "acme"}
    services.upsert_schedule(
        declaration("acme.statements", tenant="acme", args={"customer": "acme", "copies": 2}),
        actor=ops,
        reason="two copies",
        now=T0 + timedelta(hours=1),
    )
    changed = AuditRecord.objects.get(action="schedule.arguments_changed")
    assert (changed.actor, changed.after) == ("ops", {"args": {"customer": "acme", "copies": 2}})


# --- shown to operators, redacted -----------------------------------------------------------

SECRET_ARGS = {"customer": "acme", "api_key": "sk-live-4242", "accounts": [3]}


def test_jobs_inspect_shows_a_schedules_and_an_occurrences_arguments_redacted(ops) -> None:
    schedule = ScheduleFactory.create(key="billing.statements", args=SECRET_ARGS)
    (occurrence_id,) = plan(schedule, T0, now=T0)
    shown = json.loads(jobs("inspect", "billing.statements", "--actor", "ops", "--json"))
    assert shown["args"] == '{"accounts": [3], "api_key": "[redacted]", "customer": "acme"}'
    detail = jobs(
        "inspect", "billing.statements", "--actor", "ops", "--occurrence", str(occurrence_id)
    )
    assert 'args: {"accounts": [3], "api_key": "[redacted]", "customer": "acme"}' in detail
    assert "sk-live-4242" not in detail


@pytest.mark.parametrize("page", ["schedule", "occurrence", "auditrecord"])
def test_the_admin_shows_arguments_redacted(ops, client, page: str, registered) -> None:
    registered("tests.noop", lambda run: None, runtime=True)  # run-now arguments: offered jobs
    schedule = ScheduleFactory.create(key="billing.statements", args={"customer": "acme"})
    occurrence = services.run_now(schedule, actor=ops, reason="resend", now=T0, args=SECRET_ARGS)
    audited = AuditRecord.objects.get(action="run_now")
    pk = {"schedule": schedule.pk, "occurrence": occurrence.pk, "auditrecord": audited.pk}[page]
    client.force_login(ops)
    html = client.get(f"/admin/django_jobs/{page}/{pk}/change/").content.decode()
    assert "sk-live-4242" not in html
    assert "[redacted]" in html or page == "schedule"
    assert "acme" in html


# --- results: what a handler returned, kept with its completion and shown redacted ----------


def test_a_handlers_result_is_kept_and_shown_redacted_in_inspect_and_the_admin(ops, client) -> None:
    jobs_ = Registry()
    jobs_.register("billing.send", lambda run: {"sent": 3, "token": "sk-live-4242"})
    schedule = ScheduleFactory.create(key="billing.statements", job="billing.send")
    (occurrence_id,) = plan(schedule, T0, now=T0)
    run_due(FakeClock(T0), jobs=jobs_)
    occurrence = Occurrence.objects.get(pk=occurrence_id)
    assert occurrence.result == {"sent": 3, "token": "sk-live-4242"}

    detail = jobs(
        "inspect", "billing.statements", "--actor", "ops", "--occurrence", str(occurrence_id)
    )
    assert 'result: {"sent": 3, "token": "[redacted]"}' in detail
    client.force_login(ops)
    html = client.get(f"/admin/django_jobs/occurrence/{occurrence_id}/change/").content.decode()
    assert "sk-live-4242" not in html
    assert "&quot;sent&quot;: 3" in html


def test_a_result_returned_after_run_atomic_is_kept_with_its_completion(ops) -> None:
    def atomic_then_return(run):
        with run.atomic():
            pass
        return ["done", run.attempt]

    jobs_ = Registry()
    jobs_.register("billing.send", atomic_then_return)
    schedule = ScheduleFactory.create(key="billing.statements", job="billing.send")
    (occurrence_id,) = plan(schedule, T0, now=T0)
    run_due(FakeClock(T0), jobs=jobs_)
    occurrence = Occurrence.objects.get(pk=occurrence_id)
    assert (occurrence.state, occurrence.result) == ("completed", ["done", 1])
