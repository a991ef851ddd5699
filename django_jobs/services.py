"""The application service layer: every operation on schedules that interfaces perform.

Each service is a keyword-only function that runs in one transaction and writes its audit
record in that transaction. Admin and management commands call these; they never write the
store directly.

Every service decides with rows it reads itself: of the schedule or occurrence it is given it
uses only the primary key, re-reads that row (and locks its schedule when it writes), checks
the actor's permission and the tenant on what it read, and names the schedule and tenant in
every store write. A caller-built object (``Occurrence(pk=<theirs>, schedule=<mine>)``) can
therefore neither borrow a permission nor mislabel an audit record.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.contrib.auth.base_user import AbstractBaseUser
from django.core.exceptions import ValidationError
from django.db import DatabaseError, models, transaction

from . import audit, permissions, runbooks, store
from .clock import ensure_aware_utc, later
from .conf import get_settings
from .declarations import Declaration, InvalidSchedule, local_time_gaps
from .exceptions import JobsError
from .models import (
    Attempt,
    Limit,
    Occurrence,
    Origin,
    Replica,
    ReplicaState,
    RetentionState,
    Schedule,
    ScheduleStatus,
    Trigger,
)
from .registry import registry
from .safe_error import loggable
from .scheduling import timings
from .scheduling.timings import After, At
from .validation import printable

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
    "rrule",
    "calendar",
    "on_excluded",
)


@dataclass
class SyncReport:
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    retired: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    # Schedules whose inspection, replay and disable runbooks were written or brought up to
    # date (every created one, and any whose runbooks were missing or stale).
    runbooks: list[str] = field(default_factory=list)
    # Declared one-offs whose occurrence already became final: not created again.
    consumed: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        consumed = f", {len(self.consumed)} consumed one-off(s)" if self.consumed else ""
        return (
            f"{len(self.created)} created, {len(self.updated)} updated, "
            f"{len(self.retired)} retired, {len(self.unchanged)} unchanged{consumed}; "
            f"runbooks written for {len(self.runbooks)}"
        )


def _audit(
    schedule: Schedule,
    *,
    now: datetime,
    actor: Any,
    action: str,
    reason: str,
    target_type: str = "schedule",
    target_id: str | None = None,
    **changes: Any,
) -> None:
    """Record an action on ``schedule`` through the one audit writer (``audit.record``).

    ``schedule`` is the row the service read and locked, so the record's schedule and tenant
    are the ones acted on."""
    audit.record(
        at=now,
        actor=actor,
        action=action,
        tenant=schedule.tenant,
        schedule_id=schedule.pk,
        target_type=target_type,
        target_id=target_id or str(schedule.pk),
        reason=reason,
        before=changes.get("before"),
        after=changes.get("after"),
    )


@dataclass(frozen=True)
class _Upserted:
    schedule: Schedule
    what: str  # "created", "updated" or "unchanged"
    runbooks: int  # Runbook rows created or changed


def _locked_key(tenant: str, key: str) -> Schedule | None:
    """The schedule of (tenant, key), locked for the caller's transaction, or None."""
    return Schedule.objects.select_for_update().filter(tenant=tenant, key=key).first()


