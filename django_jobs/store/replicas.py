"""Replicas and wake-ups: heartbeats, the next instant a worker must wake, notifications."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from ._sql import OCC, SCH, _loadable, _not_paused, _rows


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
) -> None:
    """Register or refresh this replica's row (one upsert)."""
    sql = """
        INSERT INTO django_jobs_replica
            (id, host, pid, started_at, heartbeat_at, state, concurrency, running)
        VALUES (%(id)s, %(host)s, %(pid)s, %(started)s, %(now)s, %(state)s, %(conc)s, %(running)s)
        ON CONFLICT (id) DO UPDATE SET heartbeat_at = EXCLUDED.heartbeat_at,
            state = EXCLUDED.state, running = EXCLUDED.running
    """
    _rows(
        sql,
        {
            "id": replica_id,
            "host": host,
            "pid": pid,
            "started": started_at,
            "now": now,
            "state": state,
            "conc": concurrency,
            "running": running,
        },
    )


def next_wakeup(
    *, now: datetime, exclude_keys: Sequence[str] = (), jobs: Sequence[str] | None = None
) -> datetime | None:
    """The earliest instant at which planning or claiming has work: a schedule's next due
    instant or a claimable occurrence's ``due_at``. Two index lookups. What this replica would
    not plan or claim (the kill switch ``exclude_keys``; with ``jobs``, schedules of other
    jobs) is left out: a replica never wakes for work it then leaves."""
    sql = f"""
        SELECT LEAST(
            ({_NEXT_SCHEDULE}),
            (SELECT min(o.due_at) FROM {OCC} o
             WHERE o.state IN ('scheduled', 'failed', 'processing')
               AND {_loadable("o.due_at", "timestamptz")}
               AND (cardinality(%(excluded)s::text[]) = 0 OR EXISTS (
                    SELECT 1 FROM {SCH} s WHERE s.id = o.schedule_id
                      AND {_not_paused("s.tenant", "s.key")})))
        )
    """
    value = _rows(sql, _next_params(exclude_keys, jobs))[0][0]
    return value.astimezone(UTC) if value is not None else None


_NEXT_SCHEDULE = f"""
    SELECT min(s.next_due_at) FROM {SCH} s WHERE s.enabled AND s.status = 'active'
      AND {_loadable("s.next_due_at", "timestamptz")}
      AND (cardinality(%(excluded)s::text[]) = 0 OR {_not_paused("s.tenant", "s.key")})
      AND (%(jobs)s::text[] IS NULL OR s.job = ANY(%(jobs)s::text[]))
"""


def _next_params(exclude_keys: Sequence[str], jobs: Sequence[str] | None) -> dict[str, Any]:
    return {"excluded": list(exclude_keys), "jobs": None if jobs is None else list(jobs)}


def next_schedule_due(
    *, exclude_keys: Sequence[str] = (), jobs: Sequence[str] | None = None
) -> datetime | None:
    """The earliest ``next_due_at`` of an active, enabled schedule this replica would plan
    (see ``next_wakeup``); one index lookup."""
    value = _rows(_NEXT_SCHEDULE, _next_params(exclude_keys, jobs))[0][0]
    return value.astimezone(UTC) if value is not None else None


CHANNEL = "django_jobs"


def notify(reason: str) -> None:
    """Wake every listening replica (delivered when the caller's transaction commits)."""
    _rows("SELECT pg_notify(%(channel)s, %(reason)s)", {"channel": CHANNEL, "reason": reason})
