"""The next steps ``jobs inspect`` ends with: the commands that fit the record's state, ready to
copy, each with what it will do (``services.consequences``, the sentences the admin's
confirmations say).

A schedule: its newest dead letter to inspect and replay (and ``jobs list --dead``), its
newest failed run to inspect, the field to fix when it is parked or its timing cannot be
evaluated, ``enable`` when it is disabled or parked, ``purge`` when finished occurrences lie
beyond its retention Limit, and ``disable`` when it is enabled and active, with ``run-now``
too when it is healthy and has planned runs (not a job's ``@<job>`` policy record, whose
run-now would run the record's empty arguments). An occurrence: ``replay`` once it has
finished (or failed and waits for a retry), ``cancel`` while it has not.

Only the steps the user may take are shown, as the admin shows only the buttons a user may
use: each command is checked with ``permissions.allowed`` for the action its service
requires (replay: ``replay``; cancel, disable, enable: ``disable``; run-now: ``run``; purge:
``purge``). When that leaves a step out, one last line says which and whom to ask.
"""

from __future__ import annotations

import shlex
import textwrap
from dataclasses import dataclass
from typing import Any

from .. import permissions, services
from ..models import Occurrence, OccurrenceState, Origin, Schedule, ScheduleStatus
from ..scheduling.policies import TimingKind

COMMAND = "python manage.py jobs"
REASON = '--reason "..."'

_FINISHED = (
    OccurrenceState.DEAD,
    OccurrenceState.COMPLETED,
    OccurrenceState.SKIPPED,
    OccurrenceState.CANCELLED,
)
_UNFINISHED = (OccurrenceState.SCHEDULED, OccurrenceState.FAILED, OccurrenceState.PROCESSING)


@dataclass(frozen=True)
class Step:
    """Why (and what the command will do), and the command (empty: a fix made elsewhere, or
    the line naming the steps left out). ``verb`` and ``needs``: the subcommand and the
    ``permissions.ACTIONS`` action its service requires (empty: viewing is enough)."""

    why: str
    command: str
    verb: str = ""
    needs: str = ""


@dataclass(frozen=True)
class Commands:
    """The ``jobs`` commands naming one schedule, as ``--actor`` (when it was given) would
    type them again."""

    schedule: Schedule
    actor: str | None

    def __call__(self, subcommand: str, *rest: str, key: bool = True) -> str:
        words = [COMMAND, subcommand]
        if key:
            words.append(shlex.quote(self.schedule.key))
        if self.schedule.tenant and (key or subcommand == "list"):
            words += ["--tenant", shlex.quote(self.schedule.tenant)]
        words += rest
        if self.actor is not None:
            words += ["--actor", shlex.quote(self.actor)]
        return " ".join(words)

    def of_occurrence(self, subcommand: str, occurrence: Occurrence) -> str:
        """``replay`` or ``cancel`` of ``occurrence``: by its id, which names its schedule."""
        words = [COMMAND, subcommand, str(occurrence.pk), REASON]
        if self.actor is not None:
            words += ["--actor", shlex.quote(self.actor)]
        return " ".join(words)


