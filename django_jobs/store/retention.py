"""Retention: purging old occurrences by their schedule's Limit, retiring finished one-offs and
removing them once their own retention has passed (``django_jobs/worker/retention.py`` runs
these; ``services.purge`` runs ``purge_batch``)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple

from django.db import connection, transaction

from .. import audit
from ..clock import ensure_aware_utc
from ..models import TERMINAL_STATES, OccurrenceState, ScheduleStatus
from ._sql import _execute, _named_rows, _one_of, load_queries

QUERIES = load_queries(
    "retention",
    terminal_states=_one_of(TERMINAL_STATES),
    unfinished_states=_one_of(s for s in OccurrenceState if s not in TERMINAL_STATES),
)


class ScheduleName(NamedTuple):
    """A schedule retention retired or removed."""

    id: int
    tenant: str
    key: str


def _schedule_name(row: Any) -> ScheduleName:
    """A row of ``retire_one_offs`` or ``remove_schedules``, read by its column names."""
    return ScheduleName(id=row.id, tenant=row.tenant, key=row.key)


class Consumed(NamedTuple):
    """A declared one-off that ran and retired: sync does not create it again."""

    tenant: str
    key: str
    timing_kind: str
    run_at: datetime | None
    delay: timedelta | None


def purge_batch(schedule_id: int, *, now: datetime, batch_size: int) -> int:
    """Delete at most ``batch_size`` of one schedule's finished occurrences beyond its Limit,
    with their attempts and ``run.once`` steps, in one statement (all or nothing).

    The cutoff is the later of ``now - keep_for`` and the scheduled instant of the
    ``keep_last``-th newest occurrence; finished occurrences scheduled before it go.
    Occurrences still scheduled, processing or failed are never purged.
    """
    return purge_page([schedule_id], now=now, batch_size=batch_size)


# --- Automatic retention (django_jobs/worker/retention.py) ---------------------------------


def purge_page(schedule_ids: Sequence[int], *, now: datetime, batch_size: int) -> int:
    """``purge_batch`` for a page of schedules in one statement (automatic retention): at most
    ``batch_size`` of their finished occurrences beyond their Limits, oldest first within each
    schedule, with their attempts and steps (all or nothing). Fewer than ``batch_size``
    deleted: the page is caught up. One statement per page, where one per schedule cost a
    statement a minute for each of thousands of declared schedules with nothing to purge."""
    params: dict[str, Any] = {"schedules": list(schedule_ids), "now": now, "batch": batch_size}
    with connection.cursor() as cursor:
        cursor.execute(QUERIES["purge_page"], params)
        return int(cursor.rowcount)


def try_retention_lock() -> bool:
    """Take the fleet's retention lock for this session (connection), if no one holds it.

    A session-level advisory lock: it outlives the pass's many short transactions and goes
    with the connection if the replica dies.
    """
    (row,) = _named_rows(QUERIES["try_retention_lock"], {})
    return bool(row.taken)


def release_retention_lock() -> None:
    _execute(QUERIES["release_retention_lock"], {})


def schedules_with_limits(*, after: int, limit: int) -> list[int]:
    """Ids of schedules that have a retention Limit, after ``after``, in id order (a page)."""
    params = {"after": after, "limit": limit}
    return [row.schedule_id for row in _named_rows(QUERIES["schedules_with_limits"], params)]


def retire_one_offs(*, now: datetime) -> list[ScheduleName]:
    """Retire every active one-off (``at``/``after``) schedule whose occurrences are all final:
    status ``retired``, ``retired_at``, and for a declared one a ``ConsumedOneOff`` row so that
    sync does not create it again (one statement); then an audit record each, through the
    audit writer, in the same transaction. Returns each one retired."""
    now = ensure_aware_utc(now, name="now")
    with transaction.atomic():
        retired = [_schedule_name(r) for r in _named_rows(QUERIES["retire_one_offs"], {"now": now})]
        for schedule in retired:
            audit.record(
                at=now,
                actor=audit.RETENTION,
                action="schedule.retired",
                tenant=schedule.tenant,
                schedule_id=schedule.id,
                reason="a one-off whose occurrence is final",
                before={"status": ScheduleStatus.ACTIVE.value},
                after={"status": ScheduleStatus.RETIRED.value},
            )
    return retired


def remove_retired_one_offs(
    *, now: datetime, keep_without_duration: timedelta, batch_size: int
) -> list[ScheduleName]:
    """Delete up to ``batch_size`` retired one-off schedules whose retention has passed since
    they retired (their Limit's ``keep_for``, or ``keep_without_duration`` when the Limit
    only counts), with every row of theirs: occurrences, attempts, steps, Limit, runbooks.
    One transaction: the schedules are picked and locked first (a cheap read of the schedule
    table, usually empty), then deleted with all their rows in one statement; each removal
    leaves an audit record. Returns each one removed."""
    now = ensure_aware_utc(now, name="now")
    with transaction.atomic():
        params = {"now": now, "keep": keep_without_duration, "batch": batch_size}
        ids = [row.id for row in _named_rows(QUERIES["pick_retired_one_offs"], params)]
        if not ids:
            return []
        removed = [
            _schedule_name(r) for r in _named_rows(QUERIES["remove_schedules"], {"ids": ids})
        ]
        for schedule in removed:
            audit.record(
                at=now,
                actor=audit.RETENTION,
                action="schedule.removed",
                tenant=schedule.tenant,
                schedule_id=schedule.id,
                reason="a retired one-off past its retention",
                after={"key": schedule.key},
            )
        return removed


def consumed_one_offs() -> set[Consumed]:
    """Every consumed declared one-off."""
    return {
        Consumed(
            tenant=row.tenant,
            key=row.key,
            timing_kind=row.timing_kind,
            run_at=row.run_at.astimezone(UTC) if row.run_at else None,
            delay=row.delay,
        )
        for row in _named_rows(QUERIES["consumed_one_offs"], {})
    }


def record_retention(
    *,
    replica: str,
    started_at: datetime,
    finished_at: datetime,
    deleted: int,
    retired: int,
    removed: int,
    seconds: float,
    caught_up: bool,
) -> None:
    """Record what a retention pass did (the one ``RetentionState`` row, one upsert)."""
    params = {
        "replica": replica,
        "started": ensure_aware_utc(started_at, name="started_at"),
        "finished": ensure_aware_utc(finished_at, name="finished_at"),
        "deleted": deleted,
        "retired": retired,
        "removed": removed,
        "seconds": seconds,
        "caught_up": caught_up,
    }
    _execute(QUERIES["record_retention"], params)
