"""The terminal view's reads (``services.watch``, ``jobs top``): the running occurrences, the
recent failures and dead letters, and one queue's due work, of the schedules a user may see.
Nothing here writes or locks; each is one statement over a bounded index range
(``sql/watch.sql``) returning a bounded list."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from ..clock import ensure_aware_utc
from ._sql import _named_rows, load_queries

QUERIES = load_queries("watch")


def _scope(ids: Sequence[int] | None, queue: str | None) -> dict[str, Any]:
    return {"ids": None if ids is None else list(ids), "queue": queue}


def queue_due_work(
    ids: Sequence[int] | None, *, queue: str, now: datetime, cap: int
) -> tuple[int, datetime | None]:
    """Occurrences of ``queue`` due by ``now`` and not started (counted up to ``cap``), and
    the oldest due instant among them, of the schedules ``ids`` (None: every one)."""
    (row,) = _named_rows(
        QUERIES["queue_due"],
        {**_scope(ids, queue), "now": ensure_aware_utc(now, name="now"), "cap": cap},
    )
    return int(row.waiting), row.oldest


def running_occurrences(
    ids: Sequence[int] | None, *, queue: str | None, limit: int, cap: int
) -> tuple[list[Any], int]:
    """The processing occurrences of the schedules ``ids`` (None: every one), on ``queue``
    (None: any), longest running first: ``limit`` rows (id, tenant, key, replica,
    lease_expires_at, attempt, started_at, queue), and how many there are, up to ``cap``."""
    rows = _named_rows(QUERIES["running"], {**_scope(ids, queue), "limit": limit, "cap": cap})
    total = int(rows[0].total) if rows else 0
    return [row for row in rows if row.id is not None], total


def recent_failures(
    ids: Sequence[int] | None,
    *,
    queue: str | None,
    since: datetime,
    now: datetime,
    limit: int,
    scan: int,
) -> tuple[list[Any], int, int, datetime | None]:
    """The occurrences failed (waiting for a retry) or dead whose last attempt failed in
    ``(since, now]``, looked for among the newest ``scan`` attempts, newest first: ``limit``
    rows (id, tenant, key, state, attempts, queue, failed_at, error_type, error_message), how
    many there are, how many attempts were read and when the oldest of them started."""
    rows = _named_rows(
        QUERIES["failures"],
        {
            **_scope(ids, queue),
            "since": ensure_aware_utc(since, name="since"),
            "now": ensure_aware_utc(now, name="now"),
            "limit": limit,
            "scan": scan,
        },
    )
    first = rows[0]  # the reach is one row even when nothing failed
    found = [row for row in rows if row.id is not None]
    return found, int(first.total), int(first.attempts_read), first.read_since
