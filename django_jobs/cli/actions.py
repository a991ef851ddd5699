"""``jobs replay``, ``cancel``, ``disable``, ``enable``, ``run-now`` and ``purge``: each calls
one service as ``--actor``, on the instant ``services.now()`` gives, and answers with what the
action did in the operator's words (``services.consequences``: the sentences the admin's
confirmations say), read from the record before the action changed it."""

from __future__ import annotations

from typing import Any

from .. import services, words
from ..models import Occurrence, Schedule
from .invocation import Invocation


def replay(run: Invocation) -> None:
    """A new attempt, N+1, of an occurrence (or of a planned instant, ``--at``), with a fresh
    retry budget: the answer names both."""
    actor = run.actor()
    options = run.options
    if options["at"] is not None:
        schedule = run.schedule(actor, key=options["occurrence"])
        occurrence = services.replay_at(
            schedule, at=options["at"], actor=actor, reason=options["reason"], now=services.now()
        )
        what = services.consequences.replayed_at(occurrence, schedule)
    else:
        found = services.find_occurrence(options["occurrence"], actor=actor)
        schedule = found.schedule
        what = services.consequences.replay(found, schedule)  # of the occurrence as it was
        occurrence = services.replay(
            found, actor=actor, reason=options["reason"], now=services.now()
        )
    data = {
        "occurrence": str(occurrence.pk),
        "scheduled_at": occurrence.scheduled_at.isoformat(),
        "state": occurrence.state,
        "next_attempt": occurrence.attempts + 1,
        "trigger": occurrence.trigger,
        "retry_budget": _budget(schedule, occurrence.attempts + 1),
    }
    run.emit(
        data,
        f"replayed {occurrence.pk} (scheduled at {words.instant(occurrence.scheduled_at)}): {what}",
    )


def _budget(schedule: Schedule, first: int) -> dict[str, Any]:
    """The retry budget a replay starting at attempt ``first`` gets, for scripts: the attempts
    it may make (numbered ``first`` to ``last``) and the backoff between them, in seconds."""
    return {
        "max_attempts": schedule.max_attempts,
        "first_attempt": first,
        "last_attempt": first + schedule.max_attempts - 1,
        "backoff_seconds": schedule.backoff.total_seconds(),
        "max_backoff_seconds": schedule.max_backoff.total_seconds(),
    }


def cancel(run: Invocation) -> None:
    """Cancel one occurrence that has not finished, as the admin's Cancel does (``disable``
    permission on its schedule, audited with the reason)."""
    actor = run.actor()
    found: Occurrence = services.find_occurrence(run.options["occurrence"], actor=actor)
    what = services.consequences.cancel(found)  # of the occurrence as it was
    occurrence = services.cancel(
        found, actor=actor, reason=run.options["reason"], now=services.now()
    )
    run.emit(
        {
            "occurrence": str(occurrence.pk),
            "schedule": str(found.schedule),
            "was": found.state,
            "state": occurrence.state,
        },
        f"cancelled {occurrence.pk} of {found.schedule}: {what}",
    )


def _schedule(run: Invocation) -> tuple[Any, Schedule]:
    """The ``--actor`` user and the schedule of KEY and ``--tenant``, which they may see."""
    actor = run.actor()
    return actor, run.schedule(actor)


def disable(run: Invocation) -> None:
    actor, schedule = _schedule(run)
    cancel_running = run.options["cancel_running"]
    what = services.consequences.disable(schedule, cancel_running=cancel_running)
    schedule = services.disable(
        schedule,
        actor=actor,
        reason=run.options["reason"],
        now=services.now(),
        cancel_running=cancel_running,
    )
    run.emit({"schedule": str(schedule), "enabled": False}, f"disabled {schedule}: {what}")


def enable(run: Invocation) -> None:
    actor, schedule = _schedule(run)
    what = services.consequences.enable(schedule)  # names a park the enable clears
    schedule = services.enable(
        schedule, actor=actor, reason=run.options["reason"], now=services.now()
    )
    run.emit({"schedule": str(schedule), "enabled": True}, f"enabled {schedule}: {what}")


def run_now(run: Invocation) -> None:
    actor, schedule = _schedule(run)
    occurrence = services.run_now(
        schedule,
        actor=actor,
        reason=run.options["reason"],
        now=services.now(),
        args=run.options["run_args"],
    )
    run.emit(
        {"occurrence": str(occurrence.pk), "scheduled_at": occurrence.scheduled_at},
        f"planned {occurrence.pk} at {words.instant(occurrence.scheduled_at)}: "
        f"{services.consequences.run_now(schedule)}",
    )


def purge(run: Invocation) -> None:
    actor, schedule = _schedule(run)
    deleted = services.purge(schedule, actor=actor, now=services.now())
    run.emit(
        {"schedule": str(schedule), "deleted": deleted},
        f"purged {deleted} finished occurrence(s) of {schedule}",
    )
