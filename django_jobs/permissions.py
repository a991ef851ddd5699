"""Who may do what to which schedule: django-guardian object permissions and tenant grants.

An operator may act on a schedule when any of these holds:

1. the model-wide permission (``django_jobs.replay_schedule`` on the user or a group, or a
   superuser): every schedule;
2. the object permission on that schedule (django-guardian ``assign_perm``);
3. a ``TenantGrant`` of that action to one of the user's groups for the schedule's tenant:
   every schedule of that tenant, present and future.

Occurrences are governed by their schedule's permissions, and so are audit records: each
carries the id of the schedule it concerns.

``change`` (Django's ``change_schedule``) is what ``services.upsert_schedule`` needs to change
a run-time schedule. Creating one needs more than any existing schedule can give: the
model-wide ``add_schedule`` (every tenant), or a ``change`` tenant grant for the new
schedule's tenant (``may_create``).
"""

from __future__ import annotations

from typing import Any

from django.db.models import Q, QuerySet

from .exceptions import JobsError
from .models import AuditRecord, Schedule, TenantGrant

ACTIONS = {
    "view": "view_schedule",
    "replay": "replay_schedule",
    "disable": "disable_schedule",
    "run": "run_schedule",
    "purge": "purge_schedule",
    "change": "change_schedule",
}


class Forbidden(JobsError):
    """The actor lacks the permission; the message names the actor, action and schedule."""


def _codename(action: str) -> str:
    try:
        return f"django_jobs.{ACTIONS[action]}"
    except KeyError:
        raise ValueError(f"unknown action {action!r}; one of {', '.join(ACTIONS)}") from None


def allowed(user: Any, action: str, schedule: Schedule) -> bool:
    perm = _codename(action)
    if not getattr(user, "is_active", False):
        return False
    if user.has_perm(perm) or user.has_perm(perm, schedule):
        return True
    return TenantGrant.objects.filter(
        group__user=user, tenant=schedule.tenant, permission=action
    ).exists()


def require(user: Any, action: str, schedule: Schedule) -> None:
    if not allowed(user, action, schedule):
        raise Forbidden(
            f"{getattr(user, 'username', user)!s} may not {action} schedule {schedule}: ask for "
            f"the {ACTIONS[action]} permission on it or on its tenant"
        )


def may_create(user: Any, tenant: str) -> bool:
    """Whether ``user`` may create a schedule in ``tenant``: the model-wide ``add_schedule``,
    or a ``change`` tenant grant for that tenant (no object permission can name a schedule
    that does not exist yet)."""
    if not getattr(user, "is_active", False):
        return False
    if user.has_perm("django_jobs.add_schedule"):
        return True
    return TenantGrant.objects.filter(group__user=user, tenant=tenant, permission="change").exists()


def may_create_somewhere(user: Any) -> bool:
    """Whether ``user`` may create a schedule in at least one tenant (the admin offers its
    form only then; the tenant the form names is checked by ``may_create``)."""
    if not getattr(user, "is_active", False):
        return False
    if user.has_perm("django_jobs.add_schedule"):
        return True
    return TenantGrant.objects.filter(group__user=user, permission="change").exists()


def require_create(user: Any, tenant: str, label: str) -> None:
    if not may_create(user, tenant):
        raise Forbidden(
            f"{getattr(user, 'username', user)!s} may not create schedule {label}: ask for the "
            f"add_schedule permission, or a change grant on tenant {tenant!r}"
        )


def visible(user: Any) -> QuerySet[Schedule]:
    """The schedules ``user`` may see."""
    from guardian.shortcuts import get_objects_for_user

    if not getattr(user, "is_active", False):
        return Schedule.objects.none()
    if user.has_perm(_codename("view")):
        return Schedule.objects.all()
    objects = get_objects_for_user(
        user, _codename("view"), klass=Schedule, accept_global_perms=False
    ).values("pk")
    tenants = TenantGrant.objects.filter(group__user=user, permission="view").values("tenant")
    return Schedule.objects.filter(Q(pk__in=objects) | Q(tenant__in=tenants))


def visible_audit(user: Any) -> QuerySet[AuditRecord]:
    """The audit records ``user`` may see: every one with the model-wide view permission;
    otherwise those of the schedules they may see, and every record of a tenant they hold a
    view grant for (which covers the records of its removed schedules). Filters by columns
    and subqueries only, so the cost does not grow with the occurrence table."""
    if not getattr(user, "is_active", False):
        return AuditRecord.objects.none()
    if user.has_perm(_codename("view")):
        return AuditRecord.objects.all()
    schedules = visible(user).values("pk")
    tenants = TenantGrant.objects.filter(group__user=user, permission="view").values("tenant")
    return AuditRecord.objects.filter(Q(schedule_id__in=schedules) | Q(tenant__in=tenants))


def grant_tenant(group: Any, tenant: str, *actions: str) -> None:
    """Let ``group`` perform ``actions`` (default: all) on every schedule of ``tenant``."""
    for action in actions or tuple(ACTIONS):
        _codename(action)
        TenantGrant.objects.get_or_create(group=group, tenant=tenant, permission=action)


def may_any(user: Any, action: str) -> bool:
    """Whether ``user`` may perform ``action`` on at least one schedule (admin shows the action
    only then; each object is still checked by the service)."""
    from guardian.shortcuts import get_objects_for_user

    perm = _codename(action)
    if not getattr(user, "is_active", False):
        return False
    if user.has_perm(perm):
        return True
    if TenantGrant.objects.filter(group__user=user, permission=action).exists():
        return True
    return get_objects_for_user(user, perm, klass=Schedule, accept_global_perms=False).exists()
