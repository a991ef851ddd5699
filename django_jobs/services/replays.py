"""Replays: a new attempt of an occurrence under the same identity, trigger ``manual``.

``replay`` takes an occurrence that has a row; ``replay_at`` takes a planned instant of a
schedule, creating its occurrence when it has no row (skipped into a summary, or purged).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db import transaction

from .. import permissions, store
from ..clock import ensure_aware_utc
from ..exceptions import JobsError
from ..models import Occurrence, Schedule, ScheduleStatus, Trigger
from ..scheduling import timings
from ..scheduling.timing import instant_problem
from ..validation import need_reason
from .rows import locked, need_same_tenant, occurrence_row, record, shown


def replay(occurrence: Occurrence, *, actor: Any, reason: str, now: datetime) -> Occurrence:
    """A new attempt of the same occurrence: same identity, same scheduled instant, so the
    command's idempotency scope is unchanged. For a dead, failed, skipped, completed or
    cancelled occurrence; the next claim runs it as attempt N+1, trigger ``manual``.
    Returns the occurrence as it now is (the caller's object is left as it was)."""
    reason = need_reason(reason, f"replay of occurrence {shown(occurrence)}")
    now = ensure_aware_utc(now, name="now")
    with transaction.atomic():
        schedule, row = occurrence_row(occurrence, lock=True)
        permissions.require(actor, "replay", schedule)
        need_same_tenant(schedule, row)
        _replay_locked(schedule, row, actor=actor, reason=reason, now=now)
    return Occurrence.objects.get(pk=row.pk)


def _replay_locked(
    schedule: Schedule, occurrence: Occurrence, *, actor: Any, reason: str, now: datetime
) -> None:
    """Replay ``occurrence`` of the locked ``schedule``, audited. A retired one-off becomes
    active again for it (retention retires it again once the replay is final)."""
    before: dict[str, Any] = {"state": occurrence.state, "attempts": occurrence.attempts}
    after: dict[str, Any] = {
        "state": "scheduled",
        "next_attempt": occurrence.attempts + 1,
        "trigger": "manual",
    }
    replayed = store.replay(occurrence.pk, schedule_id=schedule.pk, tenant=schedule.tenant, now=now)
    if not replayed:
        raise JobsError(
            f"occurrence {occurrence.pk} of {schedule} is {occurrence.state}: only a dead, "
            "failed, skipped, completed or cancelled occurrence can be replayed"
        )
    _record_replay(
        schedule, occurrence.pk, before=before, after=after, actor=actor, reason=reason, now=now
    )


def _record_replay(
    schedule: Schedule,
    target: Any,
    *,
    before: dict[str, Any],
    after: dict[str, Any],
    actor: Any,
    reason: str,
    now: datetime,
) -> None:
    """What every replay does once its occurrence is due again: a retired one-off made
    active for it, the audit record, a wake-up for the replicas."""
    _reactivate_for_replay(schedule, now=now, before=before, after=after)
    record(
        schedule,
        now=now,
        actor=actor,
        action="replay",
        reason=reason,
        target_type="occurrence",
        target_id=str(target),
        before=before,
        after=after,
    )
    store.notify("replay")


def _reactivate_for_replay(
    schedule: Schedule, *, now: datetime, before: dict[str, Any], after: dict[str, Any]
) -> None:
    """Replicas claim only occurrences of active schedules: a retired one-off is made active
    again for its replay; a retired recurring schedule is refused (re-declare it)."""
    if schedule.status != ScheduleStatus.RETIRED:
        return
    if schedule.timing_kind not in timings.one_off_kinds():
        raise JobsError(
            f"schedule {schedule} is retired: no replica runs its occurrences; declare it "
            "again (status active) before replaying"
        )
    before["schedule_status"], after["schedule_status"] = schedule.status, ScheduleStatus.ACTIVE
    schedule.status, schedule.retired_at, schedule.updated_at = ScheduleStatus.ACTIVE, None, now
    store.write_status([schedule])


def replay_at(
    schedule: Schedule, *, at: datetime, actor: Any, reason: str, now: datetime
) -> Occurrence:
    """Replay the occurrence of instant ``at`` of ``schedule``, creating it when it has no row
    (an instant skipped into a summary, or purged): the identity is the one that instant
    always had (tenant + key + instant), the trigger ``manual``. ``at`` must be an instant the
    schedule's timing produces, not after ``now``; otherwise the error names the nearest
    real ones."""
    reason = need_reason(reason, f"replay of schedule {shown(schedule)} at {at!r}")
    now = ensure_aware_utc(now, name="now")
    if (problem := instant_problem(at)) is not None:  # no occurrence a page cannot render
        raise JobsError(f"replay of schedule {shown(schedule)}: at: {problem}")
    at = ensure_aware_utc(at, name="at")
    with transaction.atomic():
        schedule = locked(schedule)
        permissions.require(actor, "replay", schedule)
        _need_planned_instant(schedule, at, now=now)
        planned = store.PlannedOccurrence(
            schedule.pk, schedule.tenant, schedule.key, at, trigger=Trigger.MANUAL
        )
        existing = Occurrence.objects.filter(pk=planned.id).first()
        if existing is not None:
            if existing.schedule_id != schedule.pk:  # an identity this schedule does not own
                raise JobsError(f"occurrence {existing.pk} is not an occurrence of {schedule}")
            need_same_tenant(schedule, existing)
            _replay_locked(schedule, existing, actor=actor, reason=reason, now=now)
        else:
            _plan_replay(schedule, planned, actor=actor, reason=reason, now=now)
    return Occurrence.objects.get(pk=planned.id)


def _plan_replay(
    schedule: Schedule, planned: store.PlannedOccurrence, *, actor: Any, reason: str, now: datetime
) -> None:
    """Create the occurrence of a planned instant that has no row, as its replay."""
    # Planned without moving the recovery point: the planner's own instants between it and
    # ``at`` are still planned (this one again is a no-op: same identity).
    store.insert_occurrences([planned], now=now)
    _record_replay(
        schedule,
        planned.id,
        before={"state": None},
        after={
            "state": "scheduled",
            "next_attempt": 1,
            "trigger": "manual",
            "scheduled_at": planned.scheduled_at,
            "created": True,
        },
        actor=actor,
        reason=reason,
        now=now,
    )


def _need_planned_instant(schedule: Schedule, at: datetime, *, now: datetime) -> None:
    try:
        timing = timings.from_record(schedule)
    except (ValueError, OverflowError) as exc:
        raise JobsError(f"schedule {schedule}: its timing cannot be evaluated: {exc}") from None
    if at > now:
        raise JobsError(
            f"schedule {schedule}: {at.isoformat()} is in the future; it runs at its time "
            "(use jobs run-now for an extra run now)"
        )
    if timings.produces(timing, at):
        return
    before, after = timings.neighbours(timing, at)
    nearest = [i.isoformat() for i in (before, after) if i is not None]
    raise JobsError(
        f"schedule {schedule}: {at.isoformat()} is not an instant of its timing; the nearest "
        f"are {' and '.join(nearest) if nearest else 'none'}"
    )
