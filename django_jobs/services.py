"""The application service layer: every operation on schedules that interfaces perform.

Each service is a keyword-only function that runs in one transaction and writes its audit
record in that transaction. Admin and management commands call these; they never write the
store directly. (Permission checks arrive with the operations work: today the services record
the actor they are given.)
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from typing import Any

from django.db import transaction

from . import store
from .clock import ensure_aware_utc
from .declarations import Declaration
from .models import AuditRecord, Limit, Origin, Replica, ReplicaState, Schedule, ScheduleStatus
from .scheduling.timings import After

# Changing any of these changes when the schedule runs: audited as a timing change.
TIMING_FIELDS = (
    "timing_kind",
    "cron",
    "interval",
    "anchor",
    "run_at",
    "delay",
    "time_zone",
    "skipped_time",
    "repeated_time",
)


@dataclass
class SyncReport:
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    retired: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        return (
            f"{len(self.created)} created, {len(self.updated)} updated, "
            f"{len(self.retired)} retired, {len(self.unchanged)} unchanged"
        )


def _jsonable(value: Any) -> Any:
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    return value


def _audit(
    schedule: Schedule, *, now: datetime, actor: str, action: str, reason: str, **changes: Any
) -> None:
    AuditRecord.objects.create(
        at=now,
        actor=actor,
        action=action,
        tenant=schedule.tenant,
        target_type="schedule",
        target_id=str(schedule.pk),
        reason=reason,
        before={k: _jsonable(v) for k, v in changes.get("before", {}).items()},
        after={k: _jsonable(v) for k, v in changes.get("after", {}).items()},
    )


def _upsert(
    declaration: Declaration, *, now: datetime, actor: str, reason: str, origin: Origin
) -> tuple[Schedule, str]:
    """Create or update the record of ``declaration``; return it and what happened."""
    existing = (
        Schedule.objects.select_for_update()
        .filter(tenant=declaration.tenant, key=declaration.key)
        .first()
    )
    timing = declaration.timing
    if isinstance(timing, After):  # "after" counts from the record's creation
        timing = timing.created(existing.created_at if existing else now)
    fields = {**declaration.record_fields(), **timing.record_fields()}
    if existing is None:
        schedule = Schedule.objects.create(
            tenant=declaration.tenant,
            key=declaration.key,
            origin=origin,
            created_at=now,
            updated_at=now,
            next_due_at=now,  # planned at the next pass
            **fields,
        )
        _audit(
            schedule, now=now, actor=actor, action="schedule.created", reason=reason, after=fields
        )
        _set_limit(schedule, declaration)
        return schedule, "created"
    changed = {k: v for k, v in fields.items() if getattr(existing, k) != v}
    if existing.origin != origin:
        changed["origin"] = origin
    limit_changed = _set_limit(existing, declaration)
    if not changed:
        return existing, "updated" if limit_changed else "unchanged"
    before = {k: getattr(existing, k) for k in changed}
    for name, value in changed.items():
        setattr(existing, name, value)
    existing.updated_at = now
    timing_changed = any(k in TIMING_FIELDS for k in changed)
    if timing_changed or "status" in changed:
        existing.next_due_at = now  # re-plan from the recovery point with the new timing
    existing.full_clean(exclude=["running_occurrence"])
    existing.save()
    action = "schedule.timing_changed" if timing_changed else "schedule.changed"
    _audit(
        existing, now=now, actor=actor, action=action, reason=reason, before=before, after=changed
    )
    return existing, "updated"


def _set_limit(schedule: Schedule, declaration: Declaration) -> bool:
    wanted = declaration.limit_fields()
    limit = Limit.objects.filter(schedule=schedule).first()
    if limit and all(getattr(limit, k) == v for k, v in wanted.items()):
        return False
    Limit.objects.update_or_create(schedule=schedule, defaults=wanted)
    return True


def sync_schedules(
    declarations: Iterable[Declaration], *, now: datetime, actor: str = "django_jobs.sync"
) -> SyncReport:
    """Write declared schedules to ``Schedule`` rows.

    New declarations are created; changed ones updated (a timing change leaves an
    ``AuditRecord`` with before and after); code-declared schedules no longer declared are
    retired, never deleted, so their history stays. Run-time schedules are left alone.
    Concurrent syncs (every replica syncs at start) are serialised.
    """
    now = ensure_aware_utc(now, name="now")
    report = SyncReport()
    with transaction.atomic():
        store.lock_for_sync()
        seen: set[int] = set()
        for declaration in declarations:
            schedule, what = _upsert(
                declaration, now=now, actor=actor, reason="declared in code", origin=Origin.CODE
            )
            seen.add(schedule.pk)
            getattr(report, what).append(str(schedule))
        gone = (
            Schedule.objects.select_for_update()
            .filter(origin=Origin.CODE)
            .exclude(pk__in=seen)
            .exclude(status=ScheduleStatus.RETIRED)
        )
        for schedule in gone:
            _audit(
                schedule,
                now=now,
                actor=actor,
                action="schedule.retired",
                reason="no longer declared in code",
                before={"status": schedule.status},
                after={"status": ScheduleStatus.RETIRED},
            )
            schedule.status = ScheduleStatus.RETIRED
            schedule.updated_at = now
            schedule.save(update_fields=["status", "updated_at"])
            report.retired.append(str(schedule))
    return report


def upsert_schedule(
    declaration: Declaration, *, actor: str, reason: str, now: datetime
) -> Schedule:
    """Create or change a run-time schedule (for example one per tenant), validated like a
    declared one (build ``declaration`` with ``schedule(..., register=False)``)."""
    if not reason or not reason.strip():
        raise ValueError(f"schedule {declaration.key!r}: reason: is required")
    now = ensure_aware_utc(now, name="now")
    with transaction.atomic():
        schedule, _ = _upsert(
            declaration, now=now, actor=actor, reason=reason, origin=Origin.RUNTIME
        )
    return schedule


@dataclass
class HealthReport:
    host: str
    replicas: list[Replica]
    stale: list[str]

    @property
    def healthy(self) -> bool:
        return bool(self.replicas) and not self.stale

    @property
    def problem(self) -> str:
        if not self.replicas:
            return f"no runworker replica is running on {self.host}"
        return f"replica(s) without a recent heartbeat on {self.host}: {', '.join(self.stale)}"

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
                }
                for r in self.replicas
            ],
        }


def replica_health(*, host: str, now: datetime, max_age: timedelta) -> HealthReport:
    """The replicas on ``host`` that have not stopped, and which of them stopped heartbeating."""
    replicas = list(
        Replica.objects.filter(host=host).exclude(state=ReplicaState.STOPPED).order_by("id")
    )
    stale = [r.id for r in replicas if now - r.heartbeat_at > max_age]
    return HealthReport(host=host, replicas=replicas, stale=stale)