def _upsert(
    declaration: Declaration,
    *,
    existing: Schedule | None,
    now: datetime,
    actor: Any,
    reason: str,
    origin: Origin,
) -> _Upserted:
    """Create or update the record of ``declaration`` (``existing``: its locked row, if any),
    with its Limit and its runbooks (on create too: check E017 must never find a schedule the
    app wrote without them)."""
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
        return _Upserted(schedule, "created", runbooks.write(schedule))
    changed = {k: v for k, v in fields.items() if getattr(existing, k) != v}
    if existing.origin != origin:
        changed["origin"] = origin
    limit_changed = _set_limit(existing, declaration)
    if not changed:
        written = runbooks.write(existing)
        return _Upserted(existing, "updated" if limit_changed else "unchanged", written)
    before = {k: getattr(existing, k) for k in changed}
    for name, value in changed.items():
        setattr(existing, name, value)
    existing.updated_at = now
    if changed.get("status", ScheduleStatus.RETIRED) != ScheduleStatus.RETIRED:
        existing.retired_at = None
    timing_changed = any(k in TIMING_FIELDS for k in changed)
    if timing_changed or "status" in changed:
        existing.next_due_at = now  # re-plan from the recovery point with the new timing
    if existing.parked_field:  # written again: the planner checks the new record
        before["parked"] = f"{existing.parked_field}: {existing.parked_reason}"
        changed["parked"] = ""
        _unpark(existing, now=now)
    existing.full_clean(exclude=["running_occurrence"])
    existing.save()
    action = _change_action(before, timing_changed=timing_changed)
    _audit(
        existing, now=now, actor=actor, action=action, reason=reason, before=before, after=changed
    )
    return _Upserted(existing, "updated", runbooks.write(existing))


def _unpark(schedule: Schedule, *, now: datetime) -> None:
    """Clear what the planner parked the schedule for and make it due: the next plan pass
    checks the record again (and parks it again if it still refuses it)."""
    schedule.parked_at, schedule.parked_field, schedule.parked_reason = None, "", ""
    schedule.next_due_at = now


PARKED_FIELDS = ["parked_at", "parked_field", "parked_reason"]


def _change_action(before: dict[str, Any], *, timing_changed: bool) -> str:
    """How a change is named in the audit: a retired schedule made active (or draft) again is
    ``schedule.revived``, so a reader never mistakes it for an edit of a live one."""
    if before.get("status") == ScheduleStatus.RETIRED:
        return "schedule.revived"
    return "schedule.timing_changed" if timing_changed else "schedule.changed"


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
        consumed = store.consumed_one_offs()
        seen: set[int] = set()
        for declaration in declarations:
            if _consumed_by(declaration) in consumed:
                report.consumed.append(declaration.label)
                continue
            done = _upsert(
                declaration,
                existing=_locked_key(declaration.tenant, declaration.key),
                now=now,
                actor=actor,
                reason="declared in code",
                origin=Origin.CODE,
            )
            seen.add(done.schedule.pk)
            getattr(report, done.what).append(str(done.schedule))
            if done.runbooks:
                report.runbooks.append(str(done.schedule))
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
            schedule.updated_at = schedule.retired_at = now
            schedule.save(update_fields=["status", "updated_at", "retired_at"])
            report.retired.append(str(schedule))
        if report.created or report.updated:
            store.notify("sync")  # serving replicas plan the changed schedules now
    return report


def _consumed_by(declaration: Declaration) -> tuple[Any, ...] | None:
    """How a consumed one-off of this declaration is recorded (``ConsumedOneOff``), or None
    for a recurring declaration."""
    timing = declaration.timing
    if isinstance(timing, At):
        return (declaration.tenant, declaration.key, "at", timing.instant, None)
    if isinstance(timing, After):
        return (declaration.tenant, declaration.key, "after", None, timing.delay)
    return None


def upsert_schedule(
    declaration: Declaration, *, actor: Any, reason: str, now: datetime
) -> Schedule:
    """Create or change a run-time schedule (for example one per tenant), validated like a
    declared one (build ``declaration`` with ``schedule(..., register=False)``).

    1. ``actor`` is a Django user, never a name: the permission checked is theirs and the
       audit record carries their id (a string could claim to be ``django_jobs.sync``).
    2. The declaration is refused as checks E014/E018/E019 refuse a declared one: its job
       must have a registered handler, a local zone its reason and DST choices.
    3. Changing a schedule needs ``change`` on it (model, object or tenant permission);
       creating one needs ``add_schedule`` or a ``change`` grant on its tenant.
    4. A schedule declared in code is refused: it changes in its ``schedules.py``, and sync
       would otherwise stop retiring it.
    5. A retired schedule declared active again is revived, audited ``schedule.revived`` with
       its status before and after.
    """
    reason = _need_reason(reason, f"schedule {declaration.key!r}")
    user = _need_user(actor, f"schedule {declaration.label!r}")
    now = ensure_aware_utc(now, name="now")
    _need_valid_at_run_time(declaration)
    with transaction.atomic():
        existing = _locked_key(declaration.tenant, declaration.key)
        _need_upsert_permission(user, declaration, existing)
        done = _upsert(
            declaration,
            existing=existing,
            now=now,
            actor=user,
            reason=reason,
            origin=Origin.RUNTIME,
        )
        store.notify("schedule")  # serving replicas plan it now, not at their next poll
    return done.schedule


