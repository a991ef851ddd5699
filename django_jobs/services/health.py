"""The health of the replicas on a host, for ``jobs health`` (a liveness probe), and what the
fleet reports beside it: retention, parked and stranded schedules, unserved queues."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from .. import store
from ..models import Replica, ReplicaState, RetentionState, Schedule, ScheduleStatus
from .stranded import Stranded, stranded_schedules

# The most recently parked schedules a health report lists; as many stranded ones.
PARKED_SHOWN = 20
STRANDED_SHOWN = 20


@dataclass
class HealthReport:
    """The replicas of ``host`` that have not stopped, which of them are stale, and what the
    fleet's retention and planner report (shown by ``jobs health``)."""

    host: str
    replicas: list[Replica]
    stale: list[str]
    now: datetime
    retention: RetentionState | None = None  # the fleet's last automatic retention pass
    # Schedules the planner parked (a value it refuses): not a replica's health, but work
    # that is not being planned; the most recent PARKED_SHOWN of them.
    parked: list[dict[str, Any]] = field(default_factory=list)
    # Active schedules nothing will run (``stranded_schedules``), the first STRANDED_SHOWN.
    stranded: list[Stranded] = field(default_factory=list)
    # Queues with waiting work that no live replica serves (``unserved_queues``): that work
    # waits until one does. Fleet-wide, not this host's: like parked and stranded schedules,
    # listed without changing the exit status.
    unserved_queues: list[str] = field(default_factory=list)

    def retention_dict(self) -> dict[str, Any] | None:
        """The last retention pass: its rate, and its lag (how long since retention last
        caught up with every Limit; 0 when the last pass did)."""
        r = self.retention
        if r is None:
            return None
        now = self.now
        lag = 0.0 if r.caught_up else (now - (r.caught_up_at or r.started_at)).total_seconds()
        return {
            "replica": r.replica,
            "last_pass_at": r.finished_at.isoformat(),
            "seconds_since_last_pass": round((now - r.finished_at).total_seconds(), 3),
            "deleted": r.deleted,
            "retired": r.retired,
            "removed": r.removed,
            "seconds": round(r.seconds, 3),
            "rows_per_second": round(r.deleted / r.seconds, 1) if r.seconds else 0.0,
            "caught_up": r.caught_up,
            "lag_seconds": round(max(lag, 0.0), 3),
        }

    @property
    def degraded(self) -> list[str]:
        """The replicas (not stale) whose last heartbeat reports a thread that is not alive:
        restarting after a crash, or dead (the replica is stopping: ``worker.supervision``)."""
        return [
            f"{r.id} ({', '.join(f'{role} {status}' for role, status in down)})"
            for r in self.replicas
            if r.id not in self.stale and (down := threads_down(r))
        ]

    @property
    def healthy(self) -> bool:
        return bool(self.replicas) and not self.stale and not self.degraded

    @property
    def problem(self) -> str:
        if not self.replicas:
            return f"no runworker replica is running on {self.host}"
        if self.stale:
            return f"replica(s) without a recent heartbeat on {self.host}: {', '.join(self.stale)}"
        return f"replica(s) with a worker thread down on {self.host}: {'; '.join(self.degraded)}"

    def as_dict(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "healthy": self.healthy,
            "replicas": [
                {
                    "id": r.id,
                    "pid": r.pid,
                    "state": r.state,
                    "heartbeat_at": r.heartbeat_at.isoformat(),
                    "running": r.running,
                    "stale": r.id in self.stale,
                    "threads": r.threads,
                }
                for r in self.replicas
            ],
            "retention": self.retention_dict(),
            "parked": self.parked,
            "stranded": [s.as_dict() for s in self.stranded],
            "unserved_queues": self.unserved(),
        }

    def unserved(self) -> list[dict[str, str]]:
        """Each unserved queue, with what to do about it."""
        return [
            {"queue": queue, "what_to_do": unserved_what_to_do(queue)}
            for queue in self.unserved_queues
        ]


def unserved_what_to_do(queue: str) -> str:
    return (
        f"start a replica that serves it (runworker --queue {queue}, or one without --queue); "
        "runbooks/unserved-queue.md"
    )


def served_queues(*, now: datetime, max_age: timedelta) -> set[str] | None:
    """The queues the live replicas serve: those in state ``running`` (a draining one claims
    nothing) whose heartbeat is within ``max_age`` of ``now``, on any host. None: one of them
    serves every queue (started without ``--queue``)."""
    served: set[str] = set()
    rows = Replica.objects.filter(
        state=ReplicaState.RUNNING, heartbeat_at__gte=now - max_age
    ).values_list("queues", flat=True)
    for queues in rows:
        names = [q.get("name") for q in queues or [] if isinstance(q, dict)]
        if not names:
            return None
        served.update(str(name) for name in names)
    return served


def unserved_queues(*, now: datetime, max_age: timedelta) -> list[str]:
    """The queues that have work waiting (scheduled, or failed until its retry; due or not)
    and that no live replica serves (``served_queues``), in name order."""
    served = served_queues(now=now, max_age=max_age)
    if served is None:
        return []
    return [queue for queue in store.waiting_queues() if queue not in served]


def threads_down(replica: Replica) -> list[tuple[str, str]]:
    """The threads a replica's last heartbeat reports as neither alive nor stopped."""
    threads = replica.threads if isinstance(replica.threads, dict) else {}
    return [(r, s) for r, s in sorted(threads.items()) if s not in ("alive", "stopped")]


def replica_health(*, host: str, now: datetime, max_age: timedelta) -> HealthReport:
    """The replicas on ``host`` that have not stopped, and which of them stopped heartbeating."""
    replicas = list(
        Replica.objects.filter(host=host).exclude(state=ReplicaState.STOPPED).order_by("id")
    )
    stale = [r.id for r in replicas if now - r.heartbeat_at > max_age]
    retention = RetentionState.objects.filter(pk=1).first()
    parked = [
        {"schedule": str(s), "field": s.parked_field, "reason": s.parked_reason}
        for s in Schedule.objects.exclude(parked_field="")
        .filter(enabled=True, status=ScheduleStatus.ACTIVE)
        .order_by("-parked_at")[:PARKED_SHOWN]
    ]
    return HealthReport(
        host=host,
        replicas=replicas,
        stale=stale,
        retention=retention,
        now=now,
        parked=parked,
        stranded=stranded_schedules(now=now, limit=STRANDED_SHOWN),
        unserved_queues=unserved_queues(now=now, max_age=max_age),
    )
