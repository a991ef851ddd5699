"""Keeping this replica's leases: renewed well before they expire.

When renewal cannot be confirmed (the store out of reach, a renewal that fails, a keeper that
is restarting or stuck), the deadline watch (``deadlines.py``), not the keeper, stops the runs
in time: a run is cancelled ``confirm_margin`` before its lease expires, so a handler that
ignores the cancellation is cut off one renewal interval before another replica may claim the
occurrence. The arithmetic, with lease ``L`` and cut-off grace ``G`` (``TIMEOUT_GRACE_SECONDS``):

- renewal every ``I = (L - G) / 4`` (``renew_every``);
- a run whose lease was last confirmed at ``t`` (expiring at ``t + L``) is cancelled at
  ``t + L - (I + G) = t + 3I``: two more renewals are tried before that;
- if its handler ignores the cancellation it is cut off at ``t + 3I + G = t + L - I``: one
  renewal interval before the lease expires, and the replica exits for a restart.

``conf`` refuses a grace that is not shorter than the lease. Defaults (30 s, 10 s): renewal every
5 s, cancellation 20 s after the last confirmation, cut-off 5 s before the expiry.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import timedelta

import structlog
from django.db import DatabaseError, connections

from .. import store
from ..clock import Clock
from .inflight import InFlight
from .outage import OutageLog, drop_connection, raise_unless_outage
from .supervision import Role, SupervisedThread, Supervisor

log = structlog.get_logger("django_jobs.worker")


def renew_every(lease_for: timedelta, grace: timedelta) -> timedelta:
    """How often leases are renewed (``I`` of the module docstring)."""
    return (lease_for - grace) / 4 if lease_for > grace else lease_for / 4


def confirm_margin(lease_for: timedelta, grace: timedelta) -> timedelta:
    """How long before its lease expires an unconfirmed run is cancelled: one renewal interval
    plus the cut-off grace, so its cut-off lands one interval before the expiry."""
    return renew_every(lease_for, grace) + grace


class LeaseKeeper(SupervisedThread):
    """Renews the leases of in-flight runs every ``renew_every``, on its own connection.

    A lease the store refuses (its token is stale: another replica took the occurrence over,
    or an operator cancelled it) cancels its run at once, reason ``lease_lost``. A store outage
    is logged and renewal tried again at the next turn. Any other error (a database error that
    is not an outage, a bug) crashes the keeper: its supervisor restarts it, bounded, and no
    claim is made meanwhile (``supervision.py``).

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
        grace: timedelta = timedelta(0),
        supervisor: Supervisor | None = None,
    ) -> None:
        self.stopped = threading.Event()
        super().__init__(Role.LEASE_KEEPER, supervisor=supervisor, stop_event=self.stopped)
        self.owner, self.clock, self.lease_for = owner, clock, lease_for
        self.inflight, self.outage, self.on_cancel = inflight, outage, on_cancel
        self.interval = renew_every(lease_for, grace)
        self._renewing_since: float | None = None  # time.monotonic() of a call in progress

    def stalled(self) -> bool:
        """Whether a renewal has been waiting on the store for longer than a renewal interval:
        a store that hangs raises nothing, but is out of reach all the same."""
        since = self._renewing_since
        return since is not None and time.monotonic() - since > self.interval.total_seconds()

    def body(self) -> None:
        try:
            # Renew at once on a start or restart: a keeper restarted after a crash renews
            # before the deadline watch's margin, not a whole interval later.
            self.renew_once()
            while not self.stopped.wait(self.interval.total_seconds()):
                self.renew_once()
        finally:
            connections.close_all()

    def renew_once(self) -> None:
        runs = self.inflight.to_keep()
        if not runs:
            return
        now = self.clock.now()
        self._renewing_since = time.monotonic()
        try:
            kept = store.renew(
                [r.lease for r in runs], owner=self.owner, now=now, lease_for=self.lease_for
            )
        except DatabaseError as exc:
            raise_unless_outage(exc)  # anything else: the keeper crashes and is restarted
            drop_connection()
            self.outage.failed(exc, during="renewal")
            return
        finally:
            self._renewing_since = None
        # By occurrence and token: a run whose lapsed lease this replica's own claim took
        # over is not renewed by its successor's lease.
        renewed = {(lease.occurrence_id, lease.token): lease for lease in kept}
        for r in runs:
            lease = renewed.get((r.occurrence_id, r.lease.token))
            if lease is not None:
                self.inflight.renewed(r, lease, now)
                continue
            log.warning("lease.lost", occurrence=str(r.occurrence_id), token=r.lease.token)
            self.inflight.lose(r, now)
        self.on_cancel()


__all__ = ["LeaseKeeper", "confirm_margin", "renew_every"]
