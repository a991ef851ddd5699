"""``jobs list``, ``jobs inspect`` and ``jobs runbooks``: what an operator may look at."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from .. import runbooks, services, words
from ..conf import get_settings
from ..models import Attempt, Occurrence, Schedule
from ..safe_error import shown_json
from ..scheduling import rrules, timings
from . import next_steps
from .invocation import Invocation


def list_schedules(run: Invocation) -> None:
    """One line per schedule: newest outcome, failing streak, dead letters, disabled or
    parked, next run; those that most need attention first, at most ``services.LIST_CAP``."""
    options = run.options
    listing = services.list_schedules(
        actor=run.actor(),
        now=services.now(),
        tenant=options["tenant"],
        queue=options.get("queue"),
        dead=options.get("dead", False),
        failing=options.get("failing", False),
    )
    data = {
        "schedules": [_listed(line) for line in listing.lines],
        "more": listing.more,
        "cap": listing.cap,
        "retired_not_listed": listing.retired,
    }
    lines = _table([LIST_HEADER, *(_listed_words(line) for line in listing.lines)])
    if not listing.lines:
        lines = [_nothing_listed(options)]
    if listing.more:
        lines.append(
            f"the first {listing.cap} shown, those that most need attention first; more match: "
            "narrow with --tenant, --queue, --dead or --failing"
        )
    if listing.retired:
        lines.append(
            f"{listing.retired} retired schedule(s) not listed: jobs inspect KEY shows one"
        )
    run.emit(data, "\n".join(lines))


LIST_HEADER = ("SCHEDULE", "JOB", "STATUS", "ENABLED", "PARKED", "QUEUE", "LAST OUTCOME",
               "FAILING", "DEAD", "NEXT RUN")  # fmt: skip


def _listed(line: Any) -> dict[str, Any]:
    """A line as ``--json`` has it: instants in ISO 8601, counts as numbers."""
    s = line.schedule
    return {
        "tenant": s.tenant,
        "key": s.key,
        "job": s.job,
        "queue": s.queue,
        "status": s.status,
        "enabled": s.enabled,
        "disabled_by": None if s.enabled else s.disabled_by,
        "parked_field": s.parked_field or None,
        "last_outcome": line.last_outcome,
        "failing_streak": line.failing_streak,
        "dead_letters": line.dead_letters,
        "dead_letters_capped": line.dead_letters_capped,
        "next_run": _iso(line.next_run),
        "next_due_at": _iso(s.next_due_at),
        "last_completed_at": _iso(line.last_completed_at),
    }


def _listed_words(line: Any) -> tuple[str, ...]:
    """A line as the text shows it: DISABLED and by whom, the parked field, instants in
    words."""
    s = line.schedule
    return (
        str(s),
        s.job,
        s.status,
        "enabled" if s.enabled else f"DISABLED by {s.disabled_by or '-'}",
        s.parked_field or "-",
        s.queue,
        line.last_outcome or "-",
        str(line.failing_streak),
        f"{line.dead_letters}{'+' if line.dead_letters_capped else ''}",
        words.instant(line.next_run),
    )


def _table(rows: list[tuple[str, ...]]) -> list[str]:
    """``rows`` in columns as wide as their widest cell, two spaces apart."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows
    ]


def _nothing_listed(options: dict[str, Any]) -> str:
    """What ``jobs list`` says when no schedule matches, naming each filter."""
    said = ["no schedules you may see"]
    if options["tenant"] is not None:
        said.append(f"in tenant {options['tenant']!r}")
    if options.get("queue") is not None:
        said.append(f"on queue {options['queue']!r}")
    if options.get("dead"):
        said.append("with a dead letter")
    if options.get("failing"):
        said.append("whose newest ended occurrence failed or went dead")
    return " ".join(said)


def _iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat()


def inspect(run: Invocation) -> None:
    actor = run.actor()
    schedule = run.schedule(actor)
    if run.options["occurrence"]:
        found = services.find_occurrence(run.options["occurrence"], actor=actor, schedule=schedule)
        _inspect_occurrence(run, found, actor=actor, schedule=schedule)
        return
    now = services.now()
    report = services.inspect_schedule(schedule, actor=actor, now=now)
    summary = services.schedule_summary(schedule, actor=actor, now=now)
    standing = services.schedule_standing(schedule, actor=actor, now=now)
    steps = next_steps.for_schedule(
        standing,
        report.schedule,
        report.recent,
        actor=run.options["actor"],
        user=actor,
        problem=summary.problem,
    )
    data = {
        **_schedule_fields(report.schedule),
        **_in_words(summary),
        **_outcomes(standing),
        **_history(report),
        "next_steps": next_steps.commands(steps),
    }
    run.emit(data, "\n".join(_schedule_text(data, report, summary) + next_steps.text(steps)))