def for_schedule(
    standing: services.Standing,
    schedule: Schedule,
    recent: list[Occurrence],
    *,
    actor: str | None,
    user: Any,
    problem: str = "",
) -> list[Step]:
    """The steps that fit ``schedule`` as ``standing`` (its line, newest dead letter, what its
    Limit lets a purge delete), its ``recent`` occurrences (newest first) and ``problem`` (why
    its timing cannot be evaluated: ``services.schedule_summary``) describe it, and that
    ``user`` may take; ``actor`` is the ``--actor`` the commands repeat."""
    jobs = Commands(schedule, actor)
    if schedule.status == ScheduleStatus.RETIRED:
        return [
            Step(
                "It is retired: no replica plans or runs it. Declare it again (status active) "
                "and sync to bring it back.",
                f"{COMMAND} sync",
            )
        ]
    trouble = _trouble(standing, schedule, recent, jobs)
    steps = trouble + _stopped(schedule, jobs)
    if problem and not schedule.parked_field:  # parked: _stopped names the field to fix
        steps.append(_unplannable(schedule, problem))
    if standing.beyond_limit:
        steps.append(
            Step(
                "Finished occurrences lie beyond its retention Limit: delete them now (serving "
                "replicas also do this by themselves).",
                jobs("purge"),
                "purge",
                "purge",
            )
        )
    if schedule.status == ScheduleStatus.DRAFT:
        steps.append(
            Step(
                "It is a draft: no replica runs it until it is made active (status active in "
                "its declaration, then sync; or on its admin page).",
                f"{COMMAND} sync",
            )
        )
    elif schedule.enabled and not schedule.parked_field:
        steps += _running(schedule, jobs, trouble=bool(trouble or problem))
    return _theirs(steps, user, schedule)


def _trouble(
    standing: services.Standing,
    schedule: Schedule,
    recent: list[Occurrence],
    jobs: Commands,
) -> list[Step]:
    """Its newest dead letter, or its newest failed run, to look at and replay."""
    dead = standing.newest_dead
    if dead is not None:
        count = standing.line.dead_letters if standing.line else 1
        shown = f"{count}+" if standing.line and standing.line.dead_letters_capped else count
        return [
            Step(
                f"It has {shown} dead letter{'' if count == 1 else 's'}: list every schedule "
                "with one.",
                jobs("list", "--dead", key=False),
            ),
            Step(
                f"See why occurrence {dead.pk}, its newest dead letter, went dead.",
                jobs("inspect", "--occurrence", str(dead.pk)),
            ),
            Step(
                "Replay it once the cause is fixed. "
                + services.consequences.replay(dead, schedule),
                jobs.of_occurrence("replay", dead),
                "replay",
                "replay",
            ),
        ]
    failed = next((o for o in recent if o.state == OccurrenceState.FAILED), None)
    if standing.line is not None and standing.line.failing and failed is not None:
        return [
            Step(
                f"Its newest run failed ({standing.line.failing_streak} in a row) and waits for "
                f"a retry: see why occurrence {failed.pk} failed.",
                jobs("inspect", "--occurrence", str(failed.pk)),
            )
        ]
    return []


def _stopped(schedule: Schedule, jobs: Commands) -> list[Step]:
    """What to fix when it is parked, and ``enable`` when it is disabled or parked."""
    steps = []
    if schedule.parked_field:
        steps.append(
            Step(
                f"It is parked: the planner refused its {schedule.parked_field} "
                f"({schedule.parked_reason}). Fix that field (correct the declaration and "
                "jobs sync, or upsert_schedule), then have the planner check it again.",
                jobs("enable", REASON),
                "enable",
                "disable",
            )
        )
    if not schedule.enabled:
        who = f"by {schedule.disabled_by}" if schedule.disabled_by else ""
        why = f": {schedule.disabled_reason}" if schedule.disabled_reason else ""
        steps.append(
            Step(
                f"It is disabled {who}{why}. Enable it once that is resolved. "
                f"{services.consequences.enable(schedule)}",
                jobs("enable", REASON),
                "enable",
                "disable",
            )
        )
    if len(steps) == 2:  # one enable does both: say it once, with both reasons
        steps = [Step(f"{steps[0].why} {steps[1].why}", steps[1].command, "enable", "disable")]
    return steps


def _unplannable(schedule: Schedule, problem: str) -> Step:
    """A timing the planner cannot evaluate (not parked yet: it will be at its next pass):
    where to fix it. A declared schedule is fixed in its ``schedules.py`` and synced; a
    run-time one where it was written (``upsert_schedule`` or its admin page)."""
    said = (
        f"Its timing {problem}. No replica can plan it, and the planner parks it at its next pass."
    )
    if schedule.origin == Origin.CODE:
        return Step(f"{said} Fix the timing in its declaration, then sync.", f"{COMMAND} sync")
    return Step(
        f"{said} Fix the timing of this run-time schedule (services.upsert_schedule, or its "
        "admin page).",
        "",
    )


