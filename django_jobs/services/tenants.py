"""Pausing and resuming a whole tenant: every schedule of it disabled, then enabled again.

A pause disables each enabled schedule of the tenant with a reason that marks it
(``TENANT_PAUSE``), through ``operator.disable`` (audited per schedule); a resume enables
only the schedules the pause disabled, so one an operator had disabled on its own, before or
during the pause, stays disabled with its own reason.
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

# How the disabled reason of a schedule a tenant pause disabled begins.
TENANT_PAUSE = "tenant paused: "


def _tenant_rows(tenant: str, *, actor: Any, enabled: bool) -> list[Schedule]:
    """The tenant's schedules the actor may see, enabled or not, locked in id order (the
    order every writer of several schedules takes them in), retired ones left out."""
    rows = (
        Schedule.objects.select_for_update()
        .filter(tenant=tenant, enabled=enabled)
        .exclude(status=ScheduleStatus.RETIRED)
        .order_by("pk")
    )
    return [row for row in rows if permissions.allowed(actor, "view", row)]


def pause_tenant(tenant: str, *, actor: Any, reason: str, now: datetime) -> list[Schedule]:
    """Disable every enabled schedule of ``tenant`` in one transaction (running occurrences
    finish), each audited ``disable`` with the reason ``tenant paused: <reason>``. All or
    nothing: refused, with nothing disabled, unless the actor may disable each of them."""
    reason = need_reason(reason, f"pausing tenant {tenant!r}")
    now = ensure_aware_utc(now, name="now")
    with transaction.atomic():
        rows = _tenant_rows(tenant, actor=actor, enabled=True)
        if not rows:
            raise JobsError(f"tenant {tenant!r} has no enabled schedule that you may see")
        for row in rows:
            permissions.require(actor, "disable", row)
        return [
            disable(row, actor=actor, reason=f"{TENANT_PAUSE}{reason}", now=now) for row in rows
        ]


def resume_tenant(tenant: str, *, actor: Any, reason: str, now: datetime) -> list[Schedule]:
    """Enable the schedules of ``tenant`` a pause disabled (their disabled reason begins
    ``tenant paused: ``), each audited ``enable``; what they missed meanwhile is decided by
    their misfire policy. All or nothing, as ``pause_tenant``."""
    reason = need_reason(reason, f"resuming tenant {tenant!r}")
    now = ensure_aware_utc(now, name="now")
    with transaction.atomic():
        rows = [
            row
            for row in _tenant_rows(tenant, actor=actor, enabled=False)
            if row.disabled_reason.startswith(TENANT_PAUSE)
        ]
        if not rows:
            raise JobsError(f"tenant {tenant!r} has no paused schedule that you may see")
        for row in rows:
            permissions.require(actor, "disable", row)
        return [enable(row, actor=actor, reason=reason, now=now) for row in rows]
