"""Stranded schedules: active records that nothing will run. No next due instant, so no plan
pass looks at them, and no occurrence a claim will take. ``jobs health`` lists them and check
``django_jobs.W031`` reports them, each with what to do.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import DateTimeField, Exists, ExpressionWrapper, OuterRef, Q, Value

from ..models import (
    CLAIMABLE_STATES,
    TERMINAL_STATES,
    Occurrence,
    OccurrenceState,
    Schedule,
    ScheduleStatus,
    Trigger,
)
from ..scheduling import timings
from ..scheduling.policies import TimingKind


@dataclass(frozen=True)
class Stranded:
    """An active schedule that nothing will run (``stranded_schedules``), and why."""

    tenant: str
    key: str
    why: str

    @property
    def name(self) -> str:
        return f"{self.tenant}/{self.key}" if self.tenant else self.key

    @property
    def what_to_do(self) -> str:
        tenant = f" --tenant {self.tenant}" if self.tenant else ""
        return (
            f"Run manage.py jobs enable {self.key}{tenant} --actor <user> --reason <why>: the "
            "planner looks at it again and its misfire policy decides what it missed (a "
            "one-off's instant too). If its timing has no more instants (a calendar rule past "
            "its UNTIL or COUNT), retire it instead."
        )

    def as_dict(self) -> dict[str, str]:
        return {"schedule": self.name, "tenant": self.tenant, "key": self.key, "why": self.why}


def stranded_schedules(*, now: datetime, limit: int | None = None) -> list[Stranded]:
    """Active, enabled schedules with no next due instant (``next_due_at``) and no occurrence
    that will run (``limit`` of them, by tenant and key; all without). Nothing plans or claims
    them: a one-off whose instant had passed when an older release wrote its record (this one
    decides it then: ``one_offs``), a missed occurrence waiting for a plan pass that will not
    come, a calendar rule past its end, a row written by hand. Not stranded: a one-off whose
    occurrence ended (retention retires it), a parked schedule (listed as parked), enqueued
    work's policy record (never planned). One statement."""
    own = Occurrence.objects.filter(schedule=OuterRef("pk"))
    # Missed before it started: the claim leaves it to a plan pass, and none will come.
    late = ExpressionWrapper(
        Value(now, output_field=DateTimeField()) - OuterRef("max_delay"),
        output_field=DateTimeField(),
    )
    waits = Q(
        state=OccurrenceState.SCHEDULED, trigger=Trigger.SCHEDULE, attempts=0, scheduled_at__lt=late
    )
    rows = (
        Schedule.objects.filter(
            status=ScheduleStatus.ACTIVE, enabled=True, parked_field="", next_due_at__isnull=True
        )
        .exclude(timing_kind=TimingKind.ENQUEUED)
        .annotate(
            runs=Exists(own.filter(state__in=CLAIMABLE_STATES).exclude(waits)),
            waits=Exists(own.filter(waits)),
            ended=Exists(own.filter(state__in=TERMINAL_STATES)),
        )
        .filter(runs=False)
        .exclude(timing_kind__in=sorted(timings.one_off_kinds()), ended=True, waits=False)
        .order_by("tenant", "key")
    )
    return [_stranded(s) for s in (rows if limit is None else rows[:limit])]


def _stranded(schedule: Any) -> Stranded:
    """A row of ``stranded_schedules``, with why nothing will run it."""
    if schedule.waits:
        why = "its occurrence missed its max_delay before it started and waits for a plan pass"
    elif schedule.timing_kind in timings.fixed_instant_kinds() and not schedule.ended:
        instant = schedule.run_at.isoformat() if schedule.run_at else "?"
        why = f"its one-off instant {instant} was never planned"
    else:
        why = "no plan pass will look at it"
    return Stranded(schedule.tenant, schedule.key, why)