def _running(schedule: Schedule, jobs: Commands, *, trouble: bool) -> list[Step]:
    """Stop it (while the cause of its failures, or of its timing, is fixed); healthy, also
    run it once more, unless it is a job's policy record (``@<job>``): it has no planned runs,
    and a run-now of it would run the record's empty arguments."""
    stop = Step(
        f"Stop it{' while the cause is fixed' if trouble else ''}. "
        f"{services.consequences.disable(schedule)}",
        jobs("disable", REASON),
        "disable",
        "disable",
    )
    if trouble or schedule.timing_kind == TimingKind.ENQUEUED:
        return [stop]
    again = Step(
        f"Run it once more now. {services.consequences.run_now(schedule)}",
        jobs("run-now", REASON),
        "run-now",
        "run",
    )
    return [again, stop]


def for_occurrence(
    occurrence: Occurrence, schedule: Schedule, *, actor: str | None, user: Any
) -> list[Step]:
    """``cancel`` while ``occurrence`` has not finished; ``replay`` once it has, or while it
    waits for a retry (the replay runs it now); those ``user`` may take."""
    jobs = Commands(schedule, actor)
    steps = []
    if occurrence.state in _UNFINISHED:
        steps.append(
            Step(
                f"Cancel it. {services.consequences.cancel(occurrence)}",
                jobs.of_occurrence("cancel", occurrence),
                "cancel",
                "disable",
            )
        )
    if occurrence.state in (*_FINISHED, OccurrenceState.FAILED):
        steps.append(
            Step(
                f"Replay it. {services.consequences.replay(occurrence, schedule)}",
                jobs.of_occurrence("replay", occurrence),
                "replay",
                "replay",
            )
        )
    steps.append(Step("The schedule, its next runs and its next steps.", jobs("inspect")))
    return _theirs(steps, user, schedule)


def _theirs(steps: list[Step], user: Any, schedule: Schedule) -> list[Step]:
    """The steps ``user`` may take on ``schedule``; when one is left out, a last line without
    a command naming what they may not do and the permissions to ask for (``(you may not
    replay or disable it: ask someone with replay_schedule / disable_schedule on it)``)."""
    may: dict[str, bool] = {}
    for action in {step.needs for step in steps if step.needs}:
        may[action] = permissions.allowed(user, action, schedule)
    kept = [step for step in steps if not step.needs or may[step.needs]]
    left = [step for step in steps if step.needs and not may[step.needs]]
    if not left:
        return kept
    verbs = list(dict.fromkeys(step.verb for step in left))
    codenames = list(dict.fromkeys(permissions.ACTIONS[step.needs] for step in left))
    return [
        *kept,
        Step(
            f"(you may not {_either(verbs)} it: ask someone with {' / '.join(codenames)} on it)",
            "",
        ),
    ]


def _either(verbs: list[str]) -> str:
    """``replay``, ``replay or disable``, ``replay, disable or run-now``."""
    return verbs[0] if len(verbs) == 1 else f"{', '.join(verbs[:-1])} or {verbs[-1]}"


def commands(steps: list[Step]) -> list[str]:
    """The commands of ``steps``, as ``--json``'s ``next_steps`` lists them (a step without
    one is said in the text only)."""
    return [step.command for step in steps if step.command]


def text(steps: list[Step]) -> list[str]:
    """``next steps:`` and each step: why (wrapped at 100 columns), then its command (if it
    has one) on one line indented under it, to copy."""
    lines = ["next steps:"]
    for step in steps:
        lines += textwrap.wrap(step.why, width=100, initial_indent="  - ", subsequent_indent="    ")
        if step.command:
            lines.append(f"      {step.command}")
    return lines
