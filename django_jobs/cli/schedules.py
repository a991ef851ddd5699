"""``jobs list``, ``jobs inspect`` and ``jobs runbooks``: what an operator may look at."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from .. import runbooks, services
from ..conf import get_settings
from ..models import Occurrence, Schedule
from ..safe_error import shown_json
from ..scheduling import rrules, timing_words, timings, upcoming
from .invocation import Invocation


def list_schedules(run: Invocation) -> None:
    visible = services.visible_schedules(actor=run.actor(), tenant=run.options["tenant"])
    queue = run.options.get("queue")
    if queue is not None:
        visible = visible.filter(queue=queue)
    rows = services.with_recovery_points(visible)
    data = [
        {
            "tenant": s.tenant,
            "key": s.key,
            "job": s.job,
            "queue": s.queue,
            "status": s.status,
            "enabled": s.enabled,
            "next_due_at": s.next_due_at,
            "last_completed_at": s.last_completed_at,
        }
        for s in rows
    ]
    lines = [
        f"{s!s:40} {s.status:8} {'enabled' if s.enabled else 'DISABLED':9} "
        f"queue {s.queue:12} next {s.next_due_at.isoformat() if s.next_due_at else '-'}"
        for s in rows
    ]
    none = "no schedules you may see" + (f" on queue {queue!r}" if queue is not None else "")
    run.emit(data, "\n".join(lines) or none)


def _shown(value: object) -> object:
    """A list of instants as ISO 8601 text, not a Python repr."""
    if isinstance(value, list) and value and all(isinstance(v, datetime) for v in value):
        return ", ".join(v.isoformat() for v in value)
    return value


def inspect(run: Invocation) -> None:
    actor = run.actor()
    schedule = run.schedule(actor)
    if run.options["occurrence"]:
        found = services.find_occurrence(run.options["occurrence"], actor=actor, schedule=schedule)
        _inspect_occurrence(run, found, actor=actor, schedule=schedule)
        return
    now = services.now()
    report = services.inspect_schedule(schedule, actor=actor, now=now)
    data = {**_schedule_fields(report.schedule), **_in_words(report.schedule, now)}
    data["next_runs"] = report.next_runs
    data.update(_history(report))
    text = "\n".join(
        [f"{k}: {_shown(v)}" for k, v in data.items() if k != "recent"]
        + [
            f"  {o['scheduled_at']} {o['state']:10} attempts {o['attempts']} {o['id']}"
            for o in data["recent"]
        ]
    )
    run.emit(data, text)


def _schedule_fields(schedule: Schedule) -> dict[str, Any]:
    """The record as ``jobs inspect`` shows it, down to its next due time."""
    return {
        "schedule": str(schedule),
        "job": schedule.job,
        "status": schedule.status,
        "args": _arguments(schedule.args),
        "priority": schedule.priority,
        **_calendar_rule(schedule),
        **_local_time(schedule),
        "enabled": schedule.enabled,
        "disabled": {"by": schedule.disabled_by, "reason": schedule.disabled_reason}
        if not schedule.enabled
        else None,
        "next_due_at": schedule.next_due_at,
        "parked": {
            "field": schedule.parked_field,
            "reason": schedule.parked_reason,
            "at": schedule.parked_at,
        }
        if schedule.parked_field
        else None,
    }


def _in_words(schedule: Schedule, now: datetime) -> dict[str, Any]:
    """The timing in words and its next 10 runs in its zone with DST marks, as the admin's
    schedule page shows them (nothing for a record that cannot be evaluated or is never
    planned)."""
    try:
        timing = timings.from_record(schedule)
    except (ValueError, OverflowError):
        return {}
    runs = upcoming.next_runs(timing, now=now)
    return {
        "timing_in_words": timing_words.describe(timing, now=now).text,
        "next_runs_in_zone": [
            f"{r.local_words} = {r.utc_words}" + "".join(f"  [{m}]" for m in r.marks) for r in runs
        ],
    }


def _history(report: services.ScheduleReport) -> dict[str, Any]:
    """What the schedule last did, how late it is, and its recent occurrences."""
    schedule = report.schedule
    return {
        "last_scheduled_at": schedule.last_scheduled_at,
        "last_started_at": report.last_started_at,
        "last_completed_at": report.last_completed_at,
        "lateness_seconds": report.lateness.total_seconds() if report.lateness else 0,
        "recent": [
            {
                "id": str(o.pk),
                "scheduled_at": o.scheduled_at,
                "state": o.state,
                "attempts": o.attempts,
                "error": o.last_error_message[:200],
            }
            for o in report.recent
        ],
    }


def _arguments(args: Any) -> str:
    """A job's arguments (or an occurrence's result) as ``jobs inspect`` shows them: JSON
    text, with what the secret patterns and ``REDACT_PATTERNS`` match hidden."""
    return shown_json(args, get_settings().REDACT_PATTERNS)


def _calendar_rule(schedule: Schedule) -> dict[str, Any]:
    """A calendar rule's text, the rule in words and its business calendar (nothing for the
    other timings)."""
    if schedule.timing_kind != "rrule":
        return {}
    try:
        words = rrules.from_fields(schedule).describe()
    except (ValueError, OverflowError) as exc:  # a record the planner parks (check E030)
        words = f"(cannot be evaluated: {exc})"
    return {
        "rrule": schedule.rrule,
        "rule_in_words": words,
        "calendar": schedule.calendar or None,
        "on_excluded": schedule.on_excluded,
    }


def _local_time(schedule: Schedule) -> dict[str, str]:
    """A business-local schedule's zone, its reason and its DST choices (nothing for UTC)."""
    if not timings.is_local(schedule):
        return {}
    return {
        "time_zone": schedule.time_zone,
        "zone_reason": schedule.zone_reason or "(none recorded: check W023)",
        "skipped_time": schedule.skipped_time,
        "repeated_time": schedule.repeated_time,
    }


