"""Runs past their deadline, and runs that ignore a cancellation.

A run past its timeout is cancelled (reason ``timeout``). A cancelled run (timeout, lost lease,
outage) whose handler has not returned ``TIMEOUT_GRACE_SECONDS`` later is cut off: a Python
thread cannot be killed, so its attempt is recorded, its thread is left behind, and the
replica stops claiming and exits with ``EXIT_RESTART`` so its supervisor restarts it, which
ends the handler. Anything the abandoned thread writes meanwhile is refused by fencing (a
timed-out occurrence is no longer processing under its token; a lost lease has another
holder). Shutdown has its own grace (``Worker._drain``).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

import structlog

from ..clock import Clock
from ..conf import JobsSettings
from .executor import Execution, record_cut_off
from .inflight import ActiveRun, CancelReason, InFlight, RunState
from .outage import loop_write_deadline
from .outcomes import Tally

log = structlog.get_logger("django_jobs.worker")


def cut_off_at(active: ActiveRun, grace: timedelta) -> datetime | None:
    """When a cancelled run that has not returned is cut off: its grace after it was
    cancelled for a timeout, a lost lease or an outage. Shutdown has its own grace."""
    if active.cancelled_at is None or active.reason == CancelReason.SHUTDOWN:
        return None
    return active.cancelled_at + grace


class Deadlines:
    """Enforces the running runs' timeouts and cut-offs, from the loop's thread."""

    def __init__(
        self,
        *,
        clock: Clock,
        settings: JobsSettings,
        inflight: InFlight,
        execution: Execution,
        tally: Tally,
        on_cut_off: Callable[[], None],
    ) -> None:
        self.clock, self.settings, self.inflight = clock, settings, inflight
        self.execution, self.tally = execution, tally
        self.on_cut_off = on_cut_off  # the replica must restart: stop claiming, exit 3
        self.cut_off_count = 0  # runs left behind on their threads

    @property
    def grace(self) -> timedelta:
        return timedelta(seconds=self.settings.TIMEOUT_GRACE_SECONDS)

    def next_instants(self) -> list[datetime]:
        """When each running run next needs the loop: its deadline, or its cut-off."""
        grace = self.grace
        instants = []
        for active in self.inflight.in_state(RunState.RUNNING):
            cut_off = cut_off_at(active, grace)
            instants.append(active.deadline if cut_off is None else cut_off)
        return instants

    def enforce(self) -> None:
        """Cancel runs past their deadline; cut off those that ignore a cancellation (timeout,
        lost lease, outage) past the grace."""
        now = self.clock.now()
        grace = self.grace
        for active in self.inflight.in_state(RunState.RUNNING):
            cut_off = cut_off_at(active, grace)
            if cut_off is not None and now >= cut_off:
                self._cut_off(active)
            elif now >= active.deadline and self.inflight.cancel(active, CancelReason.TIMEOUT, now):
                log.warning("run.timed_out", occurrence=str(active.lease.occurrence_id))

    def _cut_off(self, active: ActiveRun) -> None:
        """Leave behind the thread of a run that ignores cancellation, and record its attempt
        (writing only while its lease would be valid: ``outage.loop_write_deadline``)."""
        if not self.inflight.abandon(active):
            return  # it returned after all
        log.error("run.cut_off", occurrence=str(active.lease.occurrence_id), reason=active.reason)
        until = loop_write_deadline(active.lease)
        outcome = record_cut_off(active, self.execution, until=until)
        self.cut_off_count += 1
        self.tally.add(outcome)
        self.on_cut_off()


__all__ = ["Deadlines", "cut_off_at"]
