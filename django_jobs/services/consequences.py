"""What an operator action will do, in the operator's words: the admin's confirmation pages
and ``manage.py jobs`` answers say these sentences, and docs/operations.md quotes them.

Each reads the record it is given as it is (no lock, no permission check: the service that
acts checks both); it states what the service and the store do, nothing more.
"""

from __future__ import annotations

from ..models import Occurrence, OccurrenceState, Schedule
from ..scheduling import timing_words
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
    6), 30 s backoff doubling to at most 10 min, then dead letter``."""
    count = schedule.max_attempts
    last = first + count - 1
    numbers = f"attempt {first}" if count == 1 else f"{first} to {last}"
    backoff = (
        ""
        if count == 1
        else f", {timing_words.duration(schedule.backoff)} backoff doubling to at most "
        f"{timing_words.duration(schedule.max_backoff)}"
    )
    plural = "s" if count != 1 else ""
    return f"up to {count} attempt{plural} ({numbers}){backoff}, then dead letter"


def replay(occurrence: Occurrence, schedule: Schedule) -> str:
    """What ``services.replay`` will do to ``occurrence`` of ``schedule``."""
    if occurrence.state not in _REPLAYABLE:
        return (
            f"Occurrence {occurrence.pk} is {occurrence.state}: only a dead, failed, skipped, "
            "completed or cancelled occurrence can be replayed; nothing will change."
        )
    following = occurrence.attempts + 1
    return (
        f"Occurrence {occurrence.pk} ({occurrence.state} after {occurrence.attempts} "
        f"attempt{'s' if occurrence.attempts != 1 else ''}) becomes due now and runs as attempt "
        f"{following} at the next claim, trigger manual, under the same identity (its "
        "command's idempotency key). The retry budget starts afresh: "
        f"{retry_budget(schedule, following)}."
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
            "its lease ends now, the replica stops the run at its next lease renewal, and no "
            "write of that attempt lands; it is recorded cancelled, and can be replayed later."
        )
    return (
        f"Occurrence {occurrence.pk} has finished ({occurrence.state}): it cannot be "
        "cancelled; nothing will change (replay it to run it again)."
    )


def disable(schedule: Schedule, *, cancel_running: bool = False) -> str:
    """What ``services.disable`` will do to ``schedule``."""
    running = (
        "its running occurrence is cancelled (its lease ends now)"
        if cancel_running
        else "an occurrence already running finishes"
    )
    return (
        f"No replica claims {schedule}'s occurrences from its next pass, and none is planned "
        f"while it is disabled; {running}. Enabling it later plans what it missed by its "
        f"misfire policy ({misfire_words(schedule)})."
    )


def enable(schedule: Schedule) -> str:
    """What ``services.enable`` will do to ``schedule``."""
    parked = (
        f" The planner checks its {schedule.parked_field} again (it parked it)."
        if schedule.parked_field
        else ""
    )
    return (
        f"Replicas claim {schedule}'s occurrences again from their next pass; what it missed "
        f"while disabled follows its misfire policy: {misfire_words(schedule)}.{parked}"
    )


def run_now(schedule: Schedule) -> str:
    """What ``services.run_now`` will do on ``schedule``."""
    return (
        f"An extra occurrence of {schedule} at the current instant (its own identity, trigger "
        "manual) is claimed at the next pass; the planned runs are unchanged. Its retry "
        f"budget: {retry_budget(schedule, 1)}."
    )
