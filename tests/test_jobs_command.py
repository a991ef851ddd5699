"""``manage.py jobs``: every operator subcommand, its --json output and its error exits."""

from __future__ import annotations

import json
from datetime import UTC, datetime, time, timedelta
from io import StringIO

import pytest
from django.contrib.auth.models import Group, User
from django.core.management import CommandError, call_command
from django.db import DatabaseError, connection

from django_jobs import runbooks, store
from django_jobs.models import AuditRecord, Limit, Occurrence, Schedule
from django_jobs.permissions import grant_tenant
from django_jobs.registry import registry
from django_jobs.testing import FakeClock, use_clock

from .factories import T0, ScheduleFactory, dead_occurrence
from .storeutil import claim, plan

pytestmark = pytest.mark.django_db


@pytest.fixture
def ops() -> User:
    return User.objects.create_superuser("ops", "ops@example.com", "x")


@pytest.fixture
def nightly() -> Schedule:
    schedule = ScheduleFactory.create(tenant="acme", key="billing.nightly", job="billing.heartbeat")
    Limit.objects.create(schedule=schedule, keep_last=5)
    runbooks.write(schedule)
    return schedule


def jobs(*args: str) -> str:
    out = StringIO()
    call_command("jobs", *args, stdout=out)
    return out.getvalue()


def test_list_shows_what_the_actor_may_see(ops, nightly) -> None:
    assert "acme/billing.nightly" in jobs("list", "--actor", "ops")
    (row,) = json.loads(jobs("list", "--actor", "ops", "--json"))["schedules"]
    assert (row["tenant"], row["key"], row["enabled"]) == ("acme", "billing.nightly", True)
    User.objects.create_user("nobody")
    assert jobs("list", "--actor", "nobody").strip() == "no schedules you may see"


def test_inspect_a_schedule_and_an_occurrence(ops, nightly) -> None:
    occurrence = dead_occurrence(nightly)
    report = json.loads(
        jobs("inspect", "billing.nightly", "--tenant", "acme", "--actor", "ops", "--json")
    )
    assert report["schedule"] == "acme/billing.nightly"
    assert [o["state"] for o in report["recent"]] == ["dead"]
    detail = json.loads(
        jobs(
            "inspect",
            "billing.nightly",
            "--tenant",
            "acme",
            "--occurrence",
            str(occurrence.pk),
            "--actor",
            "ops",
            "--json",
        )
    )
    assert detail["last_error"] == {"type": "RuntimeError", "message": "boom"}
    assert [(a["number"], a["outcome"]) for a in detail["attempts"]] == [(1, "failed")]


def test_inspect_and_list_show_the_last_start_and_completion_read_from_its_occurrences(
    ops, nightly
) -> None:
    plan(nightly, T0, now=T0)
    (lease,) = claim("w", T0 + timedelta(minutes=1))
    store.complete([lease], now=T0 + timedelta(minutes=2))
    started, completed = str(T0 + timedelta(minutes=1)), str(T0 + timedelta(minutes=2))
    report = json.loads(
        jobs("inspect", "billing.nightly", "--tenant", "acme", "--actor", "ops", "--json")
    )
    assert (report["last_started_at"], report["last_completed_at"]) == (started, completed)
    (row,) = json.loads(jobs("list", "--actor", "ops", "--json"))["schedules"]
    assert row["last_completed_at"] == (T0 + timedelta(minutes=2)).isoformat()


def test_replay_disable_enable_run_now_purge_are_audited_with_actor_and_reason(
    ops, nightly
) -> None:
    occurrence = dead_occurrence(nightly)
    out = json.loads(
        jobs("replay", str(occurrence.pk), "--actor", "ops", "--reason", "fixed", "--json")
    )
    assert (out["state"], out["next_attempt"]) == ("scheduled", 2)
    jobs("disable", "billing.nightly", "--tenant", "acme", "--actor", "ops", "--reason", "unsafe")
    assert Schedule.objects.get().enabled is False
    jobs("enable", "billing.nightly", "--tenant", "acme", "--actor", "ops", "--reason", "safe")
    assert "planned" in jobs(
        "run-now", "billing.nightly", "--tenant", "acme", "--actor", "ops", "--reason", "rerun"
    )
    assert "purged" in jobs("purge", "billing.nightly", "--tenant", "acme", "--actor", "ops")
    audit = list(AuditRecord.objects.order_by("id").values_list("action", "actor", "reason"))
    assert audit == [
        ("replay", "ops", "fixed"),
        ("disable", "ops", "unsafe"),
        ("enable", "ops", "safe"),
        ("run_now", "ops", "rerun"),
        ("purge", "ops", "retention Limit"),
    ]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["disable", "billing.nope", "--actor", "ops", "--reason", "x"],
            "no schedule 'billing.nope'",
        ),
        (
            ["disable", "billing.nightly", "--actor", "ops", "--reason", "x"],
            "no schedule 'billing.nightly'",
        ),
        (
            ["disable", "billing.nightly", "--tenant", "acme", "--actor", "ghost", "--reason", "x"],
            "--actor 'ghost' is not a user of this project",
        ),
        (
            ["disable", "billing.nightly", "--tenant", "acme", "--actor", "ops", "--reason", " "],
            "reason: say why",
        ),
        (["replay", "not-a-uuid", "--actor", "ops", "--reason", "x"], "no occurrence 'not-a-uuid'"),
        (
            ["replay", "00000000-0000-0000-0000-000000000000", "--actor", "ops", "--reason", "x"],
            "no occurrence '00000000-0000-0000-0000-000000000000'",
        ),
    ],
)
def test_bad_arguments_exit_non_zero_with_a_clear_message_and_change_nothing(
    ops, nightly, args, message
) -> None:
    with pytest.raises(CommandError, match=message.replace(".", r"\.").replace("'", "'")):
        jobs(*args)
    assert Schedule.objects.get().enabled is True
    assert not AuditRecord.objects.exists()


