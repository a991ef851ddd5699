"""Writing declared schedules to Schedule rows: create, update with audit, retire."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from io import StringIO

import pytest
from django.contrib.auth.models import Group, User
from django.core.management import CommandError, call_command

from django_jobs import after, cron, every, schedule
from django_jobs.models import AuditRecord, Limit, Origin, Schedule, ScheduleStatus
from django_jobs.permissions import grant_tenant
from django_jobs.services import sync_schedules, upsert_schedule
from django_jobs.worker.planning import plan_due

from .factories import OWNERS, T0, ScheduleFactory, declaration

pytestmark = pytest.mark.django_db


def nightly(**fields):
    return declaration(fields.pop("key", "billing.nightly"), **fields)


def test_sync_creates_the_record_with_every_declared_field_and_its_limit() -> None:
    report = sync_schedules([nightly(misfire="replay_once")], now=T0)
    assert report.created == ["billing.nightly"]
    row = Schedule.objects.get(key="billing.nightly")
    assert (row.cron, row.time_zone, row.misfire, row.origin) == (
        "0 9 * * *",
        "America/New_York",
        "replay_once",
        Origin.CODE,
    )
    # Due for planning at its first instant, 09:00 New York (14:00Z): no plan pass before.
    assert (row.created_at, row.next_due_at) == (T0, datetime(2026, 3, 1, 14, 0, tzinfo=UTC))
    assert Limit.objects.get(schedule=row).keep_for == timedelta(days=90)
    assert AuditRecord.objects.get(target_id=str(row.pk)).action == "schedule.created"


def test_syncing_again_changes_nothing() -> None:
    sync_schedules([nightly()], now=T0)
    report = sync_schedules([nightly()], now=T0 + timedelta(hours=1))
    assert report.unchanged == ["billing.nightly"]
    assert AuditRecord.objects.count() == 1


def test_a_timing_change_is_updated_and_audited_with_before_and_after() -> None:
    sync_schedules([nightly()], now=T0)
    later = T0 + timedelta(days=1)
    london = cron(
        "30 8 * * *", zone="Europe/London", skipped="shift", repeated="first", reason="London"
    )
    report = sync_schedules([nightly(timing=london)], now=later)
    assert report.updated == ["billing.nightly"]
    row = Schedule.objects.get()
    assert (row.cron, row.time_zone, row.next_due_at) == ("30 8 * * *", "Europe/London", later)
    audit = AuditRecord.objects.get(action="schedule.timing_changed")
    assert audit.before == {
        "cron": "0 9 * * *",
        "time_zone": "America/New_York",
        "zone_reason": "statements at 09:00 for readers in New York",
    }
    assert audit.after == {
        "cron": "30 8 * * *",
        "time_zone": "Europe/London",
        "zone_reason": "London",
    }
    assert audit.actor == "django_jobs.sync"


def test_a_schedule_removed_from_code_is_retired_never_deleted() -> None:
    sync_schedules([nightly(), nightly(key="billing.weekly")], now=T0)
    report = sync_schedules([nightly()], now=T0 + timedelta(days=1))
    assert report.retired == ["billing.weekly"]
    assert Schedule.objects.get(key="billing.weekly").status == ScheduleStatus.RETIRED
    assert AuditRecord.objects.filter(action="schedule.retired").count() == 1


def test_runtime_schedules_are_left_alone_by_sync() -> None:
    runtime = ScheduleFactory.create(tenant="acme", key="acme.nightly")
    sync_schedules([nightly()], now=T0)
    runtime.refresh_from_db()
    assert (runtime.status, runtime.origin) == (ScheduleStatus.ACTIVE, Origin.RUNTIME)


def test_after_counts_from_the_records_creation_and_keeps_it_on_resync() -> None:
    sync_schedules([nightly(key="once", timing=after(timedelta(hours=2)))], now=T0)
    sync_schedules(
        [nightly(key="once", timing=after(timedelta(hours=2)))], now=T0 + timedelta(days=1)
    )
    assert Schedule.objects.get(key="once").run_at == T0 + timedelta(hours=2)


def test_a_runtime_per_tenant_schedule_is_validated_like_a_declared_one_and_audited() -> None:
    declaration = schedule(
        "acme.statements",
        tenant="acme",
        job="billing.send_statements",
        timing=every(timedelta(days=1)),
        retention=30,
        status="active",
        register=False,
        **OWNERS,
    )
    alice = User.objects.create_user("alice")
    operators = Group.objects.create(name="acme-operators")
    alice.groups.add(operators)
    grant_tenant(operators, "acme", "change")  # may create and change acme's schedules
    row = upsert_schedule(declaration, actor=alice, reason="acme turned on statements", now=T0)
    assert (row.tenant, row.origin) == ("acme", Origin.RUNTIME)
    audit = AuditRecord.objects.get(target_id=str(row.pk))
    assert (audit.actor, audit.reason, audit.tenant) == (
        "alice",
        "acme turned on statements",
        "acme",
    )
    assert Limit.objects.get(schedule=row).keep_last == 30
    # every(1 day) is anchored to the epoch: its first instant after creation is midnight UTC.
    plan_due(now=T0 + timedelta(hours=12))
    occurrence = row.occurrences.get()
    assert (occurrence.tenant, occurrence.scheduled_at) == ("acme", T0 + timedelta(hours=12))


def test_jobs_sync_command_reports_what_it_did(capsys) -> None:
    call_command("jobs", "sync")
    out = capsys.readouterr().out
    # The example project's billing app declares four schedules.
    assert "created: billing.heartbeat" in out
    assert out.strip().endswith(
        "schedules synced: 4 created, 0 updated, 0 retired, 0 unchanged; runbooks written for 4"
    )
    call_command("jobs", "sync", "--json")
    report = json.loads(capsys.readouterr().out)
    assert report["unchanged"] == sorted(report["unchanged"])
    assert len(report["unchanged"]) == 4
    assert report["runbooks"] == []  # current already: nothing rewritten


def test_the_example_tenant_command_creates_a_runtime_schedule_in_the_tenants_zone(capsys) -> None:
    call_command("billing_operator", stdout=StringIO())  # the user it acts as
    call_command("billing_enable_tenant", "acme", "--zone", "Europe/Berlin")
    row = Schedule.objects.get(tenant="acme", key="billing.tenant-statements")
    assert (row.origin, row.time_zone, row.cron) == (Origin.RUNTIME, "Europe/Berlin", "0 9 * * *")
    assert "runs daily at 09:00 Europe/Berlin" in capsys.readouterr().out
    with pytest.raises(CommandError, match=r"timing\.zone"):
        call_command("billing_enable_tenant", "globex", "--zone", "Mars/Base")
