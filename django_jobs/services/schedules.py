"""Run-time schedule records, written one at a time by ``upsert_schedule``, and the rules of
a record change it shares with ``sync`` (which writes declared ones as a set).

An upsert writes the record, its retention Limit and its runbooks, and audits every change
(a timing change as ``schedule.timing_changed``, one of the arguments alone as
``schedule.arguments_changed``, a revival as ``schedule.revived``, the retention as
``schedule.retention_changed``; a new record's ``schedule.created`` includes its retention).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import transaction

from .. import permissions, runbooks, store
from ..clock import ensure_aware_utc
from ..declarations import Declaration, InvalidSchedule, local_time_gaps
from ..exceptions import JobsError
from ..models import Limit, Origin, Schedule, ScheduleStatus
from ..registry import registry
from ..validation import need_reason
from .limits import set_limit
from .one_offs import plan_late_one_offs
from .rows import first_due, need_user, record

# Changing any of these changes when the schedule runs: audited as a timing change.
TIMING_FIELDS = (
    "timing_kind",
    "cron",
    "interval",
    "anchor",
    "run_at",
    "delay",
    "time_zone",
    "skipped_time",
    "repeated_time",
    "rrule",
    "calendar",
    "on_excluded",
)
PARKED_FIELDS = ["parked_at", "parked_field", "parked_reason"]


@dataclass(frozen=True)
class _Upserted:
    schedule: Schedule
    what: str  # "created", "updated" or "unchanged"
    runbooks: int  # Runbook rows created or changed


@dataclass(frozen=True)
class _Write:
    """Who writes a declaration, when, why, and as what origin."""

    now: datetime
    actor: Any
    reason: str
    origin: Origin


def _locked_key(tenant: str, key: str) -> Schedule | None:
    """The schedule of (tenant, key), locked for the caller's transaction, or None."""
    return Schedule.objects.select_for_update().filter(tenant=tenant, key=key).first()


def _upsert(declaration: Declaration, *, existing: Schedule | None, write: _Write) -> _Upserted:
    """Create or update the record of ``declaration`` (``existing``: its locked row, if any),
    with its Limit and its runbooks (on create too: check E017 must never find a schedule the
    app wrote without them)."""
    # "after" counts from the record's creation
    timing = declaration.timing.created(existing.created_at if existing else write.now)
    fields = {**declaration.record_fields(), **timing.record_fields()}
    if existing is None:
        return _create(declaration, fields, write)
    return _update(existing, declaration, fields, write)


def _create(declaration: Declaration, fields: dict[str, Any], write: _Write) -> _Upserted:
    schedule = Schedule(
        tenant=declaration.tenant,
        key=declaration.key,
        origin=write.origin,
        created_at=write.now,
        updated_at=write.now,
        **fields,
    )
    schedule.next_due_at = first_due(schedule, now=write.now)  # no plan pass before then
    store.insert_schedules([schedule])
    retention = declaration.limit_fields()
    record(
        schedule,
        now=write.now,
        actor=write.actor,
        action="schedule.created",
        reason=write.reason,
        after={**fields, **retention},
    )
    store.insert_limits([Limit(schedule=schedule, **retention)])
    plan_late_one_offs([schedule], now=write.now)  # created after its instant
    return _Upserted(schedule, "created", runbooks.write(schedule))


def _update(
    existing: Schedule, declaration: Declaration, fields: dict[str, Any], write: _Write
) -> _Upserted:
    changed = {k: v for k, v in fields.items() if getattr(existing, k) != v}
    if existing.origin != write.origin:
        changed["origin"] = write.origin
    limit_changed = set_limit(
        existing,
        declaration.limit_fields(),
        now=write.now,
        actor=write.actor,
        reason=write.reason,
    )
    if not changed:
        written = runbooks.write(existing)
        return _Upserted(existing, "updated" if limit_changed else "unchanged", written)
    before = {k: getattr(existing, k) for k in changed}
    for name, value in changed.items():
        setattr(existing, name, value)
    existing.updated_at = write.now
    if changed.get("status", ScheduleStatus.RETIRED) != ScheduleStatus.RETIRED:
        existing.retired_at = None
    replan = outdates_planned(changed)
    if replan:
        existing.next_due_at = write.now  # re-plan from the recovery point with the new timing
    if existing.parked_field:  # written again: the planner checks the new record
        before["parked"] = f"{existing.parked_field}: {existing.parked_reason}"
        changed["parked"] = ""
        unpark(existing, now=write.now)
    existing.full_clean(exclude=["running_occurrence"])
    store.write_records([existing])
    if replan:
        store.withdraw_planned_ahead([existing.pk], now=write.now)
    action = change_action(before, changed)
    record(
        existing,
        now=write.now,
        actor=write.actor,
        action=action,
        reason=write.reason,
        before=before,
        after=changed,
    )
    if replan:
        plan_late_one_offs([existing], now=write.now)  # moved to an instant already past
    return _Upserted(existing, "updated", runbooks.write(existing))


