"""Group commit of completions: many finished runs recorded by one fenced statement.

A handler that returns without ``run.atomic()`` has nothing of its own to commit with its
completion, so its run thread hands the lease here and takes the next occurrence at once. This
thread writes whatever has gathered with one ``store.complete`` call: each row is still checked
against its own fencing token and owner, and a refused row is recorded ``fenced_out`` on its
Attempt and reported as a lost lease. Until its write lands, a handed-over run stays on the
replica's books: the lease keeper renews it, run passes and shutdown wait for it.

Through a store outage the batch is retried with backoff; a run whose lease expires before the
write lands is reported unwritten (another replica will run the occurrence again, and the
occurrence key makes that safe), exactly as a run thread writing its own completion would.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import datetime

import structlog
from django.db import connection, connections

from .. import store
from ..clock import Clock
from ..safe_error import loggable
from .executor import STORE_OUTAGE, ActiveRun, Outcome
from .outage import Backoff

log = structlog.get_logger("django_jobs.worker")


class Completer(threading.Thread):
    def __init__(
        self,
        *,
        clock: Clock,
        on_done: Callable[[ActiveRun, Outcome], None],
        stop_writing: threading.Event,
        max_batch: int = 500,
        patterns: tuple[str, ...] = (),
    ) -> None:
        super().__init__(name="django_jobs-completer", daemon=True)
        self.clock = clock
        self.on_done = on_done
        self.stop_writing = stop_writing  # a forced stop: give up on writes still failing
        self.max_batch = max_batch
        self.patterns = patterns
        self._queue: list[ActiveRun] = []
        self._writing: list[ActiveRun] = []
        self._changed = threading.Condition()
        self._stopping = False

    def submit(self, active: ActiveRun) -> None:
        with self._changed:
            self._queue.append(active)
            self._changed.notify()

    def held(self) -> list[ActiveRun]:
        """Runs handed over and not yet written: their leases must be kept."""
        with self._changed:
            return [*self._writing, *self._queue]

    def busy(self) -> bool:
        with self._changed:
            return bool(self._queue or self._writing)

    def stop(self) -> None:
        """Write what is queued, then end."""
        with self._changed:
            self._stopping = True
            self._changed.notify()

    def run(self) -> None:
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
                finally:
                    with self._changed:
                        self._writing = []
        finally:
            connections.close_all()

    def _write(self, batch: list[ActiveRun]) -> None:
        backoff = Backoff(base=0.2, cap=5.0)
        while batch:
            try:
                result = store.complete([a.lease for a in batch], now=self.clock.now())
            except STORE_OUTAGE as exc:
                connection.close_if_unusable_or_obsolete()
                now = self.clock.now()
                for active in [a for a in batch if self._give_up(a, now)]:
                    log.error(
                        "outcome.unwritten",
                        occurrence=str(active.lease.occurrence_id),
                        outcome=Outcome.COMPLETED.value,
                        error=loggable(exc, patterns=self.patterns, max_chars=200),
                    )
                    batch.remove(active)
                    self.on_done(active, Outcome.UNWRITTEN)
                self.stop_writing.wait(backoff.next_delay())
                continue
            for active in batch:
                lease = active.lease
                occurrence = str(lease.occurrence_id)
                if lease.occurrence_id in result.accepted:
                    log.info("occurrence.completed", occurrence=occurrence, token=lease.token)
                    self.on_done(active, Outcome.COMPLETED)
                else:
                    log.warning("occurrence.fenced_out", occurrence=occurrence)
                    self.on_done(active, Outcome.LEASE_LOST)
            return

    def _give_up(self, active: ActiveRun, now: datetime) -> bool:
        return self.stop_writing.is_set() or now >= active.lease.expires_at


__all__ = ["Completer"]
