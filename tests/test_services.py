"""The application service layer: permission, one transaction, audit, for every action."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import Group, User
from django.test import override_settings
from guardian.shortcuts import assign_perm

from django_jobs import services, store
from django_jobs.exceptions import JobsError
from django_jobs.models import (
    Attempt,
    AuditRecord,
    Limit,
    Occurrence,
    OccurrenceState,
    Schedule,
    Trigger,
)
from django_jobs.permissions import Forbidden, grant_tenant, visible
from django_jobs.testing import run_due

from .factories import T0, ScheduleFactory
from .storeutil import claim, plan

pytestmark = pytest.mark.django_db

AUDITED: list[dict] = []


def project_audit_log(
    *,
    at,
    actor,
    actor_id,
    action,
    tenant,
    schedule_id,
    target_type,
    target_id,
    reason,
    before,
    after,
) -> None:
    """A project's audit function, taking exactly the keyword arguments documented for
    ``AUDIT_LOG`` (a new one would fail here)."""
    AUDITED.append(
        {
            "actor": actor,
            "actor_id": actor_id,
            "action": action,
            "tenant": tenant,
            "schedule_id": schedule_id,
            "target_id": target_id,
            "reason": reason,
        }
    )


@pytest.fixture
def admin() -> User:
    return User.objects.create_superuser("root", "root@example.com", "x")


def test_an_object_permission_allows_that_schedule_only(alice, dead, clock):
    other = ScheduleFactory.create(tenant="acme", key="acme.other")
    assign_perm("django_jobs.replay_schedule", alice, dead.schedule)
    services.replay(dead, actor=alice, reason="allowed on this one", now=clock.now())
    with pytest.raises(Forbidden):
        services.disable(dead.schedule, actor=alice, reason="not this action", now=clock.now())
    with pytest.raises(Forbidden):
        services.run_now(other, actor=alice, reason="not that schedule", now=clock.now())


def test_a_tenant_grant_covers_that_tenant_only(alice, clock):
    acme = ScheduleFactory.create(tenant="acme", key="acme.report")
    globex = ScheduleFactory.create(tenant="globex", key="globex.report")
    staff = Group.objects.create(name="acme-operators")
    alice.groups.add(staff)
    grant_tenant(staff, "acme", "view", "disable")
    assert list(visible(alice)) == [acme]
    services.disable(acme, actor=alice, reason="acme asked", now=clock.now())
    with pytest.raises(Forbidden, match=r"alice may not disable schedule globex/globex\.report"):
        services.disable(globex, actor=alice, reason="not my tenant", now=clock.now())
    with pytest.raises(Forbidden):
        services.inspect_schedule(globex, actor=alice, now=clock.now())


def test_disable_stops_claims_by_every_replica_and_enable_applies_misfire(admin, clock):
    schedule = ScheduleFactory.create(
        interval=timedelta(minutes=1), created_at=T0, next_due_at=T0, max_delay=timedelta(minutes=2)
    )
    plan(schedule, T0, now=T0)
    services.disable(schedule, actor=admin, reason="partner outage", now=T0)
    assert claim("replica-a", T0) == []
    assert claim("replica-b", T0) == []
    schedule.refresh_from_db()
    assert (schedule.enabled, schedule.disabled_by, schedule.disabled_reason) == (
        False,
        "root",
        "partner outage",
    )
    services.enable(schedule, actor=admin, reason="partner back", now=T0 + timedelta(minutes=10))
    clock.set(T0 + timedelta(minutes=10))
    from django_jobs.worker.planning import plan_due

    plan_due(now=clock.now())
    states = dict(Occurrence.objects.filter(schedule=schedule).values_list("scheduled_at", "state"))
    # Missed while disabled, by more than max_delay: skipped by misfire=skip.
    assert states[T0] == "skipped"
    assert states[T0 + timedelta(minutes=10)] == "scheduled"
    actions = list(
        AuditRecord.objects.filter(target_id=str(schedule.pk)).values_list("action", flat=True)
    )
    assert actions == ["enable", "disable"]  # newest first


def test_disable_with_cancel_running_ends_the_running_lease(admin, clock):
    schedule = ScheduleFactory.create(overlap="queue")
    plan(schedule, T0, now=T0)
    (lease,) = claim("replica-a", T0)
    services.disable(schedule, actor=admin, reason="unsafe", now=T0, cancel_running=True)
    occurrence = Occurrence.objects.get()
    assert (occurrence.state, occurrence.lease_owner) == (OccurrenceState.CANCELLED, "")
    assert Attempt.objects.get().outcome == "cancelled"
    # The replica running it finds its renewal refused, so it stops that run.
    assert store.renew([lease], owner="replica-a", now=T0, lease_for=timedelta(seconds=30)) == []
    schedule.refresh_from_db()
    assert schedule.running_occurrence is None


def test_run_now_plans_an_extra_manual_occurrence(admin, clock):
    schedule = ScheduleFactory.create()
    occurrence = services.run_now(schedule, actor=admin, reason="month-end rerun", now=T0)
    assert (occurrence.scheduled_at, occurrence.trigger) == (T0, Trigger.MANUAL)
    services.disable(schedule, actor=admin, reason="stop", now=T0)
    with pytest.raises(JobsError, match="is not active and enabled: enable it first"):
        services.run_now(schedule, actor=admin, reason="again", now=T0)


def test_purge_by_retention_limit_is_audited(admin):
    schedule = ScheduleFactory.create()
    Limit.objects.create(schedule=schedule, keep_last=1)
    plan(schedule, T0, T0 + timedelta(minutes=1), now=T0)
    store.complete(claim("w", T0 + timedelta(minutes=1), limit=2), now=T0 + timedelta(minutes=1))
    assert services.purge(schedule, actor=admin, now=T0 + timedelta(days=1)) == 1
    assert AuditRecord.objects.get(action="purge").after == {
        "deleted": 1,
        "keep_for": None,
        "keep_last": 1,
    }


@override_settings(DJANGO_JOBS={"AUDIT_LOG": "tests.test_services.project_audit_log"})
def test_with_audit_selected_the_projects_audit_log_gets_the_record(admin, dead, clock):
    AUDITED.clear()
    services.replay(dead, actor=admin, reason="selected audit", now=clock.now())
    recorded = list(AUDITED)
    assert recorded == [
        {
            "actor": "root",
            "actor_id": str(admin.pk),
            "action": "replay",
            "tenant": "acme",
            "schedule_id": dead.schedule_id,
            "target_id": str(dead.pk),
            "reason": "selected audit",
        }
    ]
    assert not AuditRecord.objects.filter(action="replay").exists()


def test_the_kill_switch_stops_claims_of_named_schedules(clock):
    from django_jobs.registry import Registry

    paused = ScheduleFactory.create(key="billing.paused", job="tests.k")
    running = ScheduleFactory.create(key="billing.running", job="tests.k")
    plan(paused, T0, now=T0)
    plan(running, T0, now=T0)
    jobs = Registry()
    jobs.register("tests.k", lambda run: None)
    clock.set(T0)
    with override_settings(DJANGO_JOBS={"PAUSED_SCHEDULES": ["billing.paused"]}):
        assert run_due(clock, jobs=jobs).claimed == 1
    with override_settings(DJANGO_JOBS={"PAUSED_SCHEDULES": ["*"]}):
        assert run_due(clock, jobs=jobs).claimed == 0
    assert run_due(clock, jobs=jobs).claimed == 1
    assert set(Schedule.objects.values_list("enabled", flat=True)) == {True}


def test_the_kill_switch_stops_claims_of_one_tenant(clock):
    from django_jobs.registry import Registry

    acme = ScheduleFactory.create(tenant="acme", key="billing.k", job="tests.k")
    globex = ScheduleFactory.create(tenant="globex", key="billing.k", job="tests.k")
    plan(acme, T0, now=T0)
    plan(globex, T0, now=T0)
    jobs = Registry()
    jobs.register("tests.k", lambda run: None)
    clock.set(T0)
    with override_settings(DJANGO_JOBS={"PAUSED_SCHEDULES": ["acme/*"]}):
        assert run_due(clock, jobs=jobs).claimed == 1
    assert set(Occurrence.objects.values_list("tenant", "state")) == {
        ("acme", OccurrenceState.SCHEDULED),
        ("globex", OccurrenceState.COMPLETED),
    }
