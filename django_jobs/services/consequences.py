"""What an operator action will do, in the operator's words: the admin's confirmation pages
and ``manage.py jobs`` answers say these sentences, and docs/operations.md quotes them.

Each reads the record it is given as it is, and a replay whether another occurrence of its
schedule runs (no lock, no permission check: the service that acts checks both). Each states
what the service and the store will do, and what the run then waits for (a disabled or draft
schedule, the kill switch, an overlap), nothing more.
"""

from __future__ import annotations

from typing import Any

from .. import words
from ..conf import get_settings
from ..models import Occurrence, OccurrenceState, Schedule, ScheduleStatus
from ..scheduling import timings
from ..scheduling.policies import Overlap
from .summary import misfire_words

_WAITING = (OccurrenceState.SCHEDULED, OccurrenceState.FAILED)
_REPLAYABLE = (
    OccurrenceState.DEAD,
    OccurrenceState.FAILED,
    OccurrenceState.SKIPPED,
    OccurrenceState.COMPLETED,
    OccurrenceState.CANCELLED,
)


def retry_budget(schedule: Schedule, first: int) -> str:
    """The retry budget a run starting at attempt ``first`` gets: ``up to 3 attempts (4 to
    6), 30 s backoff doubling to at most 10 min (each wait 50-100% of that), then dead
    letter``."""
    count = schedule.max_attempts
    last = first + count - 1
    numbers = f"attempt {first}" if count == 1 else f"{first} to {last}"
    if count == 1:
        backoff = ""
    elif schedule.backoff >= schedule.max_backoff:
        backoff = f", {words.duration(schedule.max_backoff)} backoff (each wait 50-100% of that)"
    else:
        backoff = (
            f", {words.duration(schedule.backoff)} backoff doubling to at most "
            f"{words.duration(schedule.max_backoff)} (each wait 50-100% of that)"
        )
    plural = "s" if count != 1 else ""
    return f"up to {count} attempt{plural} ({numbers}){backoff}, then dead letter"


def paused_by_kill_switch(schedule: Schedule) -> bool:
    """Whether ``DJANGO_JOBS["PAUSED_SCHEDULES"]`` names ``schedule`` (as the claim reads it:
    ``*``, its key, ``<tenant>/<key>`` or ``<tenant>/*``)."""
    paused = set(get_settings().PAUSED_SCHEDULES)
    names = {"*", schedule.key, f"{schedule.tenant}/{schedule.key}", f"{schedule.tenant}/*"}
    return bool(paused & names)


def _held(schedule: Schedule) -> str:
    """Why no replica claims ``schedule``'s occurrences now (empty when they do): what a
    replayed or run-now occurrence waits for."""
    if schedule.status == ScheduleStatus.DRAFT:
        return f"{schedule} is a draft: no replica runs its occurrences until it is active"
    if not schedule.enabled:
        return f"{schedule} is disabled: no replica claims it until it is enabled"
    if paused_by_kill_switch(schedule):
        return (
            f"the kill switch DJANGO_JOBS['PAUSED_SCHEDULES'] names {schedule}: no replica "
            "claims it until it is taken out"
        )
    return ""


def replay(occurrence: Occurrence, schedule: Schedule) -> str:
    """What ``services.replay`` will do to ``occurrence`` of ``schedule``, and what its run
    will wait for."""
    if occurrence.state not in _REPLAYABLE:
        return (
            f"Occurrence {occurrence.pk} is {occurrence.state}: only a dead, failed, skipped, "
            "completed or cancelled occurrence can be replayed; nothing will change."
        )
    one_off = schedule.timing_kind in timings.one_off_kinds()
    if schedule.status == ScheduleStatus.RETIRED and not one_off:
        return (
            f"Refused: {schedule} is retired, and no replica runs a retired schedule's "
            "occurrences; declare it again (status active) before replaying. Nothing will "
            "change."
        )
    following = occurrence.attempts + 1
    said = (
        f"Occurrence {occurrence.pk} ({occurrence.state} after {occurrence.attempts} "
        f"attempt{'s' if occurrence.attempts != 1 else ''}) becomes due now and runs as attempt "
        f"{following}, trigger manual, under the same identity (its command's idempotency "
        f"key). The retry budget starts afresh: {retry_budget(schedule, following)}."
    )
    if schedule.status == ScheduleStatus.RETIRED:
        said += (
            f" The retired one-off {schedule} is made active again for it, and retires again "
            "once the replay is final."
        )
    return f"{said} {_waits(schedule, occurrence)}"


def replayed_at(occurrence: Occurrence, schedule: Schedule) -> str:
    """What ``services.replay_at`` did: ``occurrence`` (as it now is, due again or created)
    runs its next attempt with a fresh budget, and what that run waits for."""
    following = occurrence.attempts + 1
    return (
        f"Occurrence {occurrence.pk} is due now and runs as attempt {following}, trigger "
        "manual, under the identity its instant always had. The retry budget starts afresh: "
        f"{retry_budget(schedule, following)}. {_waits(schedule, occurrence)}"
    )


