"""``services.upsert_schedule`` acts as a user, with that user's permission.

Changing a run-time schedule needs ``change`` on it; creating one needs ``add_schedule`` or a
``change`` grant on its tenant. It refuses a job no handler registered, a schedule declared in
code, and a name in place of a user; a retired schedule it revives says so in the audit.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import Group, Permission, User

from django_jobs import InvalidSchedule, every, services
from django_jobs.exceptions import JobsError
from django_jobs.models import AuditRecord, Origin, Schedule, ScheduleStatus
from django_jobs.permissions import Forbidden, grant_tenant

from .factories import T0, declaration
from .snapshots import snapshot

pytestmark = pytest.mark.django_db

LATER = T0 + timedelta(hours=1)


def acme_statements(**fields: Any) -> Any:
    return declaration("billing.statements", tenant="acme", **fields)


def staff(name: str, tenant: str, *actions: str) -> User:
    user = User.objects.create_user(name, is_staff=True)
    group = Group.objects.create(name=f"{name}-group")
    user.groups.add(group)
    grant_tenant(group, tenant, *actions)
    return user


@pytest.fixture
def alice() -> User:
    """Staff of acme who may create and change acme's schedules."""
    return staff("alice", "acme", "view", "change")


@pytest.mark.parametrize("who", ["nobody", "viewer", "other tenant", "inactive superuser"])
def test_upsert_by_a_user_without_permission_changes_nothing(who) -> None:
    """Regression: upsert_schedule checked no permission: anyone the caller named created or
    overwrote any (tenant, key)."""
    inactive = User.objects.create_superuser("retired-root")
    inactive.is_active = False
    inactive.save()
    user = {
        "nobody": lambda: User.objects.create_user("nobody"),
        "viewer": lambda: staff("viewer", "acme", "view"),
        "other tenant": lambda: staff("globex-ops", "globex"),
        "inactive superuser": lambda: inactive,
    }[who]()
    before = snapshot()
    with pytest.raises(Forbidden, match=r"may not create schedule acme/billing\.statements"):
        services.upsert_schedule(acme_statements(), actor=user, reason="x", now=T0)
    assert snapshot() == before
    assert not Schedule.objects.exists()
    assert not AuditRecord.objects.exists()


@pytest.mark.parametrize("actor", ["root", "django_jobs.sync", None, 7])
def test_upsert_refuses_a_name_in_place_of_a_user(root, actor) -> None:
    """Regression: any text was accepted as the actor, so a record could claim to be
    ``django_jobs.sync``."""
    with pytest.raises(JobsError, match="actor: a Django user is needed"):
        services.upsert_schedule(acme_statements(), actor=actor, reason="x", now=T0)
    assert not Schedule.objects.exists()
    assert not AuditRecord.objects.exists()


def test_upsert_refuses_a_job_no_handler_registered(root) -> None:
    """Regression: ``job`` was any text, never checked against the registry (check E014
    refuses it in a declaration, but no check runs at run time)."""
    with pytest.raises(InvalidSchedule, match=r"job: no handler is registered for job 'x.nope'"):
        services.upsert_schedule(acme_statements(job="x.nope"), actor=root, reason="x", now=T0)
    assert not Schedule.objects.exists()
    assert not AuditRecord.objects.exists()


def test_upsert_refuses_another_tenants_key(root) -> None:
    """Regression: any (tenant, key) was overwritten, another tenant's schedule included."""
    acme_ops = staff("acme-ops", "acme")  # every action acme has, none of globex
    theirs = declaration("billing.statements", tenant="globex")
    services.upsert_schedule(theirs, actor=root, reason="globex signed up", now=T0)
    before = snapshot()
    with pytest.raises(Forbidden, match=r"acme-ops may not change schedule globex/billing\."):
        services.upsert_schedule(
            declaration("billing.statements", tenant="globex", timing=every(timedelta(minutes=1))),
            actor=acme_ops,
            reason="mine now",
            now=LATER,
        )
    with pytest.raises(Forbidden, match=r"acme-ops may not create schedule globex/billing\.other"):
        services.upsert_schedule(
            declaration("billing.other", tenant="globex"), actor=acme_ops, reason="x", now=LATER
        )
    assert snapshot() == before


def test_upsert_refuses_a_schedule_declared_in_code(root) -> None:
    """Regression: upsert overwrote a declared schedule and flipped its origin to runtime,
    so sync no longer retired it."""
    services.sync_schedules([acme_statements()], now=T0)
    before = snapshot()
    with pytest.raises(
        JobsError, match=r"schedule acme/billing\.statements is declared in code: change it in"
    ):
        services.upsert_schedule(
            acme_statements(timing=every(timedelta(minutes=1))), actor=root, reason="x", now=LATER
        )
    assert snapshot() == before
    assert Schedule.objects.get().origin == Origin.CODE


def test_a_change_grant_lets_tenant_staff_create_and_change_their_schedules(alice) -> None:
    row = services.upsert_schedule(acme_statements(), actor=alice, reason="signed up", now=T0)
    services.upsert_schedule(
        acme_statements(timing=every(timedelta(hours=1))), actor=alice, reason="hourly", now=LATER
    )
    records = list(AuditRecord.objects.order_by("id").values_list("action", "actor", "actor_id"))
    assert records == [
        ("schedule.created", "alice", str(alice.pk)),
        ("schedule.timing_changed", "alice", str(alice.pk)),
    ]
    assert set(AuditRecord.objects.values_list("schedule_id", flat=True)) == {row.pk}


def test_add_schedule_creates_in_any_tenant_but_does_not_change(root) -> None:
    """``add_schedule`` is for making schedules; changing one needs ``change`` on it."""
    creator = User.objects.create_user("provisioner")
    creator.user_permissions.add(Permission.objects.get(codename="add_schedule"))
    creator = User.objects.get(pk=creator.pk)  # a fresh permission cache
    services.upsert_schedule(acme_statements(), actor=creator, reason="signed up", now=T0)
    with pytest.raises(Forbidden, match=r"provisioner may not change schedule acme/"):
        services.upsert_schedule(
            acme_statements(timing=every(timedelta(hours=1))),
            actor=creator,
            reason="hourly",
            now=LATER,
        )


def test_reviving_a_retired_schedule_is_said_in_the_audit(root) -> None:
    """Regression: a retired schedule went back to active as a plain ``schedule.changed``."""
    row = services.upsert_schedule(acme_statements(), actor=root, reason="signed up", now=T0)
    Schedule.objects.filter(pk=row.pk).update(status=ScheduleStatus.RETIRED, retired_at=T0)
    services.upsert_schedule(acme_statements(), actor=root, reason="came back", now=LATER)
    row.refresh_from_db()
    assert (row.status, row.retired_at) == (ScheduleStatus.ACTIVE, None)
    revived = AuditRecord.objects.get(action="schedule.revived")
    assert (revived.before["status"], revived.after["status"]) == ("retired", "active")
    assert (revived.reason, revived.actor_id) == ("came back", str(root.pk))
