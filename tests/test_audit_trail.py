"""Audit that cannot vanish or lie.

Every record carries the schedule it concerns (``schedule_id``: its own, or its occurrence's)
and the acting user's id; the admin scopes and filters by those columns, never by lists of
ids, so a big occurrence table hides nothing; disable and enable record what the row held.
"""

from __future__ import annotations

import importlib
from datetime import timedelta

import pytest
from django.contrib.auth.models import Group, User
from django.db import connection
from django.test import Client, override_settings
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from django_jobs import services, store
from django_jobs.models import AuditRecord, Occurrence, Schedule, ScheduleStatus
from django_jobs.permissions import grant_tenant
from django_jobs.worker.planning import plan_due

from .factories import T0, ScheduleFactory
from .storeutil import claim

pytestmark = pytest.mark.django_db

OCCURRENCES = 20_000
LATER = T0 + timedelta(days=30)


def insert_completed_occurrences(schedules: list[Schedule], count: int) -> None:
    """``count`` completed occurrences shared among ``schedules``, in one statement, one a
    minute on both sides of T0 (so the earliest and the latest are far apart in any order)."""
    ids = [s.pk for s in schedules]
    tenants = [s.tenant for s in schedules]
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO django_jobs_occurrence (
                id, schedule_id, tenant, scheduled_at, state, skip_reason, trigger, due_at,
                lease_owner, lease_expires_at, fencing_token, attempts, failures, started_at,
                finished_at, last_error_type, last_error_message)
            SELECT gen_random_uuid(), (%(ids)s::bigint[])[g %% %(n)s + 1],
                   (%(tenants)s::text[])[g %% %(n)s + 1], at, 'completed', '', 'schedule', at,
                   '', NULL, 1, 1, 0, at, at, '', ''
            FROM generate_series(1, %(count)s) AS g,
                 LATERAL (SELECT %(t0)s::timestamptz + (g - %(count)s / 2) * interval '1 minute'
                          AS at) AS instant
            """,
            {"ids": ids, "tenants": tenants, "n": len(ids), "count": count, "t0": T0},
        )


def replay_the_ends_and_the_middle(schedule: Schedule, root: User) -> list[str]:
    """Replay the earliest, the middle and the latest occurrence, and run one now: the ids
    of the four records' targets."""
    rows = Occurrence.objects.filter(schedule=schedule).order_by("scheduled_at")
    count = rows.count()
    targets = [rows[0], rows[count // 2], rows[count - 1]]
    for occurrence in targets:
        services.replay(occurrence, actor=root, reason="the partner lost it", now=LATER)
    extra = services.run_now(schedule, actor=root, reason="month end", now=LATER)
    return [str(o.pk) for o in [*targets, extra]]


def logged_in(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


AUDIT_LIST = "/admin/django_jobs/auditrecord/"


def test_a_superuser_sees_every_replay_and_run_now_among_20000_occurrences() -> None:
    """Regression: the list matched ``target_id`` against at most 10,000 occurrence ids in
    no order: with 10,505 occurrences a superuser saw 4 of 5 records."""
    acme = ScheduleFactory.create(tenant="acme", key="billing.nightly")
    globex = ScheduleFactory.create(tenant="globex", key="billing.nightly")
    insert_completed_occurrences([acme, globex], OCCURRENCES)
    root = User.objects.create_superuser("root")
    targets = {s.tenant: replay_the_ends_and_the_middle(s, root) for s in (acme, globex)}
    assert Occurrence.objects.count() == OCCURRENCES + 2  # and a run-now each
    client = logged_in(root)
    with CaptureQueriesContext(connection) as queries:
        page = client.get(AUDIT_LIST).content.decode()
    for target in [*targets["acme"], *targets["globex"]]:
        assert target in page
    # Filtered by columns: the occurrence table is not read, and no id list is sent.
    sql = [q["sql"] for q in queries.captured_queries]
    assert not [q for q in sql if "django_jobs_occurrence" in q]
    assert sum(len(q) for q in sql) < 20_000


def test_each_schedule_page_shows_its_own_records_and_its_occurrences() -> None:
    acme = ScheduleFactory.create(tenant="acme", key="billing.nightly")
    globex = ScheduleFactory.create(tenant="globex", key="billing.nightly")
    insert_completed_occurrences([acme, globex], OCCURRENCES)
    root = User.objects.create_superuser("root")
    targets = {s.tenant: replay_the_ends_and_the_middle(s, root) for s in (acme, globex)}
    client = logged_in(root)
    for mine, theirs in ((acme, globex), (globex, acme)):
        page = client.get(reverse("admin:django_jobs_schedule_change", args=[mine.pk]))
        text = page.content.decode()
        assert all(t in text for t in targets[mine.tenant])
        assert not any(t in text for t in targets[theirs.tenant])
        # The link to every record of this schedule, and what it lists.
        link = f"{AUDIT_LIST}?schedule_id__exact={mine.pk}"
        assert link in text
        listed = client.get(link).content.decode()
        assert all(t in listed for t in targets[mine.tenant])
        assert not any(t in listed for t in targets[theirs.tenant])


def test_tenant_staff_see_their_tenants_records_only() -> None:
    acme = ScheduleFactory.create(tenant="acme", key="billing.nightly")
    globex = ScheduleFactory.create(tenant="globex", key="billing.nightly")
    insert_completed_occurrences([acme, globex], 2_000)
    root = User.objects.create_superuser("root")
    targets = {s.tenant: replay_the_ends_and_the_middle(s, root) for s in (acme, globex)}
    alice = User.objects.create_user("alice", is_staff=True)
    group = Group.objects.create(name="acme-viewers")
    alice.groups.add(group)
    grant_tenant(group, "acme", "view")
    page = logged_in(alice).get(AUDIT_LIST).content.decode()
    assert all(t in page for t in targets["acme"])
    assert not any(t in page for t in targets["globex"])


def retired_one_off() -> Schedule:
    """A one-off of acme that retired at T0: retention removes it a day later."""
    return ScheduleFactory.create(
        tenant="acme",
        key="acme.welcome",
        timing_kind="at",
        run_at=T0,
        status=ScheduleStatus.RETIRED,
        retired_at=T0,
    )


def test_records_of_a_removed_schedule_stay_visible() -> None:
    """Regression: retention's ``schedule.removed`` records were hidden: their schedule was
    gone, so no visible schedule id matched them."""
    gone = retired_one_off()
    removed = store.remove_retired_one_offs(
        now=LATER, keep_without_duration=timedelta(days=1), batch_size=10
    )
    assert removed == [(gone.pk, "acme", "acme.welcome")]
    root = User.objects.create_superuser("root")
    alice = User.objects.create_user("alice", is_staff=True)
    group = Group.objects.create(name="acme-viewers")
    alice.groups.add(group)
    grant_tenant(group, "acme", "view")
    for user in (root, alice):
        page = logged_in(user).get(AUDIT_LIST).content.decode()
        assert '<td class="field-action">schedule.removed</td>' in page
    record = AuditRecord.objects.get(action="schedule.removed")
    assert (record.schedule_id, record.tenant, record.actor_id) == (gone.pk, "acme", None)


def test_the_record_keeps_the_users_id_so_a_rename_does_not_reattribute_it() -> None:
    """Regression: records kept only a username: renamed, or given to someone else, it
    re-attributed history."""
    schedule = ScheduleFactory.create(tenant="acme")
    first = User.objects.create_superuser("alice")
    services.disable(schedule, actor=first, reason="partner outage", now=T0)
    first.username = "alice-who-left"
    first.save()
    newcomer = User.objects.create_superuser("alice")
    record = AuditRecord.objects.get(action="disable")
    assert (record.actor, record.actor_id) == ("alice", str(first.pk))
    assert record.actor_id != str(newcomer.pk)
    client = logged_in(newcomer)
    listed = client.get(AUDIT_LIST).content.decode()
    assert f'<td class="field-actor_id">{first.pk}</td>' in listed
    page = client.get(reverse("admin:django_jobs_schedule_change", args=[schedule.pk]))
    assert f"alice disable: partner outage (user id {first.pk})" in page.content.decode()


def test_disabling_twice_keeps_the_first_reason_in_the_row_and_the_audit() -> None:
    """Regression: the second disable recorded ``before={"enabled": True}`` and overwrote who
    disabled it and why."""
    schedule = ScheduleFactory.create()
    alice = User.objects.create_superuser("alice")
    bob = User.objects.create_superuser("bob")
    services.disable(schedule, actor=alice, reason="partner outage", now=T0)
    services.disable(schedule, actor=bob, reason="still down", now=T0 + timedelta(hours=1))
    first, again = AuditRecord.objects.order_by("id")
    held = {
        "enabled": False,
        "disabled_by": "alice",
        "disabled_reason": "partner outage",
        "disabled_at": T0.isoformat(),
    }
    assert again.before == held
    assert (again.action, again.actor, again.reason) == ("disable.repeated", "bob", "still down")
    assert again.after == {**held, "cancelled": []}
    assert first.before == {
        "enabled": True,
        "disabled_by": "",
        "disabled_reason": "",
        "disabled_at": None,
    }
    assert first.after == {**held, "cancelled": []}
    schedule.refresh_from_db()
    assert (schedule.disabled_by, schedule.disabled_reason) == ("alice", "partner outage")


def test_enables_before_is_what_the_row_held() -> None:
    """Regression: enable's ``before`` left out who disabled the schedule and when."""
    schedule = ScheduleFactory.create()
    alice = User.objects.create_superuser("alice")
    services.disable(schedule, actor=alice, reason="partner outage", now=T0)
    services.enable(schedule, actor=alice, reason="partner back", now=T0 + timedelta(hours=2))
    record = AuditRecord.objects.get(action="enable")
    assert record.before == {
        "enabled": False,
        "disabled_by": "alice",
        "disabled_reason": "partner outage",
        "disabled_at": T0.isoformat(),
    }
    assert record.after == {
        "enabled": True,
        "disabled_by": "",
        "disabled_reason": "",
        "disabled_at": None,
    }


def test_every_writer_records_the_schedule_and_only_users_have_an_id() -> None:
    root = User.objects.create_superuser("root")
    schedule = ScheduleFactory.create(tenant="acme", next_due_at=T0)
    occurrence = services.run_now(schedule, actor=root, reason="now", now=T0)
    store.complete(claim(owner="w", now=T0, lease_for=timedelta(seconds=30), limit=1), now=T0)
    services.replay(occurrence, actor=root, reason="again", now=T0)
    store.record_skip_summary(schedule, now=T0, count=3, first=T0, last=T0)
    one_off = ScheduleFactory.create(tenant="acme", key="once", timing_kind="at", run_at=T0)
    store.plan([store.PlannedOccurrence(one_off.pk, "acme", "once", T0)], now=T0)
    Occurrence.objects.filter(schedule=one_off).update(state="completed")
    assert store.retire_one_offs(now=T0) == [(one_off.pk, "acme", "once")]
    rows = AuditRecord.objects.order_by("id").values_list(
        "action", "schedule_id", "tenant", "actor", "actor_id"
    )
    assert list(rows) == [
        ("run_now", schedule.pk, "acme", "root", str(root.pk)),
        ("replay", schedule.pk, "acme", "root", str(root.pk)),
        ("misfire.skipped", schedule.pk, "acme", "django_jobs.planner", None),
        ("schedule.retired", one_off.pk, "acme", "django_jobs.retention", None),
    ]


PROJECT_LOG: list[dict] = []


def project_audit_log(**record) -> None:
    """A project's ``AUDIT_LOG`` function: it keeps what it is given."""
    PROJECT_LOG.append(record)


@override_settings(DJANGO_JOBS={"AUDIT_LOG": "tests.test_audit_trail.project_audit_log"})
def test_a_misfire_summary_reaches_the_projects_audit_log() -> None:
    """The planner's misfire summary goes through the one audit writer, so a project that
    keeps its own audit log sees it there (and django_jobs writes no record of its own)."""
    PROJECT_LOG.clear()
    schedule = ScheduleFactory.create(
        tenant="acme",
        interval=timedelta(seconds=1),
        anchor=T0,
        created_at=T0,
        next_due_at=T0,
        max_delay=timedelta(seconds=5),
    )
    plan_due(now=T0 + timedelta(hours=1))
    [summary] = [r for r in PROJECT_LOG if r["action"] == "misfire.skipped"]
    assert (summary["actor"], summary["actor_id"]) == ("django_jobs.planner", None)
    assert (summary["tenant"], summary["schedule_id"]) == ("acme", schedule.pk)
    assert summary["after"]["first"] == T0.isoformat()
    assert summary["after"]["count"] == 3601 - 6 - 100  # all instants, on time, rows
    assert not AuditRecord.objects.filter(action="misfire.skipped").exists()


@override_settings(DJANGO_JOBS={"AUDIT_LOG": "tests.test_audit_trail.project_audit_log"})
def test_a_retired_one_off_reaches_the_projects_audit_log() -> None:
    """Regression: retention wrote its ``schedule.retired`` records in SQL, past the one
    audit writer, so a project that keeps its own audit log never saw them."""
    PROJECT_LOG.clear()
    one_off = ScheduleFactory.create(tenant="acme", key="once", timing_kind="at", run_at=T0)
    store.plan([store.PlannedOccurrence(one_off.pk, "acme", "once", T0)], now=T0)
    Occurrence.objects.filter(schedule=one_off).update(state="completed")
    assert store.retire_one_offs(now=T0) == [(one_off.pk, "acme", "once")]
    [retired] = [r for r in PROJECT_LOG if r["action"] == "schedule.retired"]
    assert retired == {
        "at": T0,
        "actor": "django_jobs.retention",
        "actor_id": None,
        "action": "schedule.retired",
        "tenant": "acme",
        "schedule_id": one_off.pk,
        "target_type": "schedule",
        "target_id": str(one_off.pk),
        "reason": "a one-off whose occurrence is final",
        "before": {"status": "active"},
        "after": {"status": "retired"},
    }
    assert not AuditRecord.objects.filter(action="schedule.retired").exists()


@override_settings(DJANGO_JOBS={"AUDIT_LOG": "tests.test_audit_trail.project_audit_log"})
def test_a_removed_one_off_reaches_the_projects_audit_log() -> None:
    """Regression: retention wrote its ``schedule.removed`` records in SQL, past the one
    audit writer."""
    PROJECT_LOG.clear()
    gone = retired_one_off()
    store.remove_retired_one_offs(now=LATER, keep_without_duration=timedelta(days=1), batch_size=1)
    assert [(r["action"], r["schedule_id"], r["after"]) for r in PROJECT_LOG] == [
        ("schedule.removed", gone.pk, {"key": "acme.welcome"})
    ]
    assert not AuditRecord.objects.exists()


def backfill_sql() -> list[str]:
    migration = importlib.import_module("django_jobs.migrations.0006_audit_schedule")
    return [migration.BACKFILL_SCHEDULES, migration.BACKFILL_OCCURRENCES]


def old_record(target_type: str, target_id: str) -> AuditRecord:
    return AuditRecord.objects.create(
        at=T0, actor="root", action="x", target_type=target_type, target_id=target_id, reason="r"
    )


def test_the_migration_gives_records_older_than_the_column_their_schedule() -> None:
    schedule = ScheduleFactory.create(tenant="acme")
    store.plan([store.PlannedOccurrence(schedule.pk, "acme", schedule.key, T0)], now=T0)
    occurrence = Occurrence.objects.get()
    records = {
        "schedule": old_record("schedule", str(schedule.pk)),
        "removed schedule": old_record("schedule", "987654"),
        "occurrence": old_record("occurrence", str(occurrence.pk)),
        "purged occurrence": old_record("occurrence", "00000000-0000-0000-0000-000000000001"),
        "garbage": old_record("occurrence", "not a uuid"),
        "huge": old_record("schedule", "9" * 40),
    }
    with connection.cursor() as cursor:
        for sql in backfill_sql():
            cursor.execute(sql)
    found = {name: AuditRecord.objects.get(pk=r.pk).schedule_id for name, r in records.items()}
    assert found == {
        "schedule": schedule.pk,
        "removed schedule": 987654,
        "occurrence": schedule.pk,
        "purged occurrence": None,
        "garbage": None,
        "huge": None,
    }


@pytest.mark.parametrize("value", ["abc", "%00", str(2**70), "-1", "1%20OR%201=1", "{globex}"])
def test_the_schedule_filter_of_the_audit_list_neither_fails_nor_leaks(value) -> None:
    acme = ScheduleFactory.create(tenant="acme", key="billing.nightly")
    globex = ScheduleFactory.create(tenant="globex", key="billing.nightly")
    root = User.objects.create_superuser("root")
    for schedule in (acme, globex):
        services.disable(schedule, actor=root, reason=f"{schedule.tenant} secret", now=T0)
    alice = User.objects.create_user("alice", is_staff=True)
    group = Group.objects.create(name="acme-viewers")
    alice.groups.add(group)
    grant_tenant(group, "acme", "view")
    query = f"?schedule_id__exact={value.format(globex=globex.pk)}"
    response = logged_in(alice).get(AUDIT_LIST + query)
    assert response.status_code in (200, 302)
    assert "globex secret" not in response.content.decode()
