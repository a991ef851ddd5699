"""A replica's start-up sync, run beside serving.

``runworker`` serves the schedule records already stored from its first pass; this thread
brings them up to the replica's declarations meanwhile (``services.sync_if_changed``): skipped
when the last completed sync wrote the same declared set, waiting for a sync in progress on
another replica otherwise. Its connection is its own, so a long sync never delays a claim,
and a store outage is waited out with the loop's backoff. Any other error is logged and ends
the thread: the replica goes on serving the records it has (``jobs sync`` writes them).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

import structlog
from django.db import DatabaseError, connection

from .. import services
from ..clock import Clock
from ..declarations import Declaration
from ..safe_error import loggable
from ..services import SyncReport
from ..worker.outage import call_outage, pass_backoff
from ..worker.supervision import Role, SupervisedThread, Supervisor

log = structlog.get_logger("django_jobs.worker")


class StartupSync(SupervisedThread):
    """Sync ``declarations`` once, beside serving; hand the report to ``done``. What escapes
    the errors it handles (a ``BaseException``, a bug in the handling) goes to the replica's
    supervisor (``worker.supervision``)."""

    def __init__(
        self,
        declarations: Sequence[Declaration],
        *,
        replica: str,
        clock: Clock,
        stopping: threading.Event,
        done: Callable[[SyncReport], object],
        supervisor: Supervisor | None = None,
    ) -> None:
        super().__init__(Role.STARTUP_SYNC, supervisor=supervisor, stop_event=stopping)
        self.declarations, self.replica, self.clock = declarations, replica, clock
        self.stopping, self.done = stopping, done

    def body(self) -> None:
        backoff = pass_backoff()
        try:
            while not self.stopping.is_set():
                try:
                    report = services.sync_if_changed(
                        self.declarations, now=self.clock.now(), by=self.replica
                    )
                except Exception as exc:
                    # Out of reach, or a server that takes no writes: try again.
                    if isinstance(exc, DatabaseError) and call_outage(exc):
                        log.warning(
                            "sync.store_unavailable", replica=self.replica, error=loggable(exc)
                        )
                        connection.close()
                        self.stopping.wait(backoff.next_delay())
                        continue
                    log.error(
                        "sync.failed",
                        replica=self.replica,
                        error_type=type(exc).__name__,
                        error=loggable(exc),
                    )
                    return
                log.info("sync.done", replica=self.replica, report=str(report))
                self.done(report)
                return
        finally:
            connection.close()
