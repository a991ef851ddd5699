"""Operator actions on a schedule: disable, enable, run now, purge; and on one occurrence:
cancel.

Each reads and locks the schedule row itself, checks the actor's permission on it, and writes
its change and its audit record in one transaction.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db import DatabaseError, transaction

from .. import audit, permissions, store
from ..clock import ensure_aware_utc
from ..conf import get_settings
from ..exceptions import JobsError
from ..models import Occurrence, Schedule, ScheduleStatus, Trigger
from ..registry import registry
from ..safe_error import loggable
from ..validation import arguments, need_reason
from .limits import retention_of
from .one_offs import plan_late_one_offs
from .rows import locked, need_same_tenant, occurrence_row, record, shown
from .schedules import unpark

DISABLED_FIELDS = ("enabled", "disabled_by", "disabled_reason", "disabled_at")


def _disabled_state(schedule: Schedule) -> dict[str, Any]:
    """What the row holds about being disabled: the ``before`` and ``after`` of disable and
    enable records, so each says what the row really held, not what the action assumed
    (``paused_by_tenant`` only while it is set: the mark ``resume_tenant`` reads)."""
    state = {name: getattr(schedule, name) for name in DISABLED_FIELDS}
    if schedule.paused_by_tenant:
        state["paused_by_tenant"] = True
    return state


def disable(
    schedule: Schedule,
    *,
    actor: Any,
    reason: str,
    now: datetime,
    cancel_running: bool = False,
    tenant_pause: bool = False,
) -> Schedule:
    """Stop new claims of the schedule on every replica (from their next pass). An occurrence
    already running finishes, unless ``cancel_running``: then its lease ends here and the
    replica running it stops it at its next renewal. Nothing is deleted.

    Disabling a schedule already disabled is recorded as ``disable.repeated``: the row keeps
    who disabled it first, why and since when (what an operator must resolve before enabling
    it), the record's ``before`` shows them, and the new reason is the record's own. It is
    not refused: with ``cancel_running`` it is how a running occurrence of a disabled
    schedule is stopped.

    ``tenant_pause`` (``pause_tenant``'s) marks the schedule it disables as paused with its
    tenant (``Schedule.paused_by_tenant``), the only ones ``resume_tenant`` enables. Any
    other disable clears that mark, repeated or not: a schedule an operator disables during
    a pause stays disabled when the tenant resumes."""
    reason = need_reason(reason, f"disabling schedule {shown(schedule)}")
    now = ensure_aware_utc(now, name="now")
    with transaction.atomic():
        schedule = locked(schedule)
        permissions.require(actor, "disable", schedule)
        before = _disabled_state(schedule)
        cancelled = (
            store.cancel_running(schedule.pk, tenant=schedule.tenant, now=now)
            if cancel_running
            else []
        )
        if schedule.enabled:
            schedule.enabled = False
            schedule.disabled_by, schedule.disabled_reason = audit.actor_name(actor), reason
            schedule.disabled_at = schedule.updated_at = now
            schedule.paused_by_tenant = tenant_pause
            store.write_disabled(schedule)
        elif schedule.paused_by_tenant and not tenant_pause:  # an operator's own, now
            schedule.paused_by_tenant, schedule.updated_at = False, now
            store.write_disabled(schedule)
        record(
            schedule,
            now=now,
            actor=actor,
            action="disable" if before["enabled"] else "disable.repeated",
            reason=reason,
            before=before,
            after={**_disabled_state(schedule), "cancelled": [str(i) for i in cancelled]},
        )
    return schedule


def enable(schedule: Schedule, *, actor: Any, reason: str, now: datetime) -> Schedule:
    """Let replicas claim the schedule again; what it missed meanwhile is planned at the next
    pass and decided by its misfire policy (a one-off's instant the planner would never reach:
    decided now, ``plan_late_one_offs``). A schedule the planner parked is checked again at
    that pass. The record's ``before`` is what the row held: who disabled it, why and when
    (or that it was not disabled), and why it was parked."""
    reason = need_reason(reason, f"enabling schedule {shown(schedule)}")
    now = ensure_aware_utc(now, name="now")
    with transaction.atomic():
        schedule = locked(schedule)
        permissions.require(actor, "disable", schedule)
        before = _disabled_state(schedule)
        if schedule.parked_field:
            before["parked"] = f"{schedule.parked_field}: {schedule.parked_reason}"
        schedule.enabled = True
        schedule.disabled_by, schedule.disabled_reason, schedule.disabled_at = "", "", None
        schedule.paused_by_tenant = False
        unpark(schedule, now=now)
        schedule.updated_at = now
        store.write_enabled(schedule)
        record(
            schedule,
            now=now,
            actor=actor,
            action="enable",
            reason=reason,
            before=before,
            after=_disabled_state(schedule),
        )
        # A one-off whose instant nothing ever planned (an older release wrote its record
        # after the instant): its misfire policy decides it now.
        plan_late_one_offs([schedule], now=now)
        store.notify("enable")
    return schedule


def run_now(
    schedule: Schedule, *, actor: Any, reason: str, now: datetime, args: object = None
) -> Occurrence:
    """An extra occurrence at the current instant (its own identity), trigger ``manual``.

    Without ``args`` it runs with the schedule's arguments, and needs ``run``. With ``args``
    (a JSON object, checked as a declaration's are) it runs with those instead, and the audit
    record keeps them: choosing what a job runs for is changing the schedule, so that needs
    ``change`` as well as ``run``, and the job must be offered at run time
    (``registry.runtime_problem``)."""
    what = f"run-now of schedule {shown(schedule)}"
    reason = need_reason(reason, what)
    given, problem = arguments(args) if args is not None else (None, None)
    if problem is not None:
        raise JobsError(f"{what}: args: {problem}")
    now = ensure_aware_utc(now, name="now")
    with transaction.atomic():
        schedule = locked(schedule)
        permissions.require(actor, "run", schedule)
        if given is not None:
            _need_arguments_allowed(actor, schedule, what, given)
        if not schedule.enabled or schedule.status != ScheduleStatus.ACTIVE:
            raise JobsError(f"schedule {schedule} is not active and enabled: enable it first")
        planned = store.PlannedOccurrence(
            schedule.pk, schedule.tenant, schedule.key, now, trigger=Trigger.MANUAL, args=given
        )
        store.plan([planned], now=now)
        record(
            schedule,
            now=now,
            actor=actor,
            action="run_now",
            reason=reason,
            target_type="occurrence",
            target_id=str(planned.id),
            after={"scheduled_at": now, **({"args": given} if given is not None else {})},
        )
        store.notify("run_now")
    return Occurrence.objects.get(pk=planned.id)


def _need_arguments_allowed(actor: Any, schedule: Schedule, what: str, given: Any) -> None:
    """A run-now with arguments of its own (``given``): ``change`` on the schedule besides
    ``run``, a job offered at run time (a grant never reaches a job whose code did not offer
    it), and a handler whose parameters take them."""
    if not permissions.allowed(actor, "change", schedule):
        raise permissions.Forbidden(
            f"{what}: args: {getattr(actor, 'username', actor)!s} may not give a run "
            "arguments of its own: that needs the change_schedule permission on the schedule "
            "or its tenant besides run_schedule (run now without arguments needs only "
            "run_schedule)"
        )
    problem = registry.runtime_problem(schedule.job)
    if problem is not None:
        raise JobsError(f"{what}: args: {problem}; run it now without arguments of its own")
    unfit = registry.get(schedule.job).parameters.problem(given)
    if unfit is not None:
        raise JobsError(f"{what}: args: {unfit}")


def cancel(occurrence: Occurrence, *, actor: Any, reason: str, now: datetime) -> Occurrence:
    """Cancel one occurrence that has not finished, with the ``disable`` permission on its
    schedule: waiting (scheduled, or failed and waiting for a retry), it will not run;
    running, its lease ends here and the replica running it stops at its next renewal (as
    ``disable(..., cancel_running=True)`` stops a whole schedule's). Audited ``cancel``,
    with the state and lease owner it had. A finished occurrence is refused: replay it."""
    reason = need_reason(reason, f"cancelling occurrence {shown(occurrence)}")
    now = ensure_aware_utc(now, name="now")
    with transaction.atomic():
        schedule, row = occurrence_row(occurrence, lock=True)
        permissions.require(actor, "disable", schedule)
        need_same_tenant(schedule, row)
        if not store.cancel_occurrence(
            row.pk, schedule_id=schedule.pk, tenant=schedule.tenant, now=now
        ):
            raise JobsError(
                f"occurrence {row.pk} of {schedule} is {row.state}: only a scheduled, failed "
                "(waiting for a retry) or processing occurrence can be cancelled"
            )
        record(
            schedule,
            now=now,
            actor=actor,
            action="cancel",
            reason=reason,
            target_type="occurrence",
            target_id=str(row.pk),
            before={"state": row.state, "lease_owner": row.lease_owner},
            after={"state": "cancelled"},
        )
    return Occurrence.objects.get(pk=row.pk)


def purge(schedule: Schedule, *, actor: Any, now: datetime) -> int:
    """Delete the schedule's finished occurrences beyond its retention Limit now, with their
    attempts and steps, in batches, all in one transaction with its audit record, which
    names the Limit applied (``keep_for``, ``keep_last``: the ``schedule.retention_changed``
    record that set it says who and why). The schedule is the row ``schedule``'s primary
    key names, locked and checked here.

    All or nothing: if the database refuses (a project table still references an
    occurrence, say), nothing is deleted, a ``purge.failed`` audit record says so in a
    transaction of its own, and ``JobsError`` names the schedule and the cause.
    """
    now = ensure_aware_utc(now, name="now")
    audit.actor_name(actor)  # a name the audit record can hold, or refused before anything else
    checked: Schedule | None = None  # the locked row, once the actor may purge it
    try:
        with transaction.atomic():
            row = locked(schedule)
            permissions.require(actor, "purge", row)
            checked = row
            deleted = _purge_batches(row, now=now)
            record(
                row,
                now=now,
                actor=actor,
                action="purge",
                reason="retention Limit",
                after={"deleted": deleted, **retention_of(row)},
            )
    except DatabaseError as exc:
        if checked is None:  # refused before any permission was established: nothing to say
            raise
        _record_failed_purge(checked, exc, actor=actor, now=now)
        raise JobsError(
            f"purge of {checked} failed and deleted nothing: {type(exc).__name__}: {_safe(exc)}"
        ) from exc
    return deleted


def _purge_batches(schedule: Schedule, *, now: datetime) -> int:
    batch = get_settings().PURGE_BATCH_SIZE
    deleted = 0
    while count := store.purge_batch(schedule.pk, now=now, batch_size=batch):
        deleted += count
        if count < batch:
            break
    return deleted


def _safe(exc: BaseException) -> str:
    return loggable(exc, patterns=get_settings().REDACT_PATTERNS, max_chars=500)


def _record_failed_purge(
    schedule: Schedule, exc: BaseException, *, actor: Any, now: datetime
) -> None:
    with transaction.atomic():  # an outage fails this too: then the outage is raised
        record(
            schedule,
            now=now,
            actor=actor,
            action="purge.failed",
            reason="retention Limit",
            after={"deleted": 0, "error_type": type(exc).__name__, "error": _safe(exc)},
        )
