"""The drain: how a stopping replica lets go of its runs.

Steps (``Drain.run``):
1. stop claiming (the caller has); give running occurrences the shutdown grace, still
   enforcing their timeouts; a forced stop or a cut-off run ends the grace at once;
2. cancel the runs still going (reason ``shutdown``) and let them settle for a moment;
3. leave behind the runs that still have not returned, and release their leases so another
   replica can take them at once;
4. let the completer write the completions it holds, if the store answers; otherwise their
   leases expire like any lease this replica cannot write.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

import structlog
from django.db import DatabaseError

from .. import store
from ..clock import Clock
from ..safe_error import loggable
from .completer import Completer
from .deadlines import Deadlines
from .inflight import CancelReason, InFlight
from .outage import OutageLog, raise_unless_outage
from .wakeup import Wakeup

log = structlog.get_logger("django_jobs.worker")

# Seconds. Every wait below is cut short by a poke (a finished run, a signal): these are only
# upper bounds, so a missed poke costs at most that long.
DRAIN_WAIT_SECONDS = 1.0  # the grace, waiting for runs to finish
SETTLE_WAIT_SECONDS = 0.1  # the settle, waiting for cancelled runs to return
# After the grace, cancelled runs get this long to react before their leases are released (0
# when the process must end at once: a forced stop, or a run was cut off).
SETTLE_SECONDS = 2.0
# How long the drain waits for the completer to write what it holds (0 on a forced stop).
COMPLETER_SHUTDOWN_SECONDS = 2.0


def try_store(
    action: Callable[[], object], *, patterns: tuple[str, ...], outage: OutageLog | None = None
) -> None:
    """Run ``action`` once; a store outage is logged, not raised: a stopping replica that
    cannot reach the store leaves its leases to expire. Through ``outage``, the replica's
    outage log, a stop in the middle of an outage adds no line to the spell already logged."""
    try:
        action()
    except DatabaseError as exc:
        raise_unless_outage(exc)
        if outage is not None:
            outage.failed(exc, during="shutdown")
            return
        log.error("store.unavailable", during="shutdown", error=loggable(exc, patterns=patterns))


@dataclass(frozen=True)
class Drain:
    """The parts of a replica the drain needs (see the module docstring)."""

    clock: Clock
    grace: timedelta  # ``SHUTDOWN_GRACE_SECONDS``
    inflight: InFlight
    deadlines: Deadlines
    completer: Completer
    wakeup: Wakeup
    forced: threading.Event  # a second stop request: exit fast
    stop_writing: threading.Event  # set when the completer is left behind
    cut_off: Callable[[], bool]  # whether a run was cut off: the process must end now
    patterns: tuple[str, ...]
    timeout_grace: timedelta = timedelta(0)  # ``TIMEOUT_GRACE_SECONDS``
    outage: OutageLog | None = None  # the replica's bounded outage log

    def run(self, *, failed: bool = False) -> int:
        """Drain; return how many threads were left behind (the process must end without
        waiting for them). ``failed``: a thread of the replica failed (``supervision.py``),
        so the runs get no shutdown grace: they are cancelled at once and have the timeout
        grace to return."""
        until = self.clock.now() + (timedelta(0) if failed else self.grace)
        while len(self.inflight) and not self.forced.is_set() and self.clock.now() < until:
            if self.cut_off():
                break  # the process must end, not wait out the grace
            self.deadlines.enforce()
            left = (until - self.clock.now()).total_seconds()
            self.wakeup.wait(min(DRAIN_WAIT_SECONDS, left))
        for active in self.inflight.running():
            self.inflight.cancel(active, CancelReason.SHUTDOWN, self.clock.now())
        # After a cut-off the process must end now (that ends the abandoned handler): the
        # other runs are released, not waited for.
        if self.forced.is_set() or self.deadlines.cut_off_count:
            settle = self.clock.now()
        else:
            settle_for = self.timeout_grace if failed else timedelta(seconds=SETTLE_SECONDS)
            settle = self.clock.now() + settle_for
        while self.inflight.running() and self.clock.now() < settle:
            self.wakeup.wait(SETTLE_WAIT_SECONDS)
        stuck = self._release_leftovers() + self.deadlines.cut_off_count
        # Through a store outage no write goes through: waiting for the completer or for a
        # cut-off run's attempt would only keep an abandoned handler running.
        store_out = self.outage is not None and self.outage.active
        wait = 0 if self.forced.is_set() or store_out else COMPLETER_SHUTDOWN_SECONDS
        self.deadlines.wait_recorded(wait)  # a cut-off run's attempt, if the store answers
        if not self.completer.stop_and_wait(wait):
            stuck += 1
            self.stop_writing.set()
        elif self.completer.busy():  # it died holding completions: write them once
            self.completer.final()
        return stuck

    def _release_leftovers(self) -> int:
        """Leave behind the runs still going after the settle, and give their leases back;
        return how many."""
        leftovers = [run for run in self.inflight.running() if self.inflight.abandon(run)]
        if leftovers:
            leases = [a.lease for a in leftovers]
            release = lambda: store.release(leases, now=self.clock.now())  # noqa: E731
            try_store(release, patterns=self.patterns, outage=self.outage)
            try_store(lambda: store.notify("release"), patterns=self.patterns, outage=self.outage)
            log.info("worker.released", count=len(leftovers))
        return len(leftovers)


__all__ = [
    "COMPLETER_SHUTDOWN_SECONDS",
    "DRAIN_WAIT_SECONDS",
    "SETTLE_SECONDS",
    "SETTLE_WAIT_SECONDS",
    "Drain",
    "try_store",
]
