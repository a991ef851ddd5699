"""Runs past their deadline, runs whose lease cannot be confirmed in time, and runs that ignore
a cancellation: kept on the replica's own clock, never behind a store call.

``DeadlineWatch`` is a thread of its own that reads only the replica's books (``InFlight``)
and its clock, so a store that hangs or is gone, a loop busy planning, or a lease keeper that
crashed cannot delay it. What it does to a running run, first reason first:

- past its timeout: cancelled (reason ``timeout``);
- its lease not confirmed ``leases.confirm_margin`` before it expires: cancelled, reason
  ``outage`` while the replica knows of a store outage (its outage log is open), else
  ``unconfirmed`` (the replica was paused, its keeper restarting or failing): an
  ``unconfirmed`` run that stops is given back, and is never excused as an outage;
- cancelled (timeout, lost lease, outage) and its handler not returned
  ``TIMEOUT_GRACE_SECONDS`` later: cut off. A Python thread cannot be killed, so its thread is
  left behind, the replica stops claiming and exits with ``EXIT_RESTART`` so its supervisor
  restarts it, which ends the handler; then its attempt is recorded (writing only while its
  lease would be valid: ``outage.loop_write_deadline``). Anything the abandoned thread writes
  meanwhile is refused by fencing.

Shutdown has its own grace (``Worker._drain``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import datetime, timedelta

import structlog

from ..clock import Clock
from ..conf import JobsSettings
from .executor import Execution, record_cut_off
from .inflight import ActiveRun, CancelReason, InFlight, RunState
from .leases import confirm_margin, renew_every
from .outage import loop_write_deadline
from .outcomes import Tally
from .supervision import Role, SupervisedThread, Supervisor

log = structlog.get_logger("django_jobs.worker")

# The longest the watch sleeps between looks (seconds): a renewal moves a lease's margin and
# a fake clock in tests moves without telling anyone, so it never trusts one computed wait.
WATCH_MAX_WAIT_SECONDS = 0.25
# The shortest: an instant that has passed without anything to do never makes it spin.
WATCH_MIN_WAIT_SECONDS = 0.01


def cut_off_at(active: ActiveRun, grace: timedelta) -> datetime | None:
    """When a cancelled run that has not returned is cut off: its grace after it was
    cancelled for a timeout, a lost lease or an outage. Shutdown has its own grace."""
    if active.cancelled_at is None or active.reason == CancelReason.SHUTDOWN:
        return None
    return active.cancelled_at + grace


class Deadlines:
    """Enforces the running runs' timeouts, lease margins and cut-offs."""

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
        self._lock = threading.Condition()
        self._recording = 0  # cut-off runs whose attempt is being written
        # Whether the lease keeper has waited on the store past a renewal interval (a store
        # that hangs); set by the worker once its keeper exists.
        self.stalled: Callable[[], bool] = lambda: False

    @property
    def grace(self) -> timedelta:
        return timedelta(seconds=self.settings.TIMEOUT_GRACE_SECONDS)

    @property
    def margin(self) -> timedelta:
        return confirm_margin(self.settings.lease, self.grace)

    def unconfirmed_at(self, active: ActiveRun) -> datetime:
        """When ``active``'s lease counts as unconfirmed: its margin before the expiry the
        store last granted, or, while the keeper finds its row locked by the run's own
        ``run.atomic()`` (which no claim can take over), two renewal intervals after it last
        did."""
        if active.locked_at is not None:
            return active.locked_at + 2 * renew_every(self.settings.lease, self.grace)
        return active.lease.expires_at - self.margin

    def next_instants(self) -> list[datetime]:
        """When each running run next needs the watch: its deadline, its lease margin, or its
        cut-off (nothing for a run cancelled for shutdown: the drain has it)."""
        grace = self.grace
        instants = []
        for active in self.inflight.in_state(RunState.RUNNING):
            cut_off = cut_off_at(active, grace)
            if cut_off is not None:
                instants.append(cut_off)
            elif active.reason is None:
                instants += [active.deadline, self.unconfirmed_at(active)]
        return instants

    def enforce(self, *, record: Callable[[Callable[[], None]], None] | None = None) -> None:
        """Cancel runs past their deadline or their lease margin; cut off those that ignore a
        cancellation (timeout, lost lease, outage) past the grace. The attempts of the runs it
        cut off are written by ``record`` (the watch: on a thread of their own, so no store
        call holds up its next look), or here."""
        now = self.clock.now()
        grace = self.grace
        cut: list[ActiveRun] = []
        for active in self.inflight.in_state(RunState.RUNNING):
            cut_off = cut_off_at(active, grace)
            if cut_off is not None and now >= cut_off:
                cut.append(active)
            elif now >= active.deadline and self.inflight.cancel(active, CancelReason.TIMEOUT, now):
                log.warning("run.timed_out", occurrence=str(active.lease.occurrence_id))
            elif (
                not active.lost
                and now >= self.unconfirmed_at(active)
                and self.inflight.cancel(active, (reason := self._unconfirmed()), now)
            ):
                log.error(
                    "lease.unconfirmed",
                    occurrence=str(active.lease.occurrence_id),
                    token=active.lease.token,
                    expires_at=active.lease.expires_at.isoformat(),
                    reason=reason.value,
                )
        # Every run is cancelled or left behind before any write: a write waits for the store.
        cut = [active for active in cut if self._abandon(active)]
        if cut:
            (record or _now)(lambda: self._record(cut))

    def _record(self, cut: list[ActiveRun]) -> None:
        try:
            for active in cut:
                until = loop_write_deadline(active.lease)
                self.tally.add(record_cut_off(active, self.execution, until=until))
        finally:
            with self._lock:
                self._recording -= len(cut)
                self._lock.notify_all()

    def _unconfirmed(self) -> CancelReason:
        """Why a lease went unconfirmed: a store outage the replica knows of (one of its
        threads met one and it has not recovered, or the keeper's renewal hangs), or not."""
        outage = self.execution.outage
        if (outage is not None and outage.active) or self.stalled():
            return CancelReason.OUTAGE
        return CancelReason.UNCONFIRMED

    def wait_recorded(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the attempts of cut-off runs to be written (the
        process must not exit under the write); False if one is still being written (the
        store is out of reach: the next claim after the lease lapses records it lost)."""
        with self._lock:
            return self._lock.wait_for(lambda: self._recording <= 0, timeout=timeout)

    def _abandon(self, active: ActiveRun) -> bool:
        """Leave behind the thread of a run that ignores cancellation; the replica must
        restart. False if it returned after all."""
        if not self.inflight.abandon(active):
            return False
        log.error("run.cut_off", occurrence=str(active.lease.occurrence_id), reason=active.reason)
        with self._lock:
            self.cut_off_count += 1
            self._recording += 1
        self.on_cut_off()
        return True


class DeadlineWatch(SupervisedThread):
    """The thread that runs ``Deadlines.enforce`` at each run's next instant (and at least
    every ``WATCH_MAX_WAIT_SECONDS``), until stopped."""

    def __init__(self, deadlines: Deadlines, *, supervisor: Supervisor | None = None) -> None:
        self.stopped = threading.Event()
        super().__init__(Role.DEADLINES, supervisor=supervisor, stop_event=self.stopped)
        self.deadlines = deadlines
        self._poked = threading.Event()

    def poke(self) -> None:
        """Look again now (a run started, was cancelled or finished)."""
        self._poked.set()

    def stop(self) -> None:
        self.stopped.set()
        self._poked.set()

    def body(self) -> None:
        while not self.stopped.is_set():
            self.deadlines.enforce(record=_on_a_thread)
            self._poked.wait(self._wait_seconds())
            self._poked.clear()

    def _wait_seconds(self) -> float:
        now = self.deadlines.clock.now()
        waits = [(at - now).total_seconds() for at in self.deadlines.next_instants()]
        return max(WATCH_MIN_WAIT_SECONDS, min([WATCH_MAX_WAIT_SECONDS, *waits]))


def _now(write: Callable[[], None]) -> None:
    write()


def _on_a_thread(write: Callable[[], None]) -> None:
    """Write a cut-off run's attempt on a short-lived thread of its own: it may wait for the
    store up to the lease's expiry, and the replica is exiting anyway (``wait_recorded``)."""
    threading.Thread(target=write, name="django_jobs-cut-off-record", daemon=True).start()


__all__ = [
    "WATCH_MAX_WAIT_SECONDS",
    "WATCH_MIN_WAIT_SECONDS",
    "DeadlineWatch",
    "Deadlines",
    "cut_off_at",
]