def _need_user(actor: Any, what: str) -> Any:
    if not isinstance(actor, AbstractBaseUser):
        raise JobsError(
            f"{what}: actor: a Django user is needed (their permission is checked and their "
            f"id audited), got {type(actor).__name__}"
        )
    audit.actor_name(actor)  # a name the audit record can hold
    return actor


def _need_valid_at_run_time(declaration: Declaration) -> None:
    """What system checks refuse in a declaration, refused here: no check runs at run time."""
    gaps = local_time_gaps(declaration.timing)  # E018/E019
    if gaps:
        raise InvalidSchedule(declaration.label, gaps[0][0], "; ".join(m for _, m in gaps))
    if declaration.job not in registry.names():  # E014
        raise InvalidSchedule(
            declaration.label,
            "job",
            f"no handler is registered for job {declaration.job!r} in this process; register "
            f'one with @job("{declaration.job}") in the jobs.py of the app that owns it',
        )


def _need_upsert_permission(user: Any, declaration: Declaration, existing: Schedule | None) -> None:
    if existing is None:
        permissions.require_create(user, declaration.tenant, declaration.label)
        return
    permissions.require(user, "change", existing)
    if existing.origin == Origin.CODE:
        raise JobsError(
            f"schedule {existing} is declared in code: change it in its schedules.py and "
            "deploy (jobs sync writes it); upsert_schedule changes run-time schedules only"
        )


@dataclass
class HealthReport:
    host: str
    replicas: list[Replica]
    stale: list[str]
    now: datetime
    retention: RetentionState | None = None  # the fleet's last automatic retention pass
    # Schedules the planner parked (a value it refuses): not a replica's health, but work
    # that is not being planned; the most recent PARKED_SHOWN of them.
    parked: list[dict[str, Any]] = field(default_factory=list)

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
            "retention": self.retention_dict(),
            "parked": self.parked,
        }


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
        host=host, replicas=replicas, stale=stale, retention=retention, now=now, parked=parked
    )


PARKED_SHOWN = 20


# --- Operator actions: permission, one transaction, audit -----------------------------------


def _need_reason(reason: str, what: str) -> str:
    if not isinstance(reason, str) or not reason.strip():
        raise JobsError(f"{what}: reason: say why (it is kept in the audit record)")
    if len(reason) > 2000:
        raise JobsError(f"{what}: reason: at most 2000 characters, got {len(reason)}")
    if not printable(reason):
        raise JobsError(f"{what}: reason: must not contain NUL or other control characters")
    return reason.strip()


def _pk(model: type[models.Model], obj: Any) -> Any:
    """The primary key ``obj`` names, as ``model`` stores it: all a service takes from an
    object its caller built. None when it is not one (``"abc"`` for a UUID)."""
    field = model._meta.pk
    assert field is not None
    try:
        return field.to_python(getattr(obj, "pk", None))
    except ValidationError:
        return None


def _shown(obj: Any) -> str:
    text = repr(getattr(obj, "pk", None))
    return text if len(text) <= 50 else f"{text[:50]}..."


def _schedule_row(schedule: Schedule, *, lock: bool) -> Schedule:
    """The schedule row the caller's object names by its primary key (nothing else of it is
    trusted), locked for the service's transaction when the service writes."""
    pk = _pk(Schedule, schedule)
    rows = Schedule.objects.select_for_update() if lock else Schedule.objects.all()
    row = rows.filter(pk=pk).first() if pk is not None else None
    if row is None:
        raise JobsError(f"no schedule with id {_shown(schedule)}")
    return row