def outdates_planned(changed: dict[str, Any]) -> bool:
    """Whether a change re-plans a schedule (from its recovery point) and makes the occurrences
    planned ahead of their instant under the old record wrong (``store.withdraw_planned_ahead``):
    its timing or its status. (Policies are
    read when an occurrence is claimed, so a change of them applies to those already planned;
    a change of queue moves those waiting to start, ``store.write_records``.)"""
    return "status" in changed or any(k in TIMING_FIELDS for k in changed)


def unpark(schedule: Schedule, *, now: datetime) -> None:
    """Clear what the planner parked the schedule for and make it due: the next plan pass
    checks the record again (and parks it again if it still refuses it)."""
    schedule.parked_at, schedule.parked_field, schedule.parked_reason = None, "", ""
    schedule.next_due_at = now


def change_action(before: dict[str, Any], changed: dict[str, Any]) -> str:
    """How a change is named in the audit: a retired schedule made active (or draft) again is
    ``schedule.revived``, so a reader never mistakes it for an edit of a live one; a change
    of when it runs is ``schedule.timing_changed``, of what it runs for (and not when)
    ``schedule.arguments_changed``, with the arguments before and after."""
    if before.get("status") == ScheduleStatus.RETIRED:
        return "schedule.revived"
    if any(k in TIMING_FIELDS for k in changed):
        return "schedule.timing_changed"
    return "schedule.arguments_changed" if "args" in changed else "schedule.changed"


def upsert_schedule(
    declaration: Declaration, *, actor: Any, reason: str, now: datetime
) -> Schedule:
    """Create or change a run-time schedule (for example one per tenant), validated like a
    declared one (build ``declaration`` with ``schedule(..., register=False)``).

    1. ``actor`` is a Django user, never a name: the permission checked is theirs and the
       audit record carries their id (a string could claim to be ``django_jobs.sync``).
    2. The declaration is refused as checks E014/E018/E019 refuse a declared one: its job
       must have a registered handler, a local zone its reason and DST choices; and its job
       must be offered at run time (``@job(..., runtime=True)`` or ``RUNTIME_JOBS``; the
       Tasks backend's never), refused on the field ``job``.
    3. Changing a schedule needs ``change`` on it (model, object or tenant permission);
       creating one needs ``add_schedule`` or a ``change`` grant on its tenant.
    4. A schedule declared in code is refused: it changes in its ``schedules.py``, and sync
       would otherwise stop retiring it.
    5. A retired schedule declared active again is revived, audited ``schedule.revived`` with
       its status before and after.
    """
    reason = need_reason(reason, f"schedule {declaration.key!r}")
    user = need_user(actor, f"schedule {declaration.label!r}")
    write = _Write(ensure_aware_utc(now, name="now"), user, reason, Origin.RUNTIME)
    _need_valid_at_run_time(declaration)
    with transaction.atomic():
        existing = _locked_key(declaration.tenant, declaration.key)
        _need_upsert_permission(user, declaration, existing)
        done = _upsert(declaration, existing=existing, write=write)
        store.notify("schedule")  # serving replicas plan it now, not at their next poll
    return done.schedule


def _need_valid_at_run_time(declaration: Declaration) -> None:
    """What ``schedule()`` and the system checks refuse in a declaration, refused here: no
    check runs at run time, and a ``Declaration`` may be built without ``schedule()``."""
    problems = declaration.problems()  # the spec of the record (spec.py)
    if problems:
        raise InvalidSchedule(declaration.label, *problems[0])
    gaps = local_time_gaps(declaration.timing)  # E018/E019
    if gaps:
        raise InvalidSchedule(declaration.label, gaps[0][0], "; ".join(m for _, m in gaps))
    # E014, and a grant reaches only the jobs whose code offers them at run time (a tenant
    # grant must not run the Tasks backend's job, which imports what its arguments name).
    problem = registry.runtime_problem(declaration.job)
    if problem is not None:
        raise InvalidSchedule(declaration.label, "job", problem)
    unfit = registry.get(declaration.job).parameters.problem(declaration.args)
    if unfit is not None:
        raise InvalidSchedule(declaration.label, "args", unfit)


def _need_upsert_permission(user: Any, declaration: Declaration, existing: Schedule | None) -> None:
    if existing is None:
        permissions.require_create(user, declaration.tenant, declaration.label)
        return
    permissions.require(user, "change", existing)
    if existing.origin == Origin.CODE:
        raise JobsError(
            f"schedule {existing} is declared in code: change it in its schedules.py and "
            "deploy (jobs sync writes it); upsert_schedule changes run-time schedules only"
        )
