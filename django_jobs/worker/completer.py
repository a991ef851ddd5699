"""Group commit of completions: many finished runs recorded by one fenced statement.

A handler that returns without ``run.atomic()`` has nothing of its own to commit with its
completion, so its run thread hands the lease here and takes the next occurrence at once. This
thread writes whatever has gathered with one ``store.complete`` call: each row is still checked
against its own fencing token and owner, and a refused row is recorded ``fenced_out`` on its
Attempt and reported as a lost lease. Until its write lands, a handed-over run stays on the
replica's books: the lease keeper renews it, run passes and shutdown wait for it.

Through a store outage the batch is retried with backoff until the store answers
(``outage.keep_writing``): the fence, not the lease's expiry, decides whether a completion
still counts. A row refused after the
lease lapsed during the outage is excused (its attempt recorded ``outage``, its failure given
back), exactly as a run thread writing its own outcome would. Only a forced stop gives up.

Each line about a run is logged in that run's ``log_scope``: the worker's values of its
reserved keys, on this thread, where no handler ever ran.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import datetime, timedelta

import structlog
from django.db import DatabaseError, connections

from .. import signals, store
from ..clock import LATEST, Clock
from ..safe_error import loggable
from .alerts import FENCED_OUT, send_runs
from .executor import log_scope
from .inflight import ActiveRun
from .outage import OutageLog, Unwritten, drop_connection, keep_writing, raise_unless_outage
from .outcomes import EXCUSED, REFUSED, Outcome, ended_by_outage
from .supervision import Role, SupervisedThread, Supervisor

log = structlog.get_logger("django_jobs.worker")

# How long a stopped or dead completer's last write of what it holds may wait for the store.
FINAL_WRITE_SECONDS = 2.0


class Completer(SupervisedThread):
    """The thread that writes handed-over completions in batches of up to ``max_batch``, and
    reports each run's outcome to ``on_done``.

    A database error that is not an outage, or a bug, crashes it with its batch put back at
    the head of the queue: its supervisor runs it again (bounded), and the batch is written
    then; meanwhile the replica claims nothing (``supervision.py``).
    """

    def __init__(
        self,
        *,
        clock: Clock,
        on_done: Callable[[ActiveRun, Outcome], None],
        stop_writing: threading.Event,
        max_batch: int = 500,
        patterns: tuple[str, ...] = (),
        outage: OutageLog | None = None,
        supervisor: Supervisor | None = None,
    ) -> None:
        self._stop_asked = threading.Event()  # ends a restart's backoff
        super().__init__(Role.COMPLETER, supervisor=supervisor, stop_event=self._stop_asked)
        self.clock = clock
        self.on_done = on_done
        self.stop_writing = stop_writing  # a forced stop: give up on writes still failing
        self.max_batch = max_batch
        self.patterns = patterns
        self.outage = outage
        self._queue: list[ActiveRun] = []
        self._writing: list[ActiveRun] = []
        self._reported: set[int] = set()  # ids of the batch's runs already reported
        self._changed = threading.Condition()
        self._stopping = False

    def submit(self, active: ActiveRun) -> None:
        with self._changed:
            self._queue.append(active)
            self._changed.notify()

    def busy(self) -> bool:
        with self._changed:
            return bool(self._queue or self._writing)

    def stop(self) -> None:
        """Write what is queued, then end."""
        with self._changed:
            self._stopping = True
            self._changed.notify()
        self._stop_asked.set()

    def stop_and_wait(self, timeout: float) -> bool:
        """``stop``, and wait up to ``timeout`` seconds for the thread to end (if it ever
        started). False if it is still writing."""
        self.stop()
        if self.is_alive():
            self.join(timeout=timeout)
        return not self.is_alive()

    def body(self) -> None:
        try:
            while True:
                with self._changed:
                    while not self._queue and not self._stopping:
                        self._changed.wait()
                    if not self._queue:
                        return
                    batch = self._queue[: self.max_batch]
                    del self._queue[: self.max_batch]
                    self._writing = batch
                try:
                    self._write(batch)
                except BaseException:
                    unreported = [a for a in batch if id(a) not in self._reported]
                    with self._changed:  # written by the next run of this body
                        self._queue[:0] = unreported
                    raise
                finally:
                    with self._changed:
                        self._writing = []
        finally:
            connections.close_all()

    def final(self) -> None:
        """Stopped while waiting to restart after a crash, or dead: write what is queued,
        once, for at most ``FINAL_WRITE_SECONDS`` (the drain calls it for a dead completer)."""
        with self._changed:
            queued, self._queue = self._queue, []
        if not queued:
            return
        try:
            until = self.clock.now() + timedelta(seconds=FINAL_WRITE_SECONDS)
            self._write(queued, until=until)
        except Exception as exc:  # the error that killed it: the leases will lapse
            log.error(
                "outcome.unwritten",
                outcome=Outcome.COMPLETED.value,
                count=len(queued),
                error=loggable(exc, patterns=self.patterns, max_chars=200),
            )
        finally:
            connections.close_all()

    def _write(self, batch: list[ActiveRun], *, until: datetime = LATEST) -> None:
        self._reported = set()
        if not batch:
            return
        result = keep_writing(
            # The leases are read afresh at every try: the keeper may have renewed them.
            lambda: store.complete([a.lease for a in batch], now=self.clock.now()),
            clock=self.clock,
            stop=self.stop_writing,
            outage=self.outage,
            during="completion",
            until=until,
        )
        if isinstance(result, Unwritten):
            error = loggable(result.error, patterns=self.patterns, max_chars=200)
            for active in batch:
                with log_scope(active):
                    log.error("outcome.unwritten", outcome=Outcome.COMPLETED.value, error=error)
                self._reported.add(id(active))
                self.on_done(active, Outcome.UNWRITTEN)
            return
        for active in batch:
            self._report(active, accepted=active.lease.occurrence_id in result.accepted)
        # After the reports: a receiver never delays a run's release from the books.
        send_runs(
            signals.occurrence_completed,
            (a for a in batch if a.lease.occurrence_id in result.accepted),
        )
        send_runs(
            signals.lease_lost,
            (a for a in batch if a.lease.occurrence_id in result.refused),
            reason=FENCED_OUT,
        )

    def _report(self, active: ActiveRun, *, accepted: bool) -> None:
        self._reported.add(id(active))
        with log_scope(active):
            if accepted:
                log.info("occurrence.completed")
                self.on_done(active, Outcome.COMPLETED)
            elif ended_by_outage(active.reason):
                # The lease lapsed while the store was out of reach: not a failure.
                self._excuse(active)
            else:
                log.warning("occurrence.fenced_out")
                self.on_done(active, REFUSED)

    def _excuse(self, active: ActiveRun) -> None:
        log.warning("lease.lost", reason="outage")
        try:
            store.excuse_outage(active.lease, now=self.clock.now())
        except DatabaseError as exc:
            raise_unless_outage(exc)
            drop_connection()
            if self.outage is not None:
                self.outage.failed(exc, during="completion")
        self.on_done(active, EXCUSED)


__all__ = ["Completer"]