def _schedule_text(
    data: dict[str, Any], report: services.ScheduleReport, summary: services.ScheduleSummary
) -> list[str]:
    """The record as ``jobs inspect`` prints it: its fields, instants and durations in words,
    the next runs in its zone and UTC with DST marked, the recent occurrences."""
    schedule = report.schedule
    lines = []
    for key, value in data.items():
        if key == "disabled":
            lines += [] if schedule.enabled else [f"disabled: {_disabled_words(schedule)}"]
        elif key == "parked":
            lines.append(f"parked: {_parked_words(schedule)}")
        elif key == "next_runs":
            lines.append("next_runs:" if summary.next_runs else "next_runs: none planned")
            lines += [f"  {_run_words(r)}" for r in summary.next_runs]
        elif key == "lateness_seconds":
            lines.append(f"lateness: {_lateness_words(report.lateness)}")
        elif key == "recent":
            lines.append("recent:" if report.recent else "recent: none")
            lines += [
                f"  {words.instant(o.scheduled_at)}  {o.state:10} attempts {o.attempts}  {o.pk}"
                for o in report.recent
            ]
        elif key != "next_steps":
            lines.append(f"{key}: {_words(value)}")
    return lines


def _words(value: object) -> str:
    """A field's value in the text: an instant in words, yes or no, ``-`` for none."""
    if isinstance(value, datetime):
        return words.instant(value)
    if isinstance(value, bool):
        return "yes" if value else "no"
    return "-" if value is None or value == "" else str(value)


def _disabled_words(schedule: Schedule) -> str:
    when = f" at {words.instant(schedule.disabled_at)}" if schedule.disabled_at else ""
    return f"by {schedule.disabled_by or '-'}{when}: {schedule.disabled_reason}"


def _parked_words(schedule: Schedule) -> str:
    if not schedule.parked_field:
        return "no"
    since = f" since {words.instant(schedule.parked_at)}" if schedule.parked_at else ""
    return f"{schedule.parked_field}{since}: {schedule.parked_reason}"


def _lateness_words(lateness: timedelta | None) -> str:
    if lateness is None:
        return "none (no due occurrence waits to start)"
    return f"{words.duration(lateness)} (the oldest due occurrence not started has waited so long)"


def _run_words(run: Any) -> str:
    """``Sun 2027-03-14 09:00:00 EDT = Sun 2027-03-14 13:00:00 UTC  [DST starts: ...]``; a
    UTC schedule's run once (``Mon 2026-03-02 09:00:00 UTC``)."""
    shown = (
        run.utc_words
        if run.local_words == run.utc_words
        else f"{run.local_words} = {run.utc_words}"
    )
    return shown + "".join(f"  [{m}]" for m in run.marks)


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


def _in_words(summary: services.ScheduleSummary) -> dict[str, Any]:
    """The timing in words and its next runs (the next 10, in its zone and UTC, DST marked),
    as the admin's schedule summary computes them, for every timing kind. In ``--json`` each
    run is its UTC instant and local wall time (ISO 8601), the same in words, and its
    marks."""
    said: dict[str, Any] = {}
    if summary.words is not None:
        said["timing_in_words"] = summary.words.text
    if summary.problem:
        said["timing_problem"] = summary.problem
    said["next_runs"] = [
        {
            "at": r.at.isoformat(),
            "local": r.local.isoformat(),
            "local_words": r.local_words,
            "utc_words": r.utc_words,
            "marks": list(r.marks),
        }
        for r in summary.next_runs
    ]
    return said


def _outcomes(standing: services.Standing) -> dict[str, Any]:
    """Its newest outcome, failing streak and dead letters, as ``jobs list`` shows them."""
    line = standing.line
    if line is None:  # retired: not among the listed lines
        return {}
    return {
        "last_outcome": line.last_outcome,
        "failing_streak": line.failing_streak,
        "dead_letters": line.dead_letters,
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
    """The occurrence, its attempts (each with how long it ran) and its next steps."""
    attempts = services.inspect_occurrence(occurrence, actor=actor)
    steps = next_steps.for_occurrence(occurrence, schedule, actor=run.options["actor"], user=actor)
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
                "duration_seconds": _ran(a).total_seconds() if a.finished_at else None,
                "error": a.error_message[:200],
            }
            for a in attempts
        ],
        "next_steps": next_steps.commands(steps),
    }
    error = occurrence.last_error_type
    text = [
        *(
            f"{k}: {_words(v)}"
            for k, v in data.items()
            if k not in {"last_error", "attempts", "next_steps"}
        ),
        f"last_error: {f'{error}: {occurrence.last_error_message}' if error else '-'}",
        "attempts:" if attempts else "attempts: none",
        *(_attempt_words(a) for a in attempts),
        *next_steps.text(steps),
    ]
    run.emit(data, "\n".join(text))


def _ran(attempt: Attempt) -> timedelta:
    return (attempt.finished_at or attempt.started_at) - attempt.started_at


def _attempt_words(attempt: Attempt) -> str:
    """``attempt 2 (token 7, retry) failed on w1: started 2026-03-01 12:00:30 UTC, ran 1.2 s:
    boom``; an attempt still running says so."""
    if attempt.finished_at:
        ran = f"ran {words.duration(_ran(attempt))}"
    else:
        ran = "still running" if attempt.outcome == "running" else "waiting for a run thread"
    error = f": {attempt.error_message[:200]}" if attempt.error_message else ""
    return (
        f"  attempt {attempt.number} (token {attempt.fencing_token}, {attempt.trigger}) "
        f"{attempt.outcome or 'running'} on {attempt.replica}: started "
        f"{words.instant(attempt.started_at)}, {ran}{error}"
    )


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
