"""One-off records written after their instant: a deploy that lands late (migrate and the
sync take longer than planned), a run-time one-off created for an instant just past, or a
one-off's instant moved to one already past.

The plan pass plans a record's instants from its creation, or from its recovery point, on:
it never reaches such an instant, so the record would stay active with nothing planned,
silently. The service that writes the record decides that instant in its own transaction,
as the planner decides any instant it finds (``planner.plan_unreached``): within
``max_delay`` it is on time and runs now; later, its misfire policy runs it late
(``replay_once``, ``replay_all``: trigger ``catchup``) or records it skipped (``skip``:
reason ``misfire``), with a warning line, a ``misfire.skipped`` audit record and the
``occurrence_skipped`` alert.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

import structlog

from .. import audit, signals, store
from ..models import Schedule, ScheduleStatus
from ..scheduling import planner, timings
from ..scheduling.policies import Misfire
from ..signals import OccurrenceEvent
from ..store import PlannedOccurrence

log = structlog.get_logger("django_jobs.planner")


@dataclass(frozen=True)
class _Late:
    """A one-off's instant decided by a service: its schedule and its occurrence."""

    schedule: Schedule
    occurrence: PlannedOccurrence


def plan_late_one_offs(schedules: Iterable[Schedule], *, now: datetime) -> None:
    """Decide the instant of every ``at`` one-off among ``schedules`` (records just written,
    in the caller's transaction) that the plan pass would never reach.

    1. decide each active, enabled record with the planner (``planner.plan_unreached``);
    2. insert what was decided, moving each recovery point up to its instant (one
       statement); an instant that already has its occurrence is left as it is;
    3. log each occurrence the insert made; one recorded skipped also gets its audit record
       (action ``misfire.skipped``) and, once the caller commits, its alert.
    """
    late = [
        _Late(schedule, occurrence)
        for schedule in schedules
        for occurrence in _decide(schedule, now=now)
    ]
    if not late:
        return
    new = set(store.plan([one.occurrence for one in late], now=now))
    made = [one for one in late if one.occurrence.id in new]
    for one in made:
        _report(one, now=now)
    skipped = [one for one in made if one.occurrence.skip_reason is not None]
    signals.send_after_commit(signals.occurrence_skipped, (_event(one) for one in skipped))


def _decide(schedule: Schedule, *, now: datetime) -> list[PlannedOccurrence]:
    """The occurrence of ``schedule``'s unreached instant (none when the plan pass reaches
    it, or the record is not one the planner plans). A record the planner cannot evaluate
    is left to the plan pass, which parks it naming the field."""
    if schedule.status != ScheduleStatus.ACTIVE or not schedule.enabled:
        return []
    if schedule.timing_kind not in timings.fixed_instant_kinds():
        return []  # an ``at`` one-off's, whose instant may come before its record's creation
    if not schedule.run_at or schedule.run_at > now:
        return []  # cheap: a sync of thousands evaluates no timing it need not
    try:
        decision = planner.plan_unreached(
            planner.PlanRequest(
                timing=timings.from_record(schedule),
                max_delay=schedule.max_delay,
                misfire=Misfire(schedule.misfire),
                max_catchup=schedule.max_catchup,
                last_scheduled_at=schedule.last_scheduled_at,
                since=schedule.created_at,
                now=now,
            )
        )
    except (ValueError, OverflowError):
        return []
    if decision is None:
        return []

    return store.planned_occurrences(schedule, decision)


def _report(one: _Late, *, now: datetime) -> None:
    """The log line of a late one-off's occurrence; a skipped one's audit record too."""
    schedule, occurrence = one.schedule, one.occurrence
    instant = occurrence.scheduled_at
    late = round((now - instant).total_seconds(), 3)
    if occurrence.skip_reason is None:
        log.info(
            "one_off.late",
            schedule=str(schedule),
            occurrence=str(occurrence.id),
            scheduled_at=instant.isoformat(),
            late_seconds=late,
            trigger=occurrence.trigger.value,
        )
        return
    log.warning(
        "occurrence.skipped",
        schedule=str(schedule),
        occurrence=str(occurrence.id),
        scheduled_at=instant.isoformat(),
        late_seconds=late,
        reason=occurrence.skip_reason.value,
        misfire=schedule.misfire,
    )
    audit.record(
        at=now,
        actor=audit.PLANNER,
        action="misfire.skipped",
        tenant=schedule.tenant,
        schedule_id=schedule.pk,
        target_type="occurrence",
        target_id=str(occurrence.id),
        reason=(
            f"one-off at {instant.isoformat()} written {late:g} s after its instant, later "
            f"than its max_delay ({schedule.max_delay}): skipped by misfire policy "
            f"{schedule.misfire}"
        ),
        after={"count": 1, "first": instant, "last": instant},
    )


def _event(one: _Late) -> OccurrenceEvent:
    """The ``occurrence_skipped`` alert of a late one-off recorded skipped."""
    schedule, occurrence = one.schedule, one.occurrence
    assert occurrence.skip_reason is not None
    return OccurrenceEvent(
        occurrence_id=occurrence.id,
        schedule_id=schedule.pk,
        tenant=schedule.tenant,
        key=schedule.key,
        job=schedule.job,
        scheduled_at=occurrence.scheduled_at,
        attempt=0,
        reason=occurrence.skip_reason.value,
    )