def _locked(schedule: Schedule) -> Schedule:
    return _schedule_row(schedule, lock=True)


def _occurrence_row(occurrence: Occurrence, *, lock: bool) -> tuple[Schedule, Occurrence]:
    """The occurrence row the caller's object names by its primary key, and that row's own
    schedule (never the caller's ``occurrence.schedule``). When the service writes, the
    schedule is locked first (the order every writer takes them in) and the occurrence read
    again after the lock, so the service decides with its state as of the lock."""
    pk = _pk(Occurrence, occurrence)
    row = Occurrence.objects.filter(pk=pk).first() if pk is not None else None
    if row is not None:
        rows = Schedule.objects.select_for_update() if lock else Schedule.objects.all()
        schedule = rows.get(pk=row.schedule_id)  # PROTECT: an occurrence keeps its schedule
        row = Occurrence.objects.filter(pk=pk).first() if lock else row
    if row is None:
        raise JobsError(f"no occurrence with id {_shown(occurrence)}")
    return schedule, row


def _need_same_tenant(schedule: Schedule, occurrence: Occurrence) -> None:
    """An occurrence carries its schedule's tenant; one that does not was written outside
    django_jobs and is refused rather than acted on in either tenant's name."""
    if occurrence.tenant != schedule.tenant:
        raise JobsError(
            f"occurrence {occurrence.pk} names tenant {occurrence.tenant!r} but its schedule "
            f"{schedule} is of tenant {schedule.tenant!r}: refused; repair the row first"
        )


@dataclass(frozen=True)
class ScheduleReport:
    schedule: Schedule
    next_runs: list[datetime]
    recent: list[Occurrence]
    lateness: timedelta | None  # how long the oldest due, unstarted occurrence has waited


def inspect_schedule(schedule: Schedule, *, actor: Any, now: datetime) -> ScheduleReport:
    """The record, its state, its next runs and its recent occurrences with outcomes: of the
    row ``schedule``'s primary key names, read here (a read takes no lock)."""
    now = ensure_aware_utc(now, name="now")
    schedule = _schedule_row(schedule, lock=False)
    permissions.require(actor, "view", schedule)
    recent = list(schedule.occurrences.order_by("-scheduled_at")[:10])
    oldest = (
        schedule.occurrences.filter(state__in=["scheduled", "failed"], due_at__lte=now)
        .order_by("due_at")
        .values_list("due_at", flat=True)
        .first()
    )
    try:
        upcoming = timings.from_record(schedule).between(now, later(now, timedelta(days=7)))[:5]
    except (ValueError, OverflowError):  # a record the planner parks as invalid
        upcoming = []
    return ScheduleReport(
        schedule=schedule,
        next_runs=upcoming,
        recent=recent,
        lateness=now - oldest if oldest else None,
    )


def inspect_occurrence(occurrence: Occurrence, *, actor: Any) -> list[Attempt]:
    """An occurrence's attempts, oldest first (the occurrence row carries state and lease),
    checked against the schedule of the occurrence row itself."""
    schedule, row = _occurrence_row(occurrence, lock=False)
    permissions.require(actor, "view", schedule)
    _need_same_tenant(schedule, row)
    return list(Attempt.objects.filter(occurrence_id=row.pk).order_by("number"))


def replay(occurrence: Occurrence, *, actor: Any, reason: str, now: datetime) -> Occurrence:
    """A new attempt of the same occurrence: same identity, same scheduled instant, so the
    command's idempotency scope is unchanged. For a dead, failed, skipped, completed or
    cancelled occurrence; the next claim runs it as attempt N+1, trigger ``manual``.
    Returns the occurrence as it now is (the caller's object is left as it was)."""
    reason = _need_reason(reason, f"replay of occurrence {_shown(occurrence)}")
    now = ensure_aware_utc(now, name="now")
    with transaction.atomic():
        schedule, row = _occurrence_row(occurrence, lock=True)
        permissions.require(actor, "replay", schedule)
        _need_same_tenant(schedule, row)
        _replay_locked(schedule, row, actor=actor, reason=reason, now=now)
    return Occurrence.objects.get(pk=row.pk)