def _inspect_occurrence(
    run: Invocation, occurrence: Occurrence, *, actor: Any, schedule: Schedule
) -> None:
    attempts = services.inspect_occurrence(occurrence, actor=actor)
    data: dict[str, Any] = {
        "id": str(occurrence.pk),
        "schedule": str(schedule),
        "scheduled_at": occurrence.scheduled_at,
        "state": occurrence.state,
        "skip_reason": occurrence.skip_reason,
        "args": _arguments(occurrence.args),
        "priority": occurrence.priority,
        "result": "-" if occurrence.result is None else _arguments(occurrence.result),
        "lease_owner": occurrence.lease_owner,
        "lease_expires_at": occurrence.lease_expires_at,
        "fencing_token": occurrence.fencing_token,
        "last_error": {
            "type": occurrence.last_error_type,
            "message": occurrence.last_error_message,
        },
        "attempts": [
            {
                "number": a.number,
                "token": a.fencing_token,
                "replica": a.replica,
                "trigger": a.trigger,
                "outcome": a.outcome,
                "started_at": a.started_at,
                "finished_at": a.finished_at,
                "error": a.error_message[:200],
            }
            for a in attempts
        ],
    }
    text = "\n".join(
        [f"{k}: {v}" for k, v in data.items() if k != "attempts"]
        + [
            f"  attempt {a['number']} token {a['token']} {a['trigger']:8} {a['outcome']:10} "
            f"{a['replica']} {a['error']}"
            for a in data["attempts"]
        ]
    )
    run.emit(data, text)


def export_runbooks(run: Invocation) -> None:
    """The runbooks of the schedules ``--actor`` may see (retired ones left out)."""
    rows = services.visible_schedules(
        actor=run.actor(),
        tenant=run.options["tenant"],
        key=run.options["key"] or None,
        retired=False,
    )
    sections = [runbooks.markdown(s) for s in rows]
    run.stdout.write("# Runbooks\n\n" + "\n".join(sections) if sections else "no schedules")
