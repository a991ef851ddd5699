"""The console's reads (``services.dashboard``): due work, outcomes over time and the
schedules' lines, of the schedules a user may see. Each is one statement over an index
range (``sql/console.sql``); none counts the whole occurrence table."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from ..clock import ensure_aware_utc
from ._sql import _named_rows, load_queries

# The permission filter of each statement: none (every schedule), or the ids in %(ids)s.
_EVERY = load_queries("console", visible="", visible_schedule="")
_SCOPED = load_queries(
    "console",
    visible="AND schedule_id = ANY(%(ids)s::bigint[])",
    visible_schedule="AND s.id = ANY(%(ids)s::bigint[])",
)


def _run(name: str, ids: Sequence[int] | None, **params: Any) -> list[Any]:
    """Statement ``name`` over every schedule (``ids`` None) or those of ``ids``."""
    queries = _EVERY if ids is None else _SCOPED
    return _named_rows(queries[name], {**params, "ids": list(ids or ())})


def due_work(ids: Sequence[int] | None, *, now: datetime, cap: int) -> tuple[int, datetime | None]:
    """Occurrences due by ``now`` and not started (counted up to ``cap``), and the oldest
    due instant among them."""
    (row,) = _run("due", ids, now=ensure_aware_utc(now, name="now"), cap=cap)
    return row.waiting, row.oldest


def queue_work(ids: Sequence[int] | None, *, now: datetime, cap: int) -> list[Any]:
    """(queue, due, running) of each queue with due work not started (counted within ``cap``
    rows, as ``due_work``) or occurrences running at ``now``, by name."""
    return _run("queues", ids, now=ensure_aware_utc(now, name="now"), cap=cap)


def outcomes_by_bucket(
    ids: Sequence[int] | None, *, since: datetime, now: datetime, buckets: int
) -> list[Any]:
    """(bucket, state, occurrences) of the occurrences scheduled in [since, now): bucket 1
    is the oldest of ``buckets`` equal spans."""
    return _run(
        "chart",
        ids,
        since=since,
        now=now,
        since_epoch=since.timestamp(),
        now_epoch=now.timestamp(),
        buckets=buckets,
    )


def schedule_lines(
    ids: Sequence[int] | None,
    *,
    since: datetime,
    now: datetime,
    limit: int,
    offset: int,
    cap: int,
    streak_depth: int,
) -> list[Any]:
    """One page of the schedules' lines (``sql/console.sql``, ``lines``), those that most
    need attention first."""
    return _run(
        "lines",
        ids,
        since=since,
        now=now,
        limit=limit,
        offset=offset,
        cap=cap,
        streak_depth=streak_depth,
    )
