"""The services behind the console's new actions: cancel one occurrence, pause and resume a
whole tenant. Each is permission-checked, audited, and all or nothing."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import Group, User
from guardian.shortcuts import assign_perm

from django_jobs import services, store
from django_jobs.exceptions import JobsError
from django_jobs.models import Attempt, AuditRecord, Occurrence, Schedule
from django_jobs.permissions import Forbidden, grant_tenant

from .factories import T0, ScheduleFactory, dead_occurrence
from .storeutil import LEASE, claim, plan

pytestmark = pytest.mark.django_db


def test_cancel_a_waiting_occurrence_keeps_it_from_running(root) -> None:
    schedule = ScheduleFactory.create(tenant="acme", key="acme.nightly")
    plan(schedule, T0, now=T0)
    occurrence = Occurrence.objects.get(schedule=schedule)

    cancelled = services.cancel(occurrence, actor=root, reason="customer left", now=T0)

    assert cancelled.state == "cancelled"
    assert claim("w", T0 + timedelta(minutes=1)) == []  # nothing left to claim
    record = AuditRecord.objects.get(action="cancel")
    assert (record.target_id, record.reason, record.actor) == (
        str(occurrence.pk),
        "customer left",
        "root",
    )
    assert record.before == {"state": "scheduled", "lease_owner": ""}


def test_cancel_a_running_occurrence_ends_its_lease(root) -> None:
    """The replica running it finds its renewal refused: the way it stops the run."""
    schedule = ScheduleFactory.create(tenant="acme", key="acme.nightly")
    plan(schedule, T0, now=T0)
    (lease,) = claim("replica-1", T0)
    store.mark_started([lease], now=T0)

    services.cancel(Occurrence(pk=lease.occurrence_id), actor=root, reason="stuck", now=T0)

    assert store.renew([lease], owner="replica-1", now=T0, lease_for=LEASE) == []
    attempt = Attempt.objects.get(occurrence_id=lease.occurrence_id)
    assert attempt.outcome == "cancelled"
    assert AuditRecord.objects.get(action="cancel").before == {
        "state": "processing",
        "lease_owner": "replica-1",
    }


def test_a_finished_occurrence_cannot_be_cancelled(root) -> None:
    occurrence = dead_occurrence(ScheduleFactory.create(tenant="acme", key="acme.nightly"))
    with pytest.raises(JobsError, match="is dead: only a scheduled, failed"):
        services.cancel(occurrence, actor=root, reason="late", now=T0)
    assert not AuditRecord.objects.filter(action="cancel").exists()


def test_cancel_needs_the_disable_permission_on_its_schedule() -> None:
    schedule = ScheduleFactory.create(tenant="acme", key="acme.nightly")
    plan(schedule, T0, now=T0)
    viewer = User.objects.create_user("viewer", is_staff=True)
    assign_perm("django_jobs.view_schedule", viewer, schedule)
    with pytest.raises(Forbidden, match=r"viewer may not disable schedule acme/acme\.nightly"):
        services.cancel(Occurrence.objects.get(), actor=viewer, reason="r", now=T0)
    assert Occurrence.objects.get().state == "scheduled"


def tenant_schedules(tenant: str, *keys: str) -> list[Schedule]:
    return [ScheduleFactory.create(tenant=tenant, key=key) for key in keys]


def test_pause_a_tenant_disables_each_schedule_and_resume_enables_only_those(root) -> None:
    nightly, hourly, broken = tenant_schedules("acme", "a.nightly", "a.hourly", "a.broken")
    (other,) = tenant_schedules("globex", "g.nightly")
    services.disable(broken, actor=root, reason="fix pending", now=T0)

    paused = services.pause_tenant("acme", actor=root, reason="migration", now=T0)

    assert sorted(s.key for s in paused) == ["a.hourly", "a.nightly"]
    assert set(Schedule.objects.filter(enabled=False).values_list("key", flat=True)) == {
        "a.nightly",
        "a.hourly",
        "a.broken",
    }
    reasons = AuditRecord.objects.filter(action="disable", reason__startswith="tenant paused")
    assert set(reasons.values_list("schedule_id", flat=True)) == {nightly.pk, hourly.pk}

    services.resume_tenant("acme", actor=root, reason="done", now=T0 + timedelta(hours=1))

    states = dict(Schedule.objects.values_list("key", "enabled"))
    assert states == {"a.nightly": True, "a.hourly": True, "a.broken": False, "g.nightly": True}
    assert Schedule.objects.get(key="a.broken").disabled_reason == "fix pending"
    assert AuditRecord.objects.filter(action="enable", reason="done").count() == 2
    assert other.pk not in AuditRecord.objects.values_list("schedule_id", flat=True)


def test_pausing_a_tenant_is_all_or_nothing() -> None:
    """An operator who may disable one of the tenant's schedules but not another pauses
    neither."""
    mine, _theirs = tenant_schedules("acme", "a.mine", "a.theirs")
    operator = User.objects.create_user("op", is_staff=True)
    group = Group.objects.create(name="acme-view")
    operator.groups.add(group)
    grant_tenant(group, "acme", "view")
    assign_perm("django_jobs.disable_schedule", operator, mine)

    with pytest.raises(Forbidden, match=r"op may not disable schedule acme/a\.theirs"):
        services.pause_tenant("acme", actor=operator, reason="r", now=T0)

    assert Schedule.objects.filter(enabled=True).count() == 2
    assert not AuditRecord.objects.exists()


def test_a_tenant_one_cannot_see_answers_like_an_empty_one() -> None:
    tenant_schedules("acme", "a.nightly")
    stranger = User.objects.create_user("stranger", is_staff=True)
    with pytest.raises(JobsError, match="tenant 'acme' has no enabled schedule that you may see"):
        services.pause_tenant("acme", actor=stranger, reason="r", now=T0)
    with pytest.raises(JobsError, match="tenant 'acme' has no paused schedule"):
        services.resume_tenant("acme", actor=stranger, reason="r", now=T0)