def test_forbidden_actions_exit_non_zero(nightly) -> None:
    User.objects.create_user("viewer")
    from guardian.shortcuts import assign_perm

    assign_perm("django_jobs.view_schedule", User.objects.get(username="viewer"), nightly)
    with pytest.raises(CommandError, match="viewer may not disable schedule"):
        jobs("disable", "billing.nightly", "--tenant", "acme", "--actor", "viewer", "--reason", "x")
    assert Schedule.objects.get().enabled is True


def test_missing_required_arguments_exit_non_zero(ops, nightly) -> None:
    with pytest.raises(CommandError, match="--reason"):
        jobs("disable", "billing.nightly", "--actor", "ops")


def test_runbooks_export_names_the_exact_interfaces(ops, nightly) -> None:
    text = jobs("runbooks", "--key", "billing.nightly", "--actor", "ops")
    assert text.startswith("# Runbooks\n\n## acme/billing.nightly")
    assert "python manage.py jobs disable billing.nightly --tenant acme --actor" in text
    assert (
        "DJANGO_JOBS['PAUSED_SCHEDULES'] = ['acme/billing.nightly'] for tenant acme only "
        "(['acme/*'] for every schedule of tenant acme, ['billing.nightly'] for this key in "
        "every tenant, ['*'] for everything)"
    ) in text
    assert "python manage.py jobs replay <occurrence id>" in text
    assert text.count("- Already claimed occurrence:") == 3


def test_runbook_of_a_default_tenant_schedule_names_its_bare_key(ops) -> None:
    schedule = ScheduleFactory.create(key="billing.daily", job="billing.heartbeat")
    Limit.objects.create(schedule=schedule, keep_last=5)
    runbooks.write(schedule)
    text = jobs("runbooks", "--key", "billing.daily", "--actor", "ops")
    assert "DJANGO_JOBS['PAUSED_SCHEDULES'] = ['billing.daily'] (or ['*'])," in text
    assert "/billing.daily" not in text


def test_every_action_subcommand_prints_json_for_scripts(ops, nightly) -> None:
    base = ["--tenant", "acme", "--actor", "ops", "--json"]
    disabled = json.loads(jobs("disable", "billing.nightly", *base, "--reason", "x"))
    assert disabled == {"schedule": "acme/billing.nightly", "enabled": False}
    enabled = json.loads(jobs("enable", "billing.nightly", *base, "--reason", "y"))
    assert enabled == {"schedule": "acme/billing.nightly", "enabled": True}
    planned = json.loads(jobs("run-now", "billing.nightly", *base, "--reason", "z"))
    assert Occurrence.objects.get(pk=planned["occurrence"]).trigger == "manual"
    purged = json.loads(jobs("purge", "billing.nightly", *base))
    assert purged == {"schedule": "acme/billing.nightly", "deleted": 0}


def test_an_action_takes_its_instant_from_the_injected_clock(ops, nightly) -> None:
    args = ["--tenant", "acme", "--actor", "ops", "--reason", "catch up", "--json"]
    with use_clock(FakeClock(T0)):
        planned = json.loads(jobs("run-now", "billing.nightly", *args))
    assert Occurrence.objects.get(pk=planned["occurrence"]).scheduled_at == T0
    assert AuditRecord.objects.get(action="run_now").at == T0


def test_departures_are_due_by_the_injected_clocks_date() -> None:
    handler = next(h for h in registry.all() if h.departures)
    review_by = min(d.review_by for d in handler.departures)
    noon = datetime.combine(review_by, time(12), tzinfo=UTC)
    with use_clock(FakeClock(noon)):
        on_the_day = jobs("departures")
    with use_clock(FakeClock(noon + timedelta(days=1))):
        the_day_after = jobs("departures")
    assert f"REVIEW DUE job {handler.name} (" not in on_the_day
    assert f"REVIEW DUE job {handler.name} (" in the_day_after


def test_runbooks_needs_an_actor(nightly) -> None:
    with pytest.raises(CommandError, match="--actor"):
        jobs("runbooks")


def test_runbooks_exports_only_the_schedules_the_actor_may_see(nightly) -> None:
    globex = ScheduleFactory.create(tenant="globex", key="billing.nightly", job="billing.heartbeat")
    runbooks.write(globex)
    acme_ops = User.objects.create_user("acme-ops")
    group = Group.objects.create(name="acme-ops")
    acme_ops.groups.add(group)
    grant_tenant(group, "acme", "view")
    text = jobs("runbooks", "--actor", "acme-ops")
    assert "## acme/billing.nightly" in text
    assert "globex" not in text
    # Naming the other tenant shows nothing rather than its runbooks.
    assert jobs("runbooks", "--tenant", "globex", "--actor", "acme-ops") == "no schedules\n"
    User.objects.create_user("nobody")
    assert jobs("runbooks", "--actor", "nobody") == "no schedules\n"


def test_a_database_error_looking_up_an_occurrence_is_not_reported_as_no_occurrence(
    ops, nightly
) -> None:
    occurrence = dead_occurrence(nightly)
    table = connection.ops.quote_name(Occurrence._meta.db_table)
    with connection.cursor() as cursor:  # undone with the test's transaction
        cursor.execute(f"ALTER TABLE {table} RENAME TO django_jobs_occurrence_gone")
    with pytest.raises(DatabaseError, match="django_jobs_occurrence"):
        jobs(
            "inspect", "billing.nightly", "--tenant", "acme", "--occurrence",
            str(occurrence.pk), "--actor", "ops",
        )  # fmt: skip
