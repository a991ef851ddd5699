"""Metrics: the reads behind a Prometheus scrape (``services.fleet_metrics``). Nothing here
writes; each statement walks an index and reads what that index bounds (``sql/metrics.sql``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from django.db import transaction

from ._sql import CLAIMABLE_IN, _execute, _loadable, _named_rows, load_queries

QUERIES = load_queries(
    "metrics",
    claimable_states=CLAIMABLE_IN,
    due_at_loadable=_loadable("o.due_at", "timestamptz"),
)


@dataclass(frozen=True)
class Buckets:
    """A distribution in cumulative buckets: ``counts[i]`` values were at most ``le[i]``;
    ``count`` values in all (the ``+Inf`` bucket), adding up to ``total``."""

    le: tuple[float, ...]
    counts: tuple[int, ...]
    count: int
    total: float


@dataclass(frozen=True)
class Window:
    """The occurrences scheduled in a window, and what became of them (``recent_window``)."""

    states: dict[str, int] = field(default_factory=dict)
    lateness: Buckets | None = None
    duration: Buckets | None = None
    attempts: dict[str, int] = field(default_factory=dict)  # lease_lost, fenced_out


def due_backlog(*, now: datetime, cap: int) -> dict[tuple[str, str], int]:
    """Due, unstarted occurrences by (state, queue), counting at most ``cap`` rows in all."""
    rows = _named_rows(QUERIES["due_backlog"], {"now": now, "cap": cap})
    return {(row.state, row.queue): int(row.due) for row in rows}


def running_by_queue(*, now: datetime) -> dict[str, int]:
    """Occurrences running at ``now`` (processing, lease not lapsed), by queue."""
    rows = _named_rows(QUERIES["running_by_queue"], {"now": now})
    return {row.queue: int(row.running) for row in rows}


def waiting_queues() -> list[str]:
    """The queues with occurrences waiting (scheduled, or failed until their retry), due or
    not, in name order."""
    return [row.queue for row in _named_rows(QUERIES["waiting_queues"], {})]


def oldest_due(*, now: datetime) -> datetime | None:
    """The due instant of the oldest due, unstarted occurrence (None: there is none)."""
    rows = _named_rows(QUERIES["oldest_due"], {"now": now})
    return rows[0].due_at.astimezone(UTC) if rows else None


def dead_letters() -> int:
    """How many dead occurrences are retained."""
    (row,) = _named_rows(QUERIES["dead_letters"], {})
    return int(row.dead)


def recent_window(
    *,
    since: datetime,
    now: datetime,
    lateness_le: Sequence[float],
    duration_le: Sequence[float],
) -> Window:
    """The occurrences scheduled in ``(since, now]``: rows by state, start lateness and run
    duration in buckets of upper bounds ``lateness_le`` and ``duration_le`` (seconds), and the
    ``lease_lost`` and ``fenced_out`` attempts among them. One statement, JIT off for it."""
    with transaction.atomic():
        _execute(QUERIES["no_jit"], {})
        rows = _named_rows(
            QUERIES["recent"],
            {
                "since": since,
                "now": now,
                "lateness_le": [float(b) for b in lateness_le],
                "duration_le": [float(b) for b in duration_le],
            },
        )
    found: dict[str, dict[str, float]] = {}
    for row in rows:
        found.setdefault(row.kind, {})[row.label] = float(row.value)
    return Window(
        states={state: int(n) for state, n in found.get("state", {}).items()},
        lateness=_buckets(found.get("lateness", {}), lateness_le),
        duration=_buckets(found.get("duration", {}), duration_le),
        attempts={outcome: int(n) for outcome, n in found.get("attempt", {}).items()},
    )


def _buckets(found: dict[str, float], le: Sequence[float]) -> Buckets:
    """The statement's rows of one distribution as cumulative ``Buckets``: label ``i`` counts
    the values above ``i`` of the bounds and at most the next (``len(le)``: above them all);
    label ``sum`` adds them up."""
    by_bucket = {int(label): int(n) for label, n in found.items() if label != "sum"}
    counts, running = [], 0
    for i in range(len(le)):
        running += by_bucket.get(i, 0)
        counts.append(running)
    return Buckets(
        le=tuple(le),
        counts=tuple(counts),
        count=sum(by_bucket.values()),
        total=found.get("sum", 0.0),
    )
