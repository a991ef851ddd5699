"""Issue #33, finding 5: retention changes are audited.

Cutting a schedule's ``Limit`` from ``keep_last=1000`` to 1 wrote no audit record, and
``schedule.created`` did not record the retention: the purge that followed deleted the
history without a trace of why. Every writer of a Limit (``upsert_schedule``, the console's
form, ``jobs sync``, the policy records of enqueued work) now records it, and a purge names
the Limit it applied.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from django_jobs import Retry, enqueue, services, store
from django_jobs.clock import use_clock
from django_jobs.models import AuditRecord, Limit, Occurrence, Schedule
from django_jobs.registry import JobPolicies, registry
from django_jobs.testing import FakeClock

from .console_forms import form_data as console_form
from .factories import T0, declaration
from .storeutil import claim, plan

pytestmark = pytest.mark.django_db

KEEP_1000 = {"keep_for": None, "keep_last": 1000}
KEEP_1 = {"keep_for": None, "keep_last": 1}


def retention_changes(schedule: Schedule) -> list[AuditRecord]:
    return list(
        AuditRecord.objects.filter(
            schedule_id=schedule.pk, action="schedule.retention_changed"
        ).order_by("at", "id")
    )


def finish(schedule: Schedule, count: int) -> None:
    """``count`` completed occurrences of ``schedule``, a minute apart from T0."""
    for i in range(count):
        instant = T0 + timedelta(minutes=i)
        plan(schedule, instant, now=instant)
        store.complete(claim("w", instant), now=instant)
    assert Occurrence.objects.filter(schedule=schedule, state="completed").count() == count


def test_cutting_keep_last_from_1000_to_1_is_audited_and_the_purge_names_the_limit(root) -> None:
    acme = declaration("acme.report", tenant="acme", retention=1000)
    row = services.upsert_schedule(acme, actor=root, reason="tenant signed up", now=T0)
    finish(row, 3)

    cut = declaration("acme.report", tenant="acme", retention=1)
    services.upsert_schedule(cut, actor=root, reason="save space", now=T0 + timedelta(hours=1))
    deleted = services.purge(row, actor=root, now=T0 + timedelta(hours=2))

    assert deleted == 2
    (change,) = retention_changes(row)
    assert (change.actor, change.actor_id, change.reason) == ("root", str(root.pk), "save space")
    assert (change.before, change.after) == (KEEP_1000, KEEP_1)
    purge = AuditRecord.objects.get(schedule_id=row.pk, action="purge")
    assert purge.after == {"deleted": 2, **KEEP_1}
    assert purge.at > change.at


def test_schedule_created_records_the_retention(root) -> None:
    acme = declaration("acme.report", tenant="acme", retention=1000)
    row = services.upsert_schedule(acme, actor=root, reason="tenant signed up", now=T0)
    created = AuditRecord.objects.get(schedule_id=row.pk, action="schedule.created")
    assert {k: created.after[k] for k in KEEP_1000} == KEEP_1000
    assert retention_changes(row) == []  # the creation's own record says it


def test_an_unchanged_retention_writes_no_record(root) -> None:
    acme = declaration("acme.report", tenant="acme", retention=timedelta(days=90))
    row = services.upsert_schedule(acme, actor=root, reason="signed up", now=T0)
    services.upsert_schedule(acme, actor=root, reason="again", now=T0 + timedelta(hours=1))
    assert retention_changes(row) == []


def test_a_declared_retention_cut_is_audited_by_sync() -> None:
    services.sync_schedules([declaration(retention=1000)], now=T0)
    row = Schedule.objects.get(key="billing.nightly")
    created = AuditRecord.objects.get(schedule_id=row.pk, action="schedule.created")
    assert (created.after["keep_for"], created.after["keep_last"]) == (None, 1000)

    report = services.sync_schedules([declaration(retention=1)], now=T0 + timedelta(days=1))

    assert report.updated == ["billing.nightly"]
    (change,) = retention_changes(row)
    assert (change.actor, change.reason) == ("django_jobs.sync", "declared in code")
    assert (change.before, change.after) == (KEEP_1000, KEEP_1)
    assert Limit.objects.get(schedule=row).keep_last == 1


def test_a_cut_from_keep_for_to_keep_last_shows_both_columns() -> None:
    services.sync_schedules([declaration(retention=timedelta(days=90))], now=T0)
    services.sync_schedules([declaration(retention=5)], now=T0 + timedelta(days=1))
    (change,) = retention_changes(Schedule.objects.get())
    ninety_days = timedelta(days=90).total_seconds()
    assert change.before == {"keep_for": ninety_days, "keep_last": None}
    assert change.after == {"keep_for": None, "keep_last": 5}


def test_the_retention_of_enqueued_work_is_recorded_and_its_change_audited(registered) -> None:
    def send(run: Any) -> None:
        return None

    def policies(retention: int) -> JobPolicies:
        return JobPolicies(retry=Retry(max_attempts=1), retention=retention, owner="billing")

    registered("t.keep", send, policies=policies(1000))
    with use_clock(FakeClock(T0)):
        enqueue("t.keep", tenant="acme")
    record = Schedule.objects.get(tenant="acme", job="t.keep")
    created = AuditRecord.objects.get(schedule_id=record.pk, action="schedule.created")
    assert (created.actor, created.after["keep_last"]) == ("django_jobs.enqueue", 1000)

    registry.unregister("t.keep")
    registry.register("t.keep", send, policies=policies(1))  # the next release
    services.sync_schedules([], now=T0 + timedelta(days=1))

    (change,) = retention_changes(record)
    assert change.actor == "django_jobs.sync"
    assert (change.before, change.after) == (KEEP_1000, KEEP_1)
    assert "t.keep" in change.reason


def form_data(**fields: Any) -> dict[str, Any]:
    """The console's form with a retention of the last 1,000 runs (no ``keep_for``)."""
    data = console_form(**{"keep_last": "1000", **fields})
    del data["keep_for"]
    return data


def test_a_retention_cut_in_the_admin_is_audited_with_the_user_and_reason(root) -> None:
    client = Client()
    client.force_login(root)
    with use_clock(FakeClock(T0)):
        created = client.post(reverse("admin:django_jobs_schedule_add"), form_data())
    assert created.status_code == 302, created.content.decode()[:2000]
    row = Schedule.objects.get(tenant="acme", key="acme.report")
    edit = reverse("admin:django_jobs_schedule_edit", args=[row.pk])

    with use_clock(FakeClock(T0 + timedelta(hours=1))):
        changed = client.post(edit, form_data(keep_last="1", reason="only the last run matters"))

    assert changed.status_code == 302, changed.content.decode()[:2000]
    (change,) = retention_changes(row)
    assert (change.actor, change.reason) == ("root", "only the last run matters")
    assert (change.before, change.after) == (KEEP_1000, KEEP_1)
    assert Occurrence.objects.count() == 0
