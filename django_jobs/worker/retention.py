"""Automatic retention: a serving fleet deletes what its schedules' Limits no longer keep.

Every ``RETENTION_SECONDS`` each serving replica's retention thread tries the fleet's
retention lock (a PostgreSQL advisory lock on its own connection); the one that gets it runs a
pass and the others wait for their next turn, so at most one replica deletes at a time. A
pass, off the claim path (its own thread and connection, short statements):

1. retires the one-off schedules whose occurrences are all final (``store.retire_one_offs``);
2. deletes each schedule's finished occurrences beyond its Limit, with their attempts and
   steps, ``PURGE_BATCH_SIZE`` at a time for a page of 500 schedules (``store.purge_page``),
   each batch its own short transaction, until caught up or ``RETENTION_BUDGET_SECONDS`` is
   spent (the next pass continues);
3. removes retired one-offs whose retention has passed since they retired, with their rows.

It records what it did in ``RetentionState`` (``jobs health --json`` shows it, with the lag)
and logs ``retention.pass``. Unfinished occurrences are never deleted.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import structlog
from django.db import DatabaseError, connections, transaction

from .. import store
from ..clock import Clock
from ..conf import JobsSettings
from .outage import OutageLog
from .supervision import Role, SupervisedThread, Supervisor

log = structlog.get_logger("django_jobs.retention")

_PAGE = 500  # schedules read per page of the Limit table


@dataclass
class RetentionPass:
    """What one pass did."""

    started_at: datetime
    deleted: int = 0
    retired: int = 0
    removed: int = 0
    schedules: int = 0  # schedules whose Limit the pass applied
    seconds: float = 0.0  # time spent in the pass's statements
    caught_up: bool = True  # False when the budget ran out with rows still to delete

    @property
    def rows_per_second(self) -> float:
        return self.deleted / self.seconds if self.seconds else 0.0

    def as_log(self) -> dict[str, Any]:
        return {
            "deleted": self.deleted,
            "retired": self.retired,
            "removed": self.removed,
            "schedules": self.schedules,
            "seconds": round(self.seconds, 3),
            "rows_per_second": round(self.rows_per_second, 1),
            "caught_up": self.caught_up,
        }


def run_pass(*, replica: str, clock: Clock, settings: JobsSettings) -> RetentionPass | None:
    """One retention pass on this thread's connection; ``None`` when another replica holds
    the retention lock (it is running one)."""
    if not store.try_retention_lock():
        return None
    try:
        result = _apply(clock=clock, settings=settings)
        store.record_retention(
            replica=replica,
            started_at=result.started_at,
            finished_at=clock.now(),
            deleted=result.deleted,
            retired=result.retired,
            removed=result.removed,
            seconds=result.seconds,
            caught_up=result.caught_up,
        )
    finally:
        store.release_retention_lock()
    log.info("retention.pass", replica=replica, **result.as_log())
    return result


def _apply(*, clock: Clock, settings: JobsSettings) -> RetentionPass:
    now = clock.now()
    result = RetentionPass(started_at=now)
    began = time.monotonic()
    budget_end = began + settings.RETENTION_BUDGET_SECONDS
    batch = settings.PURGE_BATCH_SIZE
    result.retired = len(store.retire_one_offs(now=now))
    after = 0
    while page := store.schedules_with_limits(after=after, limit=_PAGE):
        result.schedules += len(page)
        while True:
            count = store.purge_page(page, now=now, batch_size=batch)
            result.deleted += count
            if count < batch:
                break
            if time.monotonic() >= budget_end:
                result.caught_up = False
                break
        if not result.caught_up:
            break
        after = page[-1]
    keep = timedelta(seconds=settings.ONE_OFF_KEEP_SECONDS)
    while removed := _remove_retired_one_offs(now=now, keep=keep, batch=batch):
        result.removed += len(removed)
        if len(removed) < batch or time.monotonic() >= budget_end:
            break
    result.seconds = time.monotonic() - began
    return result


def _remove_retired_one_offs(
    *, now: datetime, keep: timedelta, batch: int
) -> list[store.ScheduleName]:
    """A batch of retired one-offs removed with their object permissions, in one transaction."""
    with transaction.atomic():
        removed = store.remove_retired_one_offs(
            now=now, keep_without_duration=keep, batch_size=batch
        )
        _forget_object_permissions([schedule.id for schedule in removed])
    return removed


def _forget_object_permissions(schedule_ids: list[int]) -> None:
    """django-guardian keeps object permissions by content type and primary key, without a
    foreign key: those of removed schedules go with them (ids are never reused, but a stale
    grant should not outlive its object)."""
    from django.contrib.contenttypes.models import ContentType
    from guardian.models import GroupObjectPermission, UserObjectPermission

    from ..models import Schedule

    kind = ContentType.objects.get_for_model(Schedule)
    keys = [str(i) for i in schedule_ids]
    for model in (UserObjectPermission, GroupObjectPermission):
        model.objects.filter(content_type=kind, object_pk__in=keys).delete()


class RetentionKeeper(SupervisedThread):
    """Runs a retention pass every ``RETENTION_SECONDS`` on its own connection, until stopped.

    A database error (an outage among them) ends the pass; it is logged at a bounded rate and
    the connection closed (which frees the lock); the next turn tries again. Any other error
    crashes the thread, its connection (and with it the fleet's lock) closed: its supervisor
    runs it again, bounded (``supervision.py``).
    """

    def __init__(
        self,
        *,
        replica: str,
        clock: Clock,
        settings: JobsSettings,
        supervisor: Supervisor | None = None,
    ) -> None:
        self.stopped = threading.Event()
        super().__init__(Role.RETENTION, supervisor=supervisor, stop_event=self.stopped)
        self.replica, self.clock, self.settings = replica, clock, settings
        self.errors = OutageLog(
            clock,
            patterns=settings.REDACT_PATTERNS,
            events=("retention.failed", "retention.still_failing", "retention.recovered"),
        )

    def body(self) -> None:
        try:
            while not self.stopped.wait(self.settings.RETENTION_SECONDS):
                self.run_once()
        finally:
            connections.close_all()  # never left holding the fleet's lock

    def run_once(self) -> RetentionPass | None:
        try:
            done = run_pass(replica=self.replica, clock=self.clock, settings=self.settings)
        except DatabaseError as exc:
            self.errors.failed(exc)
            connections.close_all()  # and with the connection, the lock
            return None
        self.errors.recovered()
        return done

    def stop(self) -> None:
        self.stopped.set()
