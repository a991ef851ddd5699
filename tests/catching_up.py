"""A real replica catching up a long gap while it heartbeats: what the process tests of planning
measure (its plan passes, and the gaps between its heartbeats)."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django_jobs import services, store
from django_jobs.models import Replica, Schedule

from .concurrency import wait_until, wait_while_progressing


@dataclass(frozen=True)
class CatchUp:
    passes: list[dict[str, Any]]  # the replica's plan.pass events
    longest: float  # the longest plan pass, in wall seconds
    # The most CPU time one plan pass's thread spent (its ``cpu_seconds``): what the pass did
    # itself, however many other processes shared the cores while it ran.
    longest_cpu: float
    heartbeats: list[datetime]  # heartbeats written from the enable to the catch-up
    gaps: list[timedelta]  # between the enable, each heartbeat and the catch-up


def enable_and_catch_up(replica: Any, schedule: Schedule, *, actor: Any) -> CatchUp:
    """Wait for ``replica``'s first heartbeat, enable ``schedule`` (a long gap behind it), and
    wait until its last planned instant is within ten minutes of the enable (for as long as
    the plan passes move it on: on a loaded machine each pass does less), sampling the
    replica's heartbeats meanwhile."""
    replica.wait_logged("worker.started")
    wait_until(
        lambda: Replica.objects.filter(pk=replica.name, heartbeat_at__isnull=False).exists(),
        what=f"{replica.name}'s first heartbeat",
    )
    enabled_at = store.database_clock()
    services.enable(schedule, actor=actor, reason="back after a year", now=enabled_at)
    seen: set[datetime] = set()

    def caught_up() -> bool:
        rows = Replica.objects.filter(pk=replica.name).values_list("heartbeat_at", flat=True)
        seen.update(rows)
        schedule.refresh_from_db()
        last = schedule.last_scheduled_at
        return last is not None and last > enabled_at - timedelta(minutes=10)

    wait_while_progressing(
        caught_up,
        lambda: schedule.last_scheduled_at,
        what="the year-long gap to be planned",
    )
    caught_up_at = store.database_clock()
    passes = [e for e in replica.events() if e["event"] == "plan.pass"]
    beats = sorted(b for b in seen if b >= enabled_at)
    gaps = [b - a for a, b in itertools.pairwise([enabled_at, *beats, caught_up_at])]
    longest = max(e["seconds"] for e in passes)
    return CatchUp(passes, longest, max(e["cpu_seconds"] for e in passes), beats, gaps)