def _replay_locked(
    schedule: Schedule, occurrence: Occurrence, *, actor: Any, reason: str, now: datetime
) -> None:
    """Replay ``occurrence`` of the locked ``schedule``, audited. A retired one-off becomes
    active again for it (retention retires it again once the replay is final)."""
    before: dict[str, Any] = {"state": occurrence.state, "attempts": occurrence.attempts}
    after: dict[str, Any] = {
        "state": "scheduled",
        "next_attempt": occurrence.attempts + 1,
        "trigger": "manual",
    }
    replayed = store.replay(occurrence.pk, schedule_id=schedule.pk, tenant=schedule.tenant, now=now)
    if not replayed:
        raise JobsError(
            f"occurrence {occurrence.pk} of {schedule} is {occurrence.state}: only a dead, "
            "failed, skipped, completed or cancelled occurrence can be replayed"
        )
    _record_replay(
        schedule, occurrence.pk, before=before, after=after, actor=actor, reason=reason, now=now
    )


def _record_replay(
    schedule: Schedule,
    target: Any,
    *,
    before: dict[str, Any],
    after: dict[str, Any],
    actor: Any,
    reason: str,
    now: datetime,
) -> None:
    """What every replay does once its occurrence is due again: a retired one-off made
    active for it, the audit record, a wake-up for the replicas."""
    _reactivate_for_replay(schedule, now=now, before=before, after=after)
    _audit(
        schedule,
        now=now,
        actor=actor,
        action="replay",
        reason=reason,
        target_type="occurrence",
        target_id=str(target),
        before=before,
        after=after,
    )
    store.notify("replay")


def _reactivate_for_replay(
    schedule: Schedule, *, now: datetime, before: dict[str, Any], after: dict[str, Any]
) -> None:
    """Replicas claim only occurrences of active schedules: a retired one-off is made active
    again for its replay; a retired recurring schedule is refused (re-declare it)."""
    if schedule.status != ScheduleStatus.RETIRED:
        return
    if schedule.timing_kind not in ("at", "after"):
        raise JobsError(
            f"schedule {schedule} is retired: no replica runs its occurrences; declare it "
            "again (status active) before replaying"
        )
    before["schedule_status"], after["schedule_status"] = schedule.status, ScheduleStatus.ACTIVE
    schedule.status, schedule.retired_at, schedule.updated_at = ScheduleStatus.ACTIVE, None, now
    schedule.save(update_fields=["status", "retired_at", "updated_at"])


def replay_at(
    schedule: Schedule, *, at: datetime, actor: Any, reason: str, now: datetime
) -> Occurrence:
    """Replay the occurrence of instant ``at`` of ``schedule``, creating it when it has no row
    (an instant skipped into a summary, or purged): the identity is the one that instant
    always had (tenant + key + instant), the trigger ``manual``. ``at`` must be an instant the
    schedule's timing produces, not after ``now``; otherwise the error names the nearest
    real ones."""
    reason = _need_reason(reason, f"replay of schedule {_shown(schedule)} at {at!r}")
    now = ensure_aware_utc(now, name="now")
    at = ensure_aware_utc(at, name="at")
    with transaction.atomic():
        schedule = _locked(schedule)
        permissions.require(actor, "replay", schedule)
        _need_planned_instant(schedule, at, now=now)
        planned = store.PlannedOccurrence(
            schedule.pk, schedule.tenant, schedule.key, at, trigger=Trigger.MANUAL
        )
        existing = Occurrence.objects.filter(pk=planned.id).first()
        if existing is not None:
            if existing.schedule_id != schedule.pk:  # an identity this schedule does not own
                raise JobsError(f"occurrence {existing.pk} is not an occurrence of {schedule}")
            _need_same_tenant(schedule, existing)
            _replay_locked(schedule, existing, actor=actor, reason=reason, now=now)
        else:
            # Planned without moving the recovery point: the planner's own instants between
            # it and ``at`` are still planned (this one again is a no-op: same identity).
            store.plan([planned], now=now, advance=[])
            _record_replay(
                schedule,
                planned.id,
                before={"state": None},
                after={
                    "state": "scheduled",
                    "next_attempt": 1,
                    "trigger": "manual",
                    "scheduled_at": at,
                    "created": True,
                },
                actor=actor,
                reason=reason,
                now=now,
            )
    return Occurrence.objects.get(pk=planned.id)


