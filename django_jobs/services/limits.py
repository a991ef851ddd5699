"""A schedule's retention ``Limit``, written only with an audit record of what it keeps.

Retention decides what a purge deletes, so a cut (``keep_last`` 1000 to 1) must be answerable
later. Every writer records it in its own transaction: a new schedule's retention is part of
its ``schedule.created`` record (``keep_for``, ``keep_last``); a change of an existing one,
by ``upsert_schedule`` (and the console's form through it), ``jobs sync`` or the policy
records of enqueued work, is ``schedule.retention_changed`` with the retention before (each
``None`` when the schedule had no Limit) and after. A purge records the Limit it applied, so
the deletion it makes points back to the change that allowed it. The rows are written by the
store (``store.insert_limits``, ``store.write_limits``); this module decides and audits.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from .. import audit, store
from ..models import Limit, Schedule

RETENTION_CHANGED = "schedule.retention_changed"


def retention(limit: Limit | None) -> dict[str, Any]:
    """What ``limit`` keeps, as its audit records show it: ``keep_for`` and ``keep_last``,
    each ``None`` when unset (both when there is no Limit)."""
    if limit is None:
        return {"keep_for": None, "keep_last": None}
    return {"keep_for": limit.keep_for, "keep_last": limit.keep_last}


def retention_of(schedule: Schedule) -> dict[str, Any]:
    """What ``schedule``'s Limit keeps now (one read)."""
    return retention(Limit.objects.filter(schedule=schedule).first())


def changed(
    schedule: Schedule,
    *,
    before: dict[str, Any],
    after: dict[str, Any],
    at: datetime,
    actor: Any,
    reason: str,
) -> dict[str, Any]:
    """The audit entry (``audit.entry``) of ``schedule``'s retention changed from ``before``
    to ``after``, for writers that record in bulk (``jobs sync``)."""
    return audit.entry(
        at=at,
        actor=actor,
        action=RETENTION_CHANGED,
        tenant=schedule.tenant,
        schedule_id=schedule.pk,
        reason=reason,
        before=before,
        after=after,
    )


def set_limit(
    schedule: Schedule, wanted: dict[str, Any], *, now: datetime, actor: Any, reason: str
) -> bool:
    """Bring ``schedule``'s Limit to ``wanted`` (``keep_for`` and ``keep_last``), audited
    ``schedule.retention_changed``, in the caller's transaction. False, with nothing written,
    when it already keeps that. The Limit row is locked first, so two writers of it record
    the before each really replaced."""
    current = Limit.objects.select_for_update().filter(schedule=schedule).first()
    before = retention(current)
    if before == wanted:
        return False
    store.write_limits([Limit(schedule=schedule, **wanted)])
    audit.record_all(
        [changed(schedule, before=before, after=wanted, at=now, actor=actor, reason=reason)]
    )
    return True
