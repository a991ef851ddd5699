"""Keeping this replica's leases: renewed well before they expire, or their runs stopped."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import timedelta

import structlog
from django.db import DatabaseError, connections

from .. import store
from ..clock import Clock
from .inflight import CancelReason, InFlight
from .outage import OutageLog, drop_connection, raise_unless_outage

log = structlog.get_logger("django_jobs.worker")


class LeaseKeeper(threading.Thread):
    """Renews the leases of in-flight runs every third of the lease, on its own connection.

    A lease the store refuses (its token is stale: another replica took the occurrence over,
    or an operator cancelled it) cancels its run at once, reason ``lease_lost``. When the
    store cannot be reached, a run is cancelled a sixth of the lease before its lease would
    expire, reason ``outage``, so it stops before another replica may take it over. Either
    way the loop cuts off a handler that has not returned ``TIMEOUT_GRACE_SECONDS`` later: a
    replica that cannot renew its lease stops that work.

    Renewal never waits behind a run's ``run.atomic()`` lock (see ``store.renew``).
    """

    def __init__(
        self,
        *,
        owner: str,
        clock: Clock,
        lease_for: timedelta,
        inflight: InFlight,
        outage: OutageLog,
        on_cancel: Callable[[], None] = lambda: None,
    ) -> None:
        super().__init__(name="django_jobs-lease-keeper", daemon=True)
        self.owner, self.clock, self.lease_for = owner, clock, lease_for
        self.inflight, self.outage, self.on_cancel = inflight, outage, on_cancel
        self.interval = lease_for / 3
        # Stop a run this long before its lease expires when renewal keeps failing.
        self.margin = lease_for / 6
        self.stopped = threading.Event()

    def run(self) -> None:
        try:
            while not self.stopped.wait(self.interval.total_seconds()):
                self.renew_once()
        finally:
            connections.close_all()

    def renew_once(self) -> None:
        runs = self.inflight.to_keep()
        if not runs:
            return
        now = self.clock.now()
        try:
            kept = store.renew(
                [r.lease for r in runs], owner=self.owner, now=now, lease_for=self.lease_for
            )
        except DatabaseError as exc:
            raise_unless_outage(exc)
            drop_connection()
            self.outage.failed(exc, during="renewal")
            for r in runs:
                near_expiry = now >= r.lease.expires_at - self.margin
                if near_expiry and self.inflight.cancel(r, CancelReason.OUTAGE, now):
                    log.error(
                        "lease.unconfirmed", occurrence=str(r.occurrence_id), token=r.lease.token
                    )
            self.on_cancel()
            return
        renewed = {lease.occurrence_id: lease for lease in kept}
        for r in runs:
            lease = renewed.get(r.occurrence_id)
            if lease is not None:
                self.inflight.renewed(r, lease)
                continue
            log.warning("lease.lost", occurrence=str(r.occurrence_id), token=r.lease.token)
            self.inflight.lose(r, now)
        self.on_cancel()