def _need_planned_instant(schedule: Schedule, at: datetime, *, now: datetime) -> None:
    try:
        timing = timings.from_record(schedule)
    except (ValueError, OverflowError) as exc:
        raise JobsError(f"schedule {schedule}: its timing cannot be evaluated: {exc}") from None
    if at > now:
        raise JobsError(
            f"schedule {schedule}: {at.isoformat()} is in the future; it runs at its time "
            "(use jobs run-now for an extra run now)"
        )
    if timings.produces(timing, at):
        return
    before, after = timings.neighbours(timing, at)
    nearest = [i.isoformat() for i in (before, after) if i is not None]
    raise JobsError(
        f"schedule {schedule}: {at.isoformat()} is not an instant of its timing; the nearest "
        f"are {' and '.join(nearest) if nearest else 'none'}"
    )


DISABLED_FIELDS = ("enabled", "disabled_by", "disabled_reason", "disabled_at")


def _disabled_state(schedule: Schedule) -> dict[str, Any]:
    """What the row holds about being disabled: the ``before`` and ``after`` of disable and
    enable records, so each says what the row really held, not what the action assumed."""
    return {name: getattr(schedule, name) for name in DISABLED_FIELDS}


def disable(
    schedule: Schedule, *, actor: Any, reason: str, now: datetime, cancel_running: bool = False
) -> Schedule:
    """Stop new claims of the schedule on every replica (from their next pass). An occurrence
    already running finishes, unless ``cancel_running``: then its lease ends here and the
    replica running it stops it at its next renewal. Nothing is deleted.

    Disabling a schedule already disabled is recorded as ``disable.repeated``: the row keeps
    who disabled it first, why and since when (what an operator must resolve before enabling
    it), the record's ``before`` shows them, and the new reason is the record's own. It is
    not refused: with ``cancel_running`` it is how a running occurrence of a disabled
    schedule is stopped."""
    reason = _need_reason(reason, f"disabling schedule {_shown(schedule)}")
    now = ensure_aware_utc(now, name="now")
    with transaction.atomic():
        schedule = _locked(schedule)
        permissions.require(actor, "disable", schedule)
        before = _disabled_state(schedule)
        cancelled = (
            store.cancel_running(schedule.pk, tenant=schedule.tenant, now=now)
            if cancel_running
            else []
        )
        if schedule.enabled:
            schedule.enabled = False
            schedule.disabled_by, schedule.disabled_reason = audit.actor_name(actor), reason
            schedule.disabled_at = schedule.updated_at = now
            schedule.save(update_fields=[*DISABLED_FIELDS, "updated_at"])
        _audit(
            schedule,
            now=now,
            actor=actor,
            action="disable" if before["enabled"] else "disable.repeated",
            reason=reason,
            before=before,
            after={**_disabled_state(schedule), "cancelled": [str(i) for i in cancelled]},
        )
    return schedule


