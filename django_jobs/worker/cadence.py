"""When this replica plans: the instant of its next plan pass, and the pass it runs then.

``Worker.serve`` plans only when a schedule may have come due: at the earliest ``next_due_at``
of the schedules it may plan less half of ``PLAN_AHEAD_SECONDS`` (``planning.due_within``; their
instants are then planned the whole window ahead),
on a NOTIFY (an operator's enable or run-now, another replica's plan), and every
``POLL_SECONDS`` at the latest. ``Worker.run_pass`` plans at every step.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

import structlog

from .. import store
from ..conf import JobsSettings, get_settings
from ..registry import Registry
from .planning import PASS_BUDGET_SECONDS, PlanPass, due_within, plan_due

log = structlog.get_logger("django_jobs.worker")

# A schedule whose job has no handler here is parked after it stayed due, unplanned, for
# UNPLANNABLE_POLLS polls (at least UNPLANNABLE_AT_LEAST): long enough for any replica that
# has the job to plan it.
UNPLANNABLE_POLLS = 10
UNPLANNABLE_AT_LEAST = timedelta(minutes=1)


class PlanCadence:
    """The instant of the replica's next plan pass (``plan_at``; ``None``: plan at every step)
    and the plan pass itself."""

    def __init__(
        self,
        *,
        replica_id: str,
        settings: JobsSettings,
        jobs: Registry,
        queues: Sequence[str] | None = None,
    ) -> None:
        self.replica_id, self.settings, self.registry = replica_id, settings, jobs
        self.queues = None if queues is None else list(queues)  # None: every queue
        self.plan_at: datetime | None = None
        # Occurrences this replica planned since it last refreshed the table's statistics.
        self.planned_unanalyzed = 0

    def jobs(self) -> list[str]:
        """The jobs this replica has handlers for: the only ones it plans."""
        return self.registry.names()

    def due(self, now: datetime) -> bool:
        return self.plan_at is None or now >= self.plan_at

    def plan_now(self, now: datetime) -> None:
        """Plan at the next step (``serve``'s start, a NOTIFY)."""
        self.plan_at = now

    def bring_forward(self, due: datetime) -> None:
        """Something may come due at ``due``: plan no later than that."""
        if self.plan_at is not None:
            self.plan_at = min(self.plan_at, due)

    def next_work(self, now: datetime) -> datetime | None:
        """The earliest instant at which planning or claiming has work for this replica
        (``store.next_wakeup``), unless the kill switch pauses everything; planning is
        brought forward to it."""
        kill_switch = get_settings()  # read afresh at every pass
        if kill_switch.paused_all:
            return None
        due = store.next_wakeup(
            now=now,
            exclude_keys=kill_switch.PAUSED_SCHEDULES,
            jobs=self.jobs(),
            ahead=due_within(self.settings.plan_ahead),
            queues=self.queues,
        )
        if due is not None:
            self.bring_forward(due)
        return due

    def plan(self, now: datetime) -> None:
        """One plan pass, bounded in time (``PASS_BUDGET_SECONDS``): a pass that left work
        (a long gap, a large batch) plans again at the next step, after this step's claim,
        the next heartbeat and timeout enforcement.

        Not the kill switch's schedules (``"*"``: nothing), and only schedules whose job has a
        handler here: in a rolling deploy, an old replica leaves a new job's schedule to the
        replicas that have it. One due for ``unplannable_after()`` that no replica planned
        is parked saying so (``store.park_unplannable``)."""
        kill_switch = get_settings()  # read afresh at every pass
        if kill_switch.paused_all:
            self.plan_at = now + self._poll()
            return
        limit, paused, jobs = (
            self.settings.PLAN_BATCH_SIZE,
            kill_switch.PAUSED_SCHEDULES,
            self.jobs(),
        )
        planned = plan_due(
            now=now,
            limit=limit,
            exclude_keys=paused,
            jobs=jobs,
            budget_seconds=PASS_BUDGET_SECONDS,
            ahead=self.settings.plan_ahead,
        )
        self._park_unplannable(now, jobs=jobs, limit=limit)
        if planned.planned:
            store.notify("plan")
        self._refresh_statistics(planned.planned)
        if self.plan_at is not None:
            self.plan_at = self._next_plan_at(now, planned, paused=paused, jobs=jobs)

    def _refresh_statistics(self, planned: int) -> None:
        """After passes that planned a large share of the occurrence table (a burst planned
        ahead), refresh its statistics before the burst is due (``store.refresh_statistics``).
        """
        self.planned_unanalyzed += planned
        if store.refresh_statistics(planned=self.planned_unanalyzed):
            log.info("statistics.refreshed", planned=self.planned_unanalyzed)
            self.planned_unanalyzed = 0

    def unplannable_after(self) -> timedelta:
        """How long a schedule whose job has no handler here may stay due, unplanned, before
        this replica parks it."""
        return max(UNPLANNABLE_AT_LEAST, UNPLANNABLE_POLLS * self._poll())

    def _poll(self) -> timedelta:
        return timedelta(seconds=self.settings.POLL_SECONDS)

    def _park_unplannable(self, now: datetime, *, jobs: list[str], limit: int) -> None:
        for name in store.park_unplannable(
            now=now,
            jobs=jobs,
            overdue=self.unplannable_after(),
            replica=self.replica_id,
            limit=limit,
        ):
            log.error("schedule.invalid", schedule=name, field="job", error_type="UnknownJob")

    def _next_plan_at(
        self, now: datetime, planned: PlanPass, *, paused: tuple[str, ...], jobs: list[str]
    ) -> datetime:
        if planned.schedules >= self.settings.PLAN_BATCH_SIZE or planned.more:
            return now  # more is due: plan again at the next step
        # Nothing more is due until the earliest next_due_at; a NOTIFY (an operator's enable
        # or run-now, another replica's plan), or POLL_SECONDS at the latest, brings it
        # forward. A schedule changed without a notify waits at most that long.
        poll = now + self._poll()
        due = store.next_schedule_due(
            exclude_keys=paused, jobs=jobs, ahead=due_within(self.settings.plan_ahead)
        )
        return poll if due is None else min(due, poll)


__all__ = ["UNPLANNABLE_AT_LEAST", "UNPLANNABLE_POLLS", "PlanCadence"]
