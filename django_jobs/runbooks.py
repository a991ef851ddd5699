"""The recovery procedures of each schedule: inspection, manual replay, disable.

Each names the exact interface that performs it and what happens to an occurrence already
claimed. ``jobs sync`` (and every run-time schedule change) writes them as ``Runbook`` rows;
``manage.py jobs runbooks`` exports them as markdown. None of them writes the tables directly.
"""

from __future__ import annotations

from .models import Runbook, RunbookKind, Schedule
from .scheduling.timings import is_utc


def _target(schedule: Schedule) -> str:
    return f"{schedule.key} --tenant {schedule.tenant}" if schedule.tenant else schedule.key


def _paused(schedule: Schedule) -> str:
    """The kill switch entries that pause ``schedule``, narrowest first (see conf.py)."""
    if not schedule.tenant:
        return f"['{schedule.key}'] (or ['*'])"
    return (
        f"['{schedule.tenant}/{schedule.key}'] for tenant {schedule.tenant} only "
        f"(['{schedule.tenant}/*'] for every schedule of tenant {schedule.tenant}, "
        f"['{schedule.key}'] for this key in every tenant, ['*'] for everything)"
    )


def procedures(schedule: Schedule) -> dict[str, dict[str, str]]:
    """The three procedures of ``schedule``, by kind."""
    target = _target(schedule)
    return {
        RunbookKind.INSPECT: {
            "interface": (
                f"python manage.py jobs inspect {target} --actor <your user>  (add --json for "
                "scripts; --occurrence <id> for one occurrence and its attempts)"
            ),
            "claimed_occurrence_effect": "None: inspection changes nothing.",
            "verification": (
                "The output shows enabled, next due, recovery points, lateness and the recent "
                "occurrences with their outcomes; a dead occurrence shows its safe error."
            ),
        },
        RunbookKind.REPLAY: {
            "interface": (
                "python manage.py jobs replay <occurrence id> --actor <your user> --reason "
                f"'<why>'; an instant without a row (summarised or purged): python manage.py "
                f"jobs replay {target} --at <instant with offset> --actor <your user> "
                "--reason '<why>'"
            ),
            "claimed_occurrence_effect": (
                "A claimed (processing) occurrence cannot be replayed: wait for it to end, or "
                "disable the schedule with --cancel-running first. Replay creates attempt N+1 of "
                "the same occurrence (same identity and scheduled instant), trigger manual."
            ),
            "verification": (
                "python manage.py jobs inspect "
                f"{target} --occurrence <id> --actor <your user> lists the new attempt; "
                "the audit record names you and your reason."
            ),
        },
        RunbookKind.DISABLE: {
            "interface": (
                f"python manage.py jobs disable {target} --actor <your user> --reason '<why>' "
                "[--cancel-running]; re-enable with jobs enable. Without database access: the "
                f"kill switch DJANGO_JOBS['PAUSED_SCHEDULES'] = {_paused(schedule)}, read by "
                "every worker at each pass."
            ),
            "claimed_occurrence_effect": (
                "An occurrence already claimed runs to its end. With --cancel-running its lease "
                "ends at once and the replica running it stops it at its next renewal (within a "
                "third of LEASE_SECONDS); its attempt is recorded cancelled. The kill switch "
                "stops claims only."
            ),
            "verification": (
                f"python manage.py jobs inspect {target} --actor <your user> shows enabled: no "
                "and no new attempts; on enable, what was missed follows the misfire policy."
            ),
        },
    }


def write(schedule: Schedule) -> int:
    """Create the schedule's three Runbook rows, or bring them up to date; return how many
    rows were created or changed (0 when they were current: one read, no write)."""
    wanted = procedures(schedule)
    have = {r.kind: r for r in Runbook.objects.filter(schedule=schedule)}
    written = 0
    for kind, fields in wanted.items():
        row = have.get(kind)
        if row is not None and all(getattr(row, k) == v for k, v in fields.items()):
            continue
        Runbook.objects.update_or_create(schedule=schedule, kind=kind, defaults=fields)
        written += 1
    return written


def markdown(schedule: Schedule) -> str:
    """The schedule's runbook records as a markdown section."""
    lines = [
        f"## {schedule}",
        "",
        f"Job `{schedule.job}`, owned by {schedule.operating_owner} "
        f"(record: {schedule.record_owner}).",
        "",
    ]
    if schedule.timing_kind == "rrule":
        lines[-1:-1] = [
            "",
            f"Calendar rule `{schedule.rrule}`"
            + (
                f"; an occurrence on an excluded date: `{schedule.on_excluded}`"
                if schedule.calendar
                else ""
            )
            + " (the rule in words: `manage.py jobs inspect`).",
        ]
    if schedule.timing_kind in ("cron", "rrule") and not is_utc(schedule.time_zone):
        lines[-1:-1] = [
            "",
            f"Business-local: runs in {schedule.time_zone}, because "
            f"{schedule.zone_reason or '(no reason recorded)'}. A local time that does not exist "
            f"is `{schedule.skipped_time}`; one that occurs twice is `{schedule.repeated_time}`.",
        ]
    for runbook in schedule.runbooks.order_by("kind"):
        lines += [
            f"### {runbook.get_kind_display()}",
            "",
            f"- Interface: `{runbook.interface}`",
            f"- Already claimed occurrence: {runbook.claimed_occurrence_effect}",
            f"- Verify: {runbook.verification}",
            "",
        ]
    return "\n".join(lines)