def enable(schedule: Schedule, *, actor: Any, reason: str, now: datetime) -> Schedule:
    """Let replicas claim the schedule again; what it missed meanwhile is planned at the next
    pass and decided by its misfire policy. A schedule the planner parked is checked again at
    that pass. The record's ``before`` is what the row held: who disabled it, why and when
    (or that it was not disabled), and why it was parked."""
    reason = _need_reason(reason, f"enabling schedule {_shown(schedule)}")
    now = ensure_aware_utc(now, name="now")
    with transaction.atomic():
        schedule = _locked(schedule)
        permissions.require(actor, "disable", schedule)
        before = _disabled_state(schedule)
        if schedule.parked_field:
            before["parked"] = f"{schedule.parked_field}: {schedule.parked_reason}"
        schedule.enabled = True
        schedule.disabled_by, schedule.disabled_reason, schedule.disabled_at = "", "", None
        _unpark(schedule, now=now)
        schedule.updated_at = now
        schedule.save(update_fields=[*DISABLED_FIELDS, *PARKED_FIELDS, "next_due_at", "updated_at"])
        _audit(
            schedule,
            now=now,
            actor=actor,
            action="enable",
            reason=reason,
            before=before,
            after=_disabled_state(schedule),
        )
        store.notify("enable")
    return schedule


def run_now(schedule: Schedule, *, actor: Any, reason: str, now: datetime) -> Occurrence:
    """An extra occurrence at the current instant (its own identity), trigger ``manual``."""
    reason = _need_reason(reason, f"run-now of schedule {_shown(schedule)}")
    now = ensure_aware_utc(now, name="now")
    with transaction.atomic():
        schedule = _locked(schedule)
        permissions.require(actor, "run", schedule)
        if not schedule.enabled or schedule.status != ScheduleStatus.ACTIVE:
            raise JobsError(f"schedule {schedule} is not active and enabled: enable it first")
        planned = store.PlannedOccurrence(
            schedule.pk, schedule.tenant, schedule.key, now, trigger=Trigger.MANUAL
        )
        store.plan([planned], now=now)
        _audit(
            schedule,
            now=now,
            actor=actor,
            action="run_now",
            reason=reason,
            target_type="occurrence",
            target_id=str(planned.id),
            after={"scheduled_at": now},
        )
        store.notify("run_now")
    return Occurrence.objects.get(pk=planned.id)


def purge(schedule: Schedule, *, actor: Any, now: datetime) -> int:
    """Delete the schedule's finished occurrences beyond its retention Limit now, with their
    attempts and steps, in batches, all in one transaction with its audit record. The
    schedule is the row ``schedule``'s primary key names, locked and checked here.

    All or nothing: if the database refuses (a project table still references an
    occurrence, say), nothing is deleted, a ``purge.failed`` audit record says so in a
    transaction of its own, and ``JobsError`` names the schedule and the cause.
    """
    now = ensure_aware_utc(now, name="now")
    audit.actor_name(actor)  # a name the audit record can hold, or refused before anything else
    checked: Schedule | None = None  # the locked row, once the actor may purge it
    try:
        with transaction.atomic():
            row = _locked(schedule)
            permissions.require(actor, "purge", row)
            checked = row
            deleted = _purge_batches(row, now=now)
            _audit(
                row,
                now=now,
                actor=actor,
                action="purge",
                reason="retention Limit",
                after={"deleted": deleted},
            )
    except DatabaseError as exc:
        if checked is None:  # refused before any permission was established: nothing to say
            raise
        _record_failed_purge(checked, exc, actor=actor, now=now)
        raise JobsError(
            f"purge of {checked} failed and deleted nothing: {type(exc).__name__}: {_safe(exc)}"
        ) from exc
    return deleted


def _purge_batches(schedule: Schedule, *, now: datetime) -> int:
    batch = get_settings().PURGE_BATCH_SIZE
    deleted = 0
    while count := store.purge_batch(schedule.pk, now=now, batch_size=batch):
        deleted += count
        if count < batch:
            break
    return deleted


def _safe(exc: BaseException) -> str:
    return loggable(exc, patterns=get_settings().REDACT_PATTERNS, max_chars=500)


def _record_failed_purge(
    schedule: Schedule, exc: BaseException, *, actor: Any, now: datetime
) -> None:
    with transaction.atomic():  # an outage fails this too: then the outage is raised
        _audit(
            schedule,
            now=now,
            actor=actor,
            action="purge.failed",
            reason="retention Limit",
            after={"deleted": 0, "error_type": type(exc).__name__, "error": _safe(exc)},
        )
