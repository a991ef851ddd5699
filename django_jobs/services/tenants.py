"""Pausing and resuming a whole tenant: every schedule of it disabled, then enabled again.

A pause disables each enabled schedule of the tenant through ``operator.disable`` (audited
per schedule), which marks it ``paused_by_tenant``; a resume enables only the schedules
carrying that mark, so one an operator had disabled on its own, before the pause (whatever
its reason says) or during it (which clears the mark), stays disabled with its own reason.
The mark is a field, never the reason's text: any operator who disables a schedule writes
its reason, ``tenant paused: ...`` included.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db import transaction

from .. import permissions
from ..clock import ensure_aware_utc
from ..exceptions import JobsError
from ..models import Schedule, ScheduleStatus
from ..validation import need_reason
from .operator import disable, enable

# How the disabled reason of a schedule a tenant pause disabled begins: for the people who
# read it (the admin, jobs inspect); a resume reads the ``paused_by_tenant`` mark, not this.
TENANT_PAUSE = "tenant paused: "


def _tenant_rows(tenant: str, *, actor: Any, **state: bool) -> list[Schedule]:
    """The tenant's schedules the actor may see in ``state`` (``enabled=True``; or
    ``paused_by_tenant=True``), locked in id order (the order every writer of several
    schedules takes them in), retired ones left out."""
    rows = (
        Schedule.objects.select_for_update()
        .filter(tenant=tenant, **state)
        .exclude(status=ScheduleStatus.RETIRED)
        .order_by("pk")
    )
    return [row for row in rows if permissions.allowed(actor, "view", row)]


def pause_tenant(tenant: str, *, actor: Any, reason: str, now: datetime) -> list[Schedule]:
    """Disable every enabled schedule of ``tenant`` in one transaction (running occurrences
    finish), each audited ``disable`` with the reason ``tenant paused: <reason>`` and marked
    ``paused_by_tenant``. All or nothing: refused, with nothing disabled, unless the actor
    may disable each of them."""
    reason = need_reason(reason, f"pausing tenant {tenant!r}")
    now = ensure_aware_utc(now, name="now")
    with transaction.atomic():
        rows = _tenant_rows(tenant, actor=actor, enabled=True)
        if not rows:
            raise JobsError(f"tenant {tenant!r} has no enabled schedule that you may see")
        for row in rows:
            permissions.require(actor, "disable", row)
        return [
            disable(row, actor=actor, reason=f"{TENANT_PAUSE}{reason}", now=now, tenant_pause=True)
            for row in rows
        ]


def resume_tenant(tenant: str, *, actor: Any, reason: str, now: datetime) -> list[Schedule]:
    """Enable the schedules of ``tenant`` a pause disabled and no one disabled since (those
    marked ``paused_by_tenant``, whatever their reason's text), each audited ``enable``; what
    they missed meanwhile is decided by their misfire policy. All or nothing, as
    ``pause_tenant``."""
    reason = need_reason(reason, f"resuming tenant {tenant!r}")
    now = ensure_aware_utc(now, name="now")
    with transaction.atomic():
        rows = _tenant_rows(tenant, actor=actor, enabled=False, paused_by_tenant=True)
        if not rows:
            raise JobsError(f"tenant {tenant!r} has no paused schedule that you may see")
        for row in rows:
            permissions.require(actor, "disable", row)
        return [enable(row, actor=actor, reason=reason, now=now) for row in rows]
