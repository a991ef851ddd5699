"""Keeping this replica's leases: renewed well before they expire, or their runs stopped."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import timedelta

import structlog
from django.db import connections

from .. import store
from ..clock import Clock
from ..safe_error import loggable
from .executor import STORE_OUTAGE, ActiveRun, CancelReason

log = structlog.get_logger("django_jobs.worker")


class LeaseKeeper(threading.Thread):
    """Renews the leases of running occurrences every third of the lease.

    A lease the store no longer grants (its token is stale: another replica took the
    occurrence over) cancels its run at once. When the store cannot be reached, a run is
    cancelled before its lease would expire, so it never works on after another replica may
    have taken it: a replica that cannot renew its lease stops that work.
    """

    def __init__(
        self,
        *,
        owner: str,
        clock: Clock,
        lease_for: timedelta,
        active: Callable[[], list[ActiveRun]],
        patterns: tuple[str, ...] = (),
    ) -> None:
        super().__init__(name="django_jobs-lease-keeper", daemon=True)
        self.owner, self.clock, self.lease_for, self.active = owner, clock, lease_for, active
        self.interval = lease_for / 3
        # Stop a run this long before its lease expires when renewal keeps failing.
        self.margin = lease_for / 6
        self.stopped = threading.Event()
        self.patterns = patterns  # REDACT_PATTERNS, for logged errors

    def run(self) -> None:
        try:
            while not self.stopped.wait(self.interval.total_seconds()):
                self.renew_once()
        finally:
            connections.close_all()

    def renew_once(self) -> None:
        runs = [r for r in self.active() if not r.abandoned and r.reason != CancelReason.LEASE_LOST]
        if not runs:
            return
        now = self.clock.now()
        try:
            kept = store.renew(
                [r.lease for r in runs], owner=self.owner, now=now, lease_for=self.lease_for
            )
        except STORE_OUTAGE as exc:
            connections["default"].close_if_unusable_or_obsolete()
            for r in runs:
                if now >= r.lease.expires_at - self.margin:
                    log.error(
                        "lease.unrenewable",
                        occurrence=str(r.lease.occurrence_id),
                        token=r.lease.token,
                        error=loggable(exc, patterns=self.patterns, max_chars=200),
                    )
                    r.cancel_for(CancelReason.LEASE_LOST)
            return
        renewed = {lease.occurrence_id: lease for lease in kept}
        for r in runs:
            lease = renewed.get(r.lease.occurrence_id)
            if lease is None:
                log.warning(
                    "lease.lost", occurrence=str(r.lease.occurrence_id), token=r.lease.token
                )
                r.cancel_for(CancelReason.LEASE_LOST)
            else:
                r.lease = lease