def _waits(schedule: Schedule, occurrence: Occurrence) -> str:
    """What a replayed occurrence waits for before a replica claims it."""
    held = _held(schedule)
    if held:
        return f"It waits meanwhile: {held}."
    running = _running_other(schedule, occurrence)
    if running is not None:
        return (
            f"It waits until occurrence {running} ends: {schedule} runs one occurrence at a "
            f"time (overlap {schedule.overlap})."
        )
    return "A replica claims it at its next pass."


def _running_other(schedule: Schedule, occurrence: Occurrence) -> Any:
    """The id of another running occurrence ``occurrence`` would wait for (overlap skip and
    queue run one at a time; a replay or retry waits rather than being skipped)."""
    if schedule.overlap == Overlap.ALLOW:
        return None
    return (
        Occurrence.objects.filter(schedule_id=schedule.pk, state=OccurrenceState.PROCESSING)
        .exclude(pk=occurrence.pk)
        .values_list("pk", flat=True)
        .first()
    )


def cancel(occurrence: Occurrence) -> str:
    """What ``services.cancel`` will do to ``occurrence``."""
    if occurrence.state in _WAITING:
        return (
            f"Occurrence {occurrence.pk} ({occurrence.state}, waiting) will not run: it is "
            "recorded cancelled, and can be replayed later."
        )
    if occurrence.state == OccurrenceState.PROCESSING:
        return (
            f"Occurrence {occurrence.pk} is running on {occurrence.lease_owner or 'a replica'}: "
            "its lease ends now and the replica stops the run at its next lease renewal. Its "
            "outcome and its run.atomic() writes are refused (fenced); what the handler did "
            "outside them (autocommit writes, calls to other systems) may already have "
            "happened. It is recorded cancelled, and can be replayed later."
        )
    return (
        f"Occurrence {occurrence.pk} has finished ({occurrence.state}): it cannot be "
        "cancelled; nothing will change (replay it to run it again)."
    )


def _not_run_anyway(schedule: Schedule) -> str:
    """A sentence for a record no replica runs whatever ``enabled`` says (empty otherwise)."""
    if schedule.status == ScheduleStatus.RETIRED:
        return (
            f" {schedule} is retired: whether enabled or not, no replica runs its occurrences "
            "until it is declared again (status active)."
        )
    if schedule.status == ScheduleStatus.DRAFT:
        return (
            f" {schedule} is a draft: whether enabled or not, no replica runs its occurrences "
            "until it is active."
        )
    return ""


def disable(schedule: Schedule, *, cancel_running: bool = False) -> str:
    """What ``services.disable`` will do to ``schedule``."""
    running = (
        "its running occurrence is cancelled (its lease ends now)"
        if cancel_running
        else "an occurrence already running finishes"
    )
    if schedule.timing_kind == "enqueued":
        return (
            f"No replica claims the work enqueued for {schedule} from its next pass; enqueue() "
            f"still records new work, which waits; {running}. Enabling it later runs what "
            "waits, except work that could not start within its max delay "
            f"({words.duration(schedule.max_delay)}), recorded skipped (misfire)."
            + _not_run_anyway(schedule)
        )
    return (
        f"No replica claims {schedule}'s occurrences from its next pass, and none is planned "
        f"while it is disabled; {running}. Enabling it later plans what it missed by its "
        f"misfire policy ({misfire_words(schedule)})." + _not_run_anyway(schedule)
    )


def enable(schedule: Schedule) -> str:
    """What ``services.enable`` will do to ``schedule``."""
    not_run = _not_run_anyway(schedule)
    if not_run:
        return f"{schedule} is marked enabled.{not_run}"
    parked = (
        f" The planner checks its {schedule.parked_field} again (it parked it)."
        if schedule.parked_field
        else ""
    )
    if schedule.timing_kind == "enqueued":
        return (
            f"Replicas claim the work enqueued for {schedule} again from their next pass; work "
            "that waited runs, except what could not start within its max delay "
            f"({words.duration(schedule.max_delay)}), recorded skipped (misfire).{parked}"
        )
    return (
        f"Replicas claim {schedule}'s occurrences again from their next pass; what it missed "
        f"while disabled follows its misfire policy: {misfire_words(schedule)}.{parked}"
    )


def run_now(schedule: Schedule) -> str:
    """What ``services.run_now`` will do on ``schedule``."""
    if not schedule.enabled or schedule.status != ScheduleStatus.ACTIVE:
        return (
            f"Refused: {schedule} is not active and enabled (status {schedule.status}, "
            f"{'enabled' if schedule.enabled else 'disabled'}): enable it first. Nothing will "
            "change."
        )
    said = (
        f"An extra occurrence of {schedule} at the current instant (its own identity, trigger "
        "manual); the planned runs are unchanged. Its retry budget: "
        f"{retry_budget(schedule, 1)}."
    )
    held = _held(schedule)
    return (
        f"{said} It waits meanwhile: {held}."
        if held
        else f"{said} A replica claims it at its next pass."
    )
