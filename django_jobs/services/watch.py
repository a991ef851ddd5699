"""What ``jobs top`` shows: the fleet at one instant, as far as a user may see it.

The due backlog and its age, the running occurrences with their replica and how long they
have run, the failures and dead letters of a recent window, and (with the model-wide
``django_jobs.view_replica`` permission: the replicas are the fleet's, not a tenant's) the
replicas with their heartbeat's age. Scoped as the admin's dashboard is
(``permissions.visible``), optionally narrowed to one tenant and one queue.

It only reads, takes no lock, and reads each part with one statement over a bounded index
range returning a bounded list (``store.due_work``, ``store.queue_due_work``,
``store.running_occurrences``, ``store.recent_failures``): it may be refreshed every few
seconds against an occurrence table of millions of rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from .. import permissions, store
from ..clock import ensure_aware_utc
from ..exceptions import JobsError
from .dashboard import COUNT_CAP, ReplicaLine, may_see_replicas, replica_lines

# How many running occurrences, and how many failures, are listed ("and 12 more" beyond).
RUNNING_SHOWN = 20
FAILURES_SHOWN = 20
# Replicas listed, live ones first: those that crashed stay "gone" until they heartbeat again.
REPLICAS_SHOWN = 20
# How many of the newest attempts the failures are looked for in (store.recent_failures):
# no index holds an occurrence's failure instant, and the newest attempts are a cheap read.
ATTEMPTS_READ = 10_000
# A failure's message, as shown: its first line (a traceback's exception line), cut here.
ERROR_CHARS = 120
# How a stored traceback begins (a Django Tasks failure keeps one: ``TaskError.traceback``):
# whole, or its end only (``SafeError.with_traceback`` keeps the last characters of a long one).
TRACEBACK_STARTS = ("Traceback (most recent call last):", "[truncated]…")


@dataclass(frozen=True)
class RunningLine:
    """An occurrence being run: by which replica, at which attempt, for how long."""

    occurrence_id: UUID
    schedule: str  # tenant/key, as Schedule.__str__ writes it
    replica: str  # the lease owner
    attempt: int
    started_at: datetime
    elapsed: timedelta
    queue: str
    lease_lapsed: bool  # its replica stopped renewing it; a claim will take it over


@dataclass(frozen=True)
class FailureLine:
    """An occurrence whose last attempt failed in the window: waiting for a retry, or dead."""

    occurrence_id: UUID
    schedule: str
    state: str  # failed (a retry comes) or dead
    attempts: int
    queue: str
    failed_at: datetime
    error_type: str
    error: str  # the message's line that says what failed (``_said``), at most ERROR_CHARS


@dataclass(frozen=True)
class Watch:
    """The view at ``now`` for one user, of one tenant and one queue (None: all)."""

    now: datetime
    actor: str
    tenant: str | None
    queue: str | None
    schedules: int | None  # how many schedules the view covers; None: every one
    since: datetime
    due: int  # up to COUNT_CAP
    oldest_due_age: timedelta | None
    running: list[RunningLine]
    running_total: int  # up to COUNT_CAP
    failures: list[FailureLine]
    failures_total: int
    # When the failures were read only back to the start of the oldest attempt read
    # (ATTEMPTS_READ attempts started since the window began): that start. None: the whole
    # window was read.
    failures_read_since: datetime | None
    replicas: list[ReplicaLine] | None  # None: the user may not see the fleet
    replicas_total: int = 0

    @property
    def due_capped(self) -> bool:
        return self.due >= COUNT_CAP

    @property
    def running_capped(self) -> bool:
        return self.running_total >= COUNT_CAP

    def as_dict(self) -> dict[str, Any]:
        """The view as JSON-ready values: instants in ISO 8601, durations in seconds."""
        return {
            "now": self.now.isoformat(),
            "actor": self.actor,
            "scope": {"tenant": self.tenant, "queue": self.queue, "schedules": self.schedules},
            "backlog": {
                "due": self.due,
                "capped": self.due_capped,
                "oldest_due_age_seconds": _seconds(self.oldest_due_age),
            },
            "running": {
                "total": self.running_total,
                "capped": self.running_capped,
                "shown": [_running_dict(r) for r in self.running],
            },
            "failures": {
                "since": self.since.isoformat(),
                "total": self.failures_total,
                "read_since": _iso(self.failures_read_since),
                "shown": [_failure_dict(f) for f in self.failures],
            },
            "replicas": None
            if self.replicas is None
            else {
                "total": self.replicas_total,
                "shown": [_replica_dict(r) for r in self.replicas],
            },
        }


def watch(
    *,
    actor: Any,
    now: datetime,
    since: timedelta,
    tenant: str | None = None,
    queue: str | None = None,
) -> Watch:
    """The view ``actor`` may see at ``now``: failures of the ``since`` before it; of
    ``tenant`` and ``queue`` only when given."""
    now = ensure_aware_utc(now, name="now")
    if since <= timedelta(0):
        raise JobsError(f"since: must be a positive duration, got {since}")
    ids = _schedule_ids(actor, tenant)
    fleet = _replicas(now) if may_see_replicas(actor) else None
    shown, fleet_size = (None, 0) if fleet is None else (fleet[:REPLICAS_SHOWN], len(fleet))
    name = str(getattr(actor, "username", actor))
    if ids == []:  # nothing to see: read no occurrence (an empty filter walks whole ranges)
        return Watch(
            now, name, tenant, queue, 0, now - since, 0, None, [], 0, [], 0, None, shown, fleet_size
        )
    if queue is None:
        due, oldest = store.due_work(ids, now=now, cap=COUNT_CAP)
    else:
        due, oldest = store.queue_due_work(ids, queue=queue, now=now, cap=COUNT_CAP)
    running, running_total = store.running_occurrences(
        ids, queue=queue, limit=RUNNING_SHOWN, cap=COUNT_CAP
    )
    failures, failures_total, read, read_since = store.recent_failures(
        ids, queue=queue, since=now - since, now=now, limit=FAILURES_SHOWN, scan=ATTEMPTS_READ
    )
    partial = read >= ATTEMPTS_READ and read_since is not None and read_since > now - since
    return Watch(
        now=now,
        actor=name,
        tenant=tenant,
        queue=queue,
        schedules=None if ids is None else len(ids),
        since=now - since,
        due=due,
        oldest_due_age=now - oldest if oldest else None,
        running=[_running(row, now) for row in running],
        running_total=running_total,
        failures=[_failure(row) for row in failures],
        failures_total=failures_total,
        failures_read_since=read_since if partial else None,
        replicas=shown,
        replicas_total=fleet_size,
    )


def _replicas(now: datetime) -> list[ReplicaLine]:
    """The replicas that have not stopped (``dashboard.replica_lines``), live ones first."""
    return sorted(replica_lines(now=now), key=lambda line: line.stale)


def _schedule_ids(actor: Any, tenant: str | None) -> list[int] | None:
    """The ids of the schedules the view covers: None for every one (a user who may see
    every schedule, no tenant given), else those ``actor`` may see, of ``tenant`` if given."""
    if tenant is None and actor.has_perm("django_jobs.view_schedule"):
        return None
    visible = permissions.visible(actor)
    if tenant is not None:
        visible = visible.filter(tenant=tenant)
    return list(visible.values_list("pk", flat=True))


def _name(tenant: str, key: str) -> str:
    return f"{tenant}/{key}" if tenant else key


def _running(row: Any, now: datetime) -> RunningLine:
    return RunningLine(
        occurrence_id=row.id,
        schedule=_name(row.tenant, row.key),
        replica=row.replica,
        attempt=int(row.attempt),
        started_at=row.started_at,
        elapsed=now - row.started_at,
        queue=row.queue,
        lease_lapsed=row.lease_expires_at <= now,
    )


def _failure(row: Any) -> FailureLine:
    said = _said(row.error_message or "", row.error_type or "")
    return FailureLine(
        occurrence_id=row.id,
        schedule=_name(row.tenant, row.key),
        state=row.state,
        attempts=int(row.attempts),
        queue=row.queue,
        failed_at=row.failed_at,
        error_type=row.error_type or "",
        error=said if len(said) <= ERROR_CHARS else f"{said[: ERROR_CHARS - 1]}…",
    )


def _said(message: str, error_type: str) -> str:
    """The line of a failure's ``message`` that says what failed: its first line; of a
    traceback its last (non-blank) line, the exception itself (``ValueError: bad``), without
    the type the error column names already."""
    lines = [line for line in message.strip().splitlines() if line.strip()]
    if not lines:
        return ""
    if not message.lstrip().startswith(TRACEBACK_STARTS):
        return lines[0]
    last = lines[-1].strip()
    if last == error_type:  # an exception without a message
        return ""
    return last.removeprefix(f"{error_type}: ") if error_type else last


def _seconds(value: timedelta | None) -> float | None:
    return None if value is None else round(value.total_seconds(), 3)


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def _running_dict(line: RunningLine) -> dict[str, Any]:
    return {
        "occurrence": str(line.occurrence_id),
        "schedule": line.schedule,
        "replica": line.replica,
        "attempt": line.attempt,
        "queue": line.queue,
        "started_at": line.started_at.isoformat(),
        "elapsed_seconds": _seconds(line.elapsed),
        "lease_lapsed": line.lease_lapsed,
    }


def _failure_dict(line: FailureLine) -> dict[str, Any]:
    return {
        "occurrence": str(line.occurrence_id),
        "schedule": line.schedule,
        "state": line.state,
        "attempts": line.attempts,
        "queue": line.queue,
        "failed_at": line.failed_at.isoformat(),
        "error_type": line.error_type,
        "error": line.error,
    }


def _replica_dict(line: ReplicaLine) -> dict[str, Any]:
    replica = line.replica
    return {
        "id": replica.id,
        "host": replica.host,
        "pid": replica.pid,
        "state": replica.state,
        "heartbeat_at": replica.heartbeat_at.isoformat(),
        "heartbeat_age_seconds": _seconds(line.heartbeat_age),
        "running": replica.running,
        "concurrency": replica.concurrency,
        "queues": [q.get("name") for q in replica.queues or []],
        "stale": line.stale,
    }
