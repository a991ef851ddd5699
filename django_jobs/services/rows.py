"""The rows a service decides with, and the audit record of what it did to them.

Of an object its caller hands over, a service uses only the primary key: it reads that row
itself (locking its schedule when it writes), so a caller-built object can neither borrow a
permission nor mislabel an audit record.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.contrib.auth.base_user import AbstractBaseUser
from django.core.exceptions import ValidationError
from django.db import models

from .. import audit
from ..exceptions import JobsError
from ..models import Occurrence, Schedule
from ..scheduling import planner, timings


def first_due(schedule: Schedule, *, now: datetime) -> datetime:
    """When the planner must first look at ``schedule``, a record just made at ``now``
    (``planner.first_due``). A record whose timing cannot be evaluated is due ``now``: the
    next plan pass parks it, naming the field."""
    try:
        timing = timings.from_record(schedule)
        return planner.first_due(timing, since=schedule.created_at, now=now)
    except (ValueError, OverflowError):
        return now


def record(
    schedule: Schedule,
    *,
    now: datetime,
    actor: Any,
    action: str,
    reason: str,
    target_type: str = "schedule",
    target_id: str | None = None,
    **changes: Any,
) -> None:
    """Record an action on ``schedule`` through the one audit writer (``audit.record``).

    ``schedule`` is the row the service read and locked, so the record's schedule and tenant
    are the ones acted on."""
    audit.record(
        at=now,
        actor=actor,
        action=action,
        tenant=schedule.tenant,
        schedule_id=schedule.pk,
        target_type=target_type,
        target_id=target_id,
        reason=reason,
        before=changes.get("before"),
        after=changes.get("after"),
    )


def need_user(actor: Any, what: str) -> Any:
    """``actor`` if it is a Django user whose name an audit record can hold."""
    if not isinstance(actor, AbstractBaseUser):
        raise JobsError(
            f"{what}: actor: a Django user is needed (their permission is checked and their "
            f"id audited), got {type(actor).__name__}"
        )
    audit.actor_name(actor)  # a name the audit record can hold
    return actor


def primary_key(model: type[models.Model], obj: Any) -> Any:
    """The primary key ``obj`` names, as ``model`` stores it: all a service takes from an
    object its caller built. None when it is not one (``"abc"`` for a UUID)."""
    return parse_key(model, getattr(obj, "pk", None))


def parse_key(model: type[models.Model], value: Any) -> Any:
    """``value`` as a primary key of ``model`` (an occurrence id typed by an operator), or
    None when it cannot be one: a lookup of it could match no row."""
    field = model._meta.pk
    assert field is not None
    try:
        return field.to_python(value)
    except ValidationError:
        return None


def shown(obj: Any) -> str:
    """The primary key ``obj`` names, for an error message (cut: it may be anything)."""
    text = repr(getattr(obj, "pk", None))
    return text if len(text) <= 50 else f"{text[:50]}..."


def schedule_row(schedule: Schedule, *, lock: bool) -> Schedule:
    """The schedule row the caller's object names by its primary key (nothing else of it is
    trusted), locked for the service's transaction when the service writes."""
    pk = primary_key(Schedule, schedule)
    rows = Schedule.objects.select_for_update() if lock else Schedule.objects.all()
    row = rows.filter(pk=pk).first() if pk is not None else None
    if row is None:
        raise JobsError(f"no schedule with id {shown(schedule)}")
    return row


def locked(schedule: Schedule) -> Schedule:
    """``schedule_row(schedule, lock=True)``: the row every writing service starts from."""
    return schedule_row(schedule, lock=True)


def occurrence_row(occurrence: Occurrence, *, lock: bool) -> tuple[Schedule, Occurrence]:
    """The occurrence row the caller's object names by its primary key, and that row's own
    schedule (never the caller's ``occurrence.schedule``). When the service writes, the
    schedule is locked first (the order every writer takes them in), then the occurrence
    (``FOR UPDATE``: a claim or an ending write of it waits for the service's transaction),
    so the service decides, and its statement reads, the occurrence as it is under the lock
    (a cancel racing a claim wrote no history row for the claimed attempt otherwise)."""
    pk = primary_key(Occurrence, occurrence)
    row = Occurrence.objects.filter(pk=pk).first() if pk is not None else None
    if row is not None:
        rows = Schedule.objects.select_for_update() if lock else Schedule.objects.all()
        schedule = rows.get(pk=row.schedule_id)  # PROTECT: an occurrence keeps its schedule
        row = Occurrence.objects.select_for_update().filter(pk=pk).first() if lock else row
    if row is None:
        raise JobsError(f"no occurrence with id {shown(occurrence)}")
    return schedule, row


def need_same_tenant(schedule: Schedule, occurrence: Occurrence) -> None:
    """An occurrence carries its schedule's tenant; one that does not was written outside
    django_jobs and is refused rather than acted on in either tenant's name."""
    if occurrence.tenant != schedule.tenant:
        raise JobsError(
            f"occurrence {occurrence.pk} names tenant {occurrence.tenant!r} but its schedule "
            f"{schedule} is of tenant {schedule.tenant!r}: refused; repair the row first"
        )
