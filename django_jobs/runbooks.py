"""The recovery procedures of each schedule: inspection, manual replay, disable.

Each names the exact interface that performs it and what happens to an occurrence already
claimed. ``jobs sync`` (and every run-time schedule change) writes them as ``Runbook`` rows
through the store (``store.write_runbooks``): this module decides their texts and which rows
are stale. ``manage.py jobs runbooks`` exports them as markdown. None of the procedures writes
the tables directly.

The export is read where markdown is rendered (a wiki, a repository, a chat), so no text of a
record becomes markup there: owners, reasons and the runbook texts are escaped (HTML's
``<``, ``>``, ``&`` as entities, markdown's punctuation with a backslash, one line each), and
commands and rules are code spans whose fence no backtick inside them can close.
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence

from . import store
from .models import Runbook, RunbookKind, Schedule
from .scheduling import timings

# Punctuation that starts markdown's inline syntax (code, emphasis, links and images,
# strikethrough, tables, headings): escaped with a backslash in a record's own text. An
# underscore inside a word (``America/New_York``, ``LEASE_SECONDS``) is never emphasis in
# CommonMark, so it is left as it is.
_MARKUP = re.compile(r"([\\`*\[\]~!|#]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9]))")
_BACKTICKS = re.compile(r"`+")


def _text(value: object) -> str:
    """``value`` as literal markdown text on one line: never a tag, a script, a link or
    emphasis where the export is rendered, whoever wrote the record's owner or reason."""
    text = html.escape(" ".join(str(value).split()), quote=False)
    return _MARKUP.sub(r"\\\1", text)


def _code(value: object) -> str:
    """``value`` as a markdown code span on one line (a span's text is never markup): its
    fence is longer than any run of backticks inside, so none of them closes it."""
    text = " ".join(str(value).split())
    fence = "`" * (max((len(run) for run in _BACKTICKS.findall(text)), default=0) + 1)
    pad = " " if not text or text[0] == "`" or text[-1] == "`" else ""
    return f"{fence}{pad}{text}{pad}{fence}"


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
                "the same occurrence (same identity and scheduled instant), trigger manual. Its "
                f"retry budget starts afresh: up to {schedule.max_attempts} attempt"
                f"{'s' if schedule.max_attempts != 1 else ''} (N+1 onwards) before it is dead "
                "again."
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


TEXTS = ("interface", "claimed_occurrence_effect", "verification")


def rows(schedule: Schedule) -> list[Runbook]:
    """The schedule's three Runbook rows as this release words them (unsaved)."""
    return [
        Runbook(schedule=schedule, kind=k, **texts) for k, texts in procedures(schedule).items()
    ]


def stale(schedules: Sequence[Schedule]) -> list[Runbook]:
    """The Runbook rows of ``schedules`` that are missing or worded otherwise than
    ``procedures`` words them now (unsaved, as they should be): one read of them all."""
    have = {
        (sid, kind): texts
        for sid, kind, *texts in Runbook.objects.filter(
            schedule_id__in=[s.pk for s in schedules]
        ).values_list("schedule_id", "kind", *TEXTS)
    }
    return [
        Runbook(schedule=schedule, kind=kind, **texts)
        for schedule in schedules
        for kind, texts in procedures(schedule).items()
        if have.get((schedule.pk, kind)) != [texts[name] for name in TEXTS]
    ]


def write(schedule: Schedule) -> int:
    """Create the schedule's three Runbook rows, or bring them up to date; return how many
    rows were created or changed (0 when they were current: one read, no write)."""
    written = stale([schedule])
    store.write_runbooks(written)
    return len(written)


def markdown(schedule: Schedule) -> str:
    """The schedule's runbook records as a markdown section, every text of the record escaped
    (see the module)."""
    lines = [
        f"## {_text(schedule)}",
        "",
        f"Job {_code(schedule.job)}, owned by {_text(schedule.operating_owner)} "
        f"(record: {_text(schedule.record_owner)}).",
        "",
    ]
    if schedule.timing_kind == "rrule":
        lines[-1:-1] = [
            "",
            f"Calendar rule {_code(schedule.rrule)}"
            + (
                f"; an occurrence on an excluded date: {_code(schedule.on_excluded)}"
                if schedule.calendar
                else ""
            )
            + " (the rule in words: `manage.py jobs inspect`).",
        ]
    if timings.is_local(schedule):
        reason = schedule.zone_reason or "(no reason recorded)"
        lines[-1:-1] = [
            "",
            f"Business-local: runs in {_text(schedule.time_zone)}, because {_text(reason)}. A "
            f"local time that does not exist is {_code(schedule.skipped_time)}; one that occurs "
            f"twice is {_code(schedule.repeated_time)}.",
        ]
    for runbook in schedule.runbooks.order_by("kind"):
        lines += [
            f"### {_text(runbook.get_kind_display())}",
            "",
            f"- Interface: {_code(runbook.interface)}",
            f"- Already claimed occurrence: {_text(runbook.claimed_occurrence_effect)}",
            f"- Verify: {_text(runbook.verification)}",
            "",
        ]
    return "\n".join(lines)
