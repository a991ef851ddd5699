"""Replicas and wake-ups: heartbeats, the next instant a worker must wake, notifications."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple

from psycopg.types.json import Jsonb

from ..clock import ensure_aware_utc
from ._sql import CLAIMABLE_IN, _execute, _loadable, _named_rows, _not_paused, load_queries

QUERIES = load_queries(
    "replicas",
    claimable_states=CLAIMABLE_IN,
    due_at_loadable=_loadable("o.due_at", "timestamptz"),
    not_paused=_not_paused("s.tenant", "s.key"),
    # An active, enabled schedule this replica would plan.
    plannable=" AND ".join(
        [
            "s.enabled AND s.status = %(status_active)s",
            _loadable("s.next_due_at", "timestamptz"),
            f"(cardinality(%(excluded)s::text[]) = 0 OR {_not_paused('s.tenant', 's.key')})",
            "(%(jobs)s::text[] IS NULL OR s.job = ANY(%(jobs)s::text[]))",
        ]
    ),
)


def heartbeat(
    replica_id: str,
    *,
    host: str,
    pid: int,
    started_at: datetime,
    now: datetime,
    state: str,
    concurrency: int,
    running: int,
    threads: dict[str, str] | None = None,
    queues: list[dict[str, object]] | None = None,
) -> None:
    """Register or refresh this replica's row (one upsert), with its threads' statuses and
    the queues it serves ({"name", "concurrency"} each; [] every queue)."""
    _execute(
        QUERIES["heartbeat"],
        {
            "id": replica_id,
            "host": host,
            "pid": pid,
            "started": started_at,
            "now": now,
            "state": state,
            "conc": concurrency,
            "running": running,
            "threads": Jsonb(threads or {}),
            "queues": Jsonb(queues or []),
        },
    )


def next_wakeup(
    *,
    now: datetime,
    exclude_keys: Sequence[str] = (),
    jobs: Sequence[str] | None = None,
    ahead: timedelta = timedelta(0),
    queues: Sequence[str] | None = None,
) -> datetime | None:
    """The earliest instant at which planning or claiming has work: a schedule's next due
    instant less ``ahead`` (``next_schedule_due``) or a claimable occurrence's ``due_at``.
    Walks of due indexes, each stopping at its first row: with ``queues``, one range of
    django_jobs_occurrence_qdue per served queue, so what other queues hold is never read.
    What this replica would not plan or claim (the kill switch ``exclude_keys``; with
    ``jobs``, schedules of other jobs; with ``queues``, occurrences of other queues) is left
    out: a replica never wakes for work it then leaves."""
    params = {**_next_params(exclude_keys, jobs, ahead), "queues": queues}
    (row,) = _named_rows(QUERIES["next_wakeup"], params)
    return row.wakeup.astimezone(UTC) if row.wakeup is not None else None


def _next_params(
    exclude_keys: Sequence[str], jobs: Sequence[str] | None, ahead: timedelta
) -> dict[str, Any]:
    return {
        "excluded": list(exclude_keys),
        "jobs": None if jobs is None else list(jobs),
        "ahead": ahead,
    }


def next_schedule_due(
    *,
    exclude_keys: Sequence[str] = (),
    jobs: Sequence[str] | None = None,
    ahead: timedelta = timedelta(0),
) -> datetime | None:
    """When a plan pass next has work: the earliest ``next_due_at`` of an active, enabled
    schedule this replica would plan (see ``next_wakeup``), less ``ahead``
    (``PLAN_AHEAD_SECONDS``). One walk of the due index, stopping at its first row."""
    rows = _named_rows(QUERIES["next_schedule_due"], _next_params(exclude_keys, jobs, ahead))
    return rows[0].next_due_at.astimezone(UTC) if rows else None


CHANNEL = "django_jobs"


def notify(reason: str) -> None:
    """Wake every listening replica (delivered when the caller's transaction commits)."""
    _execute(QUERIES["notify"], {"channel": CHANNEL, "reason": reason})


class Gone(NamedTuple):
    """A replica ``declare_gone`` declared gone, as its row last said."""

    replica_id: str
    host: str
    pid: int
    heartbeat_at: datetime


def declare_gone(*, by: str, before: datetime, before_draining: datetime) -> list[Gone]:
    """Declare gone the replicas (other than ``by``) whose last heartbeat is older than
    ``before`` (draining ones: ``before_draining``; a drain heartbeats once, then waits out
    its grace); return them. One statement, a compare-and-set: each silent replica is
    declared by exactly one caller, however many replicas call it at once."""
    params = {
        "by": by,
        "before": ensure_aware_utc(before, name="before"),
        "before_draining": ensure_aware_utc(before_draining, name="before_draining"),
    }
    return [
        Gone(
            replica_id=row.id,
            host=row.host,
            pid=row.pid,
            heartbeat_at=row.heartbeat_at.astimezone(UTC),
        )
        for row in _named_rows(QUERIES["declare_gone"], params)
    ]
