"""The next steps ``jobs inspect`` ends with: the commands that fit the record's state, ready to
copy, each with what it will do (``services.consequences``, the sentences the admin's
confirmations say).

A schedule: its newest dead letter to inspect and replay (and ``jobs list --dead``), its
newest failed run to inspect, the field to fix when it is parked, ``enable`` when it is
disabled or parked, ``purge`` when finished occurrences lie beyond its retention Limit, and
``run-now`` or ``disable`` when it is enabled and healthy. An occurrence: ``replay`` once it
has finished (or failed and waits for a retry), ``cancel`` while it has not.
"""

from __future__ import annotations

import shlex
import textwrap
from dataclasses import dataclass

from .. import services
from ..models import Occurrence, OccurrenceState, Schedule, ScheduleStatus

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
    """Why (and what the command will do), and the command."""

    why: str
    command: str


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


def for_schedule(
    standing: services.Standing,
    schedule: Schedule,
    recent: list[Occurrence],
    *,
    actor: str | None,
) -> list[Step]:
    """The steps that fit ``schedule`` as ``standing`` (its line, newest dead letter, what its
    Limit lets a purge delete) and its ``recent`` occurrences (newest first) describe it."""
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
    if standing.beyond_limit:
        steps.append(
            Step(
                "Finished occurrences lie beyond its retention Limit: delete them now (serving "
                "replicas also do this by themselves).",
                jobs("purge"),
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
        steps += _running(schedule, jobs, trouble=bool(trouble))
    return steps


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
                f"It has {shown} dead letter(s): list every schedule with one.",
                jobs("list", "--dead", key=False),
            ),
            Step(
                f"See why occurrence {dead.pk}, its newest dead letter, went dead.",
                jobs("inspect", "--occurrence", str(dead.pk)),
            ),
            Step(
                "Replay it once the cause is fixed. "
                + services.consequences.replay(dead, schedule),
                f"{COMMAND} replay {dead.pk} {REASON}" + _actor(jobs),
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
            )
        )
    if len(steps) == 2:  # one enable does both: say it once, with both reasons
        steps = [Step(f"{steps[0].why} {steps[1].why}", steps[1].command)]
    return steps


def _running(schedule: Schedule, jobs: Commands, *, trouble: bool) -> list[Step]:
    """Stop it (while the cause of its failures is fixed); healthy, also run it once more."""
    stop = Step(
        f"Stop it{' while the cause is fixed' if trouble else ''}. "
        f"{services.consequences.disable(schedule)}",
        jobs("disable", REASON),
    )
    if trouble:
        return [stop]
    again = Step(
        f"Run it once more now. {services.consequences.run_now(schedule)}", jobs("run-now", REASON)
    )
    return [again, stop]


def for_occurrence(occurrence: Occurrence, schedule: Schedule, *, actor: str | None) -> list[Step]:
    """``cancel`` while ``occurrence`` has not finished; ``replay`` once it has, or while it
    waits for a retry (the replay runs it now)."""
    jobs = Commands(schedule, actor)
    steps = []
    if occurrence.state in _UNFINISHED:
        steps.append(
            Step(
                f"Cancel it. {services.consequences.cancel(occurrence)}",
                f"{COMMAND} cancel {occurrence.pk} {REASON}" + _actor(jobs),
            )
        )
    if occurrence.state in (*_FINISHED, OccurrenceState.FAILED):
        steps.append(
            Step(
                f"Replay it. {services.consequences.replay(occurrence, schedule)}",
                f"{COMMAND} replay {occurrence.pk} {REASON}" + _actor(jobs),
            )
        )
    steps.append(Step("The schedule, its next runs and its next steps.", jobs("inspect")))
    return steps


def _actor(jobs: Commands) -> str:
    return f" --actor {shlex.quote(jobs.actor)}" if jobs.actor is not None else ""


def text(steps: list[Step]) -> list[str]:
    """``next steps:`` and each step: why (wrapped at 100 columns), then its command on one
    line indented under it, to copy."""
    lines = ["next steps:"]
    for step in steps:
        lines += textwrap.wrap(step.why, width=100, initial_indent="  - ", subsequent_indent="    ")
        lines.append(f"      {step.command}")
    return lines
