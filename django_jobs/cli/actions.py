"""``jobs replay``, ``disable``, ``enable``, ``run-now`` and ``purge``: each calls one service
as ``--actor``, on the instant ``services.now()`` gives."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .. import services
from .invocation import Invocation


def replay(run: Invocation) -> None:
    actor = run.actor()
    options = run.options
    if options["at"] is not None:
        occurrence = services.replay_at(
            run.schedule(actor, key=options["occurrence"]),
            at=options["at"],
            actor=actor,
            reason=options["reason"],
            now=services.now(),
        )
    else:
        occurrence = services.replay(
            services.find_occurrence(options["occurrence"], actor=actor),
            actor=actor,
            reason=options["reason"],
            now=services.now(),
        )
    data = {
        "occurrence": str(occurrence.pk),
        "scheduled_at": occurrence.scheduled_at.isoformat(),
        "state": occurrence.state,
        "next_attempt": occurrence.attempts + 1,
        "trigger": occurrence.trigger,
    }
    run.emit(
        data,
        f"replayed {occurrence.pk} (scheduled at {occurrence.scheduled_at.isoformat()}): "
        f"attempt {occurrence.attempts + 1} is due now (trigger manual)",
    )


def _act(run: Invocation, service: Callable[..., Any], **extra: Any) -> Any:
    """Call ``service`` on the schedule of KEY and ``--tenant`` as ``--actor``, with the
    reason given."""
    actor = run.actor()
    schedule = run.schedule(actor)
    return service(schedule, actor=actor, reason=run.options["reason"], now=services.now(), **extra)


def disable(run: Invocation) -> None:
    schedule = _act(run, services.disable, cancel_running=run.options["cancel_running"])
    run.emit(
        {"schedule": str(schedule), "enabled": False},
        f"disabled {schedule}: no replica claims it from its next pass",
    )


def enable(run: Invocation) -> None:
    schedule = _act(run, services.enable)
    run.emit(
        {"schedule": str(schedule), "enabled": True},
        f"enabled {schedule}: what it missed follows misfire={schedule.misfire}",
    )


def run_now(run: Invocation) -> None:
    occurrence = _act(run, services.run_now, args=run.options["run_args"])
    run.emit(
        {"occurrence": str(occurrence.pk), "scheduled_at": occurrence.scheduled_at},
        f"planned {occurrence.pk} at {occurrence.scheduled_at.isoformat()}",
    )


def purge(run: Invocation) -> None:
    actor = run.actor()
    schedule = run.schedule(actor)
    deleted = services.purge(schedule, actor=actor, now=services.now())
    run.emit(
        {"schedule": str(schedule), "deleted": deleted},
        f"purged {deleted} finished occurrence(s) of {schedule}",
    )
