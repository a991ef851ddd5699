"""The worker loop: claim due occurrences, run them, write outcomes; survive store outages."""

from __future__ import annotations

import os
import secrets
import socket
import threading
from collections import Counter
from dataclasses import dataclass, field

import structlog
from django.db import DatabaseError, InterfaceError, OperationalError, close_old_connections

from .. import store
from ..clock import Clock, SystemClock
from ..conf import JobsSettings, get_settings
from ..models import Schedule
from ..registry import Registry, registry
from .executor import Execution, Outcome, execute
from .planning import plan_due

log = structlog.get_logger("django_jobs.worker")

# Errors that mean "the database cannot be reached", not "the job failed".
STORE_OUTAGE = (OperationalError, InterfaceError)


def default_replica_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


@dataclass
class PassSummary:
    claimed: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)

    def __str__(self) -> str:
        parts = [f"claimed {self.claimed}"]
        parts += [f"{name} {self.outcomes[name]}" for name in sorted(self.outcomes)]
        return ", ".join(parts)


class Worker:
    """One replica. Any number may run at once against the same database."""

    def __init__(
        self,
        *,
        replica_id: str | None = None,
        clock: Clock | None = None,
        tenant: str | None = None,
        jobs: Registry = registry,
        settings: JobsSettings | None = None,
    ) -> None:
        self.replica_id = replica_id or default_replica_id()
        self.clock = clock or SystemClock()
        self.tenant = tenant
        self.settings = settings or get_settings()
        self.stopping = threading.Event()
        self._execution = Execution(clock=self.clock, settings=self.settings, registry=jobs)

    def sync_clock(self, samples: int = 3) -> None:
        """Align a SystemClock with the database's so all replicas share one timeline.

        Takes the sample with the shortest round trip, as NTP does: its error is at most half
        that round trip.
        """
        if not isinstance(self.clock, SystemClock):
            return
        best = None
        for _ in range(samples):
            before = self.clock.now() - self.clock.offset
            db_now = store.database_clock()
            after = self.clock.now() - self.clock.offset
            if best is None or after - before < best[0]:
                best = (after - before, store.measure_clock_offset(before, after, db_now))
        assert best is not None
        round_trip, offset = best
        self.clock.set_offset(offset)
        log.info(
            "clock.synced",
            offset_ms=round(offset.total_seconds() * 1000, 2),
            error_bound_ms=round(round_trip.total_seconds() * 500, 2),
        )

    def run_pass(self) -> PassSummary:
        """Plan what has come due, claim one batch of due occurrences, and run them in order.

        Once ``stopping`` is set no further occurrence of the batch starts: the rest are
        released so another replica can take them at once.
        """
        summary = PassSummary()
        plan_due(now=self.clock.now())
        leases = store.claim(
            owner=self.replica_id,
            now=self.clock.now(),
            lease_for=self.settings.lease,
            limit=self.settings.CLAIM_BATCH_SIZE,
            tenant=self.tenant,
        )
        summary.claimed = len(leases)
        if not leases:
            return summary
        schedules = Schedule.objects.in_bulk({lease.schedule_id for lease in leases})
        for index, lease in enumerate(leases):
            if self.stopping.is_set():
                store.release(leases[index:], now=self.clock.now())
                summary.outcomes["released"] += len(leases) - index
                break
            log.info("occurrence.claimed", occurrence=str(lease.occurrence_id), token=lease.token)
            outcome = execute(lease, schedules[lease.schedule_id], self._execution)
            summary.outcomes[outcome.value] += 1
        return summary

    def serve(self) -> None:
        """Run passes until ``stopping`` is set, backing off while the store is out."""
        outage_started = None
        while not self.stopping.is_set():
            close_old_connections()
            try:
                summary = self.run_pass()
            except STORE_OUTAGE as exc:
                if outage_started is None:
                    outage_started = self.clock.now()
                    log.error("store.unavailable", error=str(exc).strip()[:200])
                self.stopping.wait(self.settings.POLL_SECONDS)
                continue
            except DatabaseError:
                log.exception("worker.pass_failed")
                self.stopping.wait(self.settings.POLL_SECONDS)
                continue
            if outage_started is not None:
                log.info("store.recovered", down_since=outage_started.isoformat())
                outage_started = None
            if summary.claimed == 0:
                self.stopping.wait(self.settings.POLL_SECONDS)


__all__ = ["Outcome", "PassSummary", "Worker", "default_replica_id"]
