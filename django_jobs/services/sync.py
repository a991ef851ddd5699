"""``jobs sync``: the declared schedules written to their records as a set, in a handful of
statements, whatever their number.

1. Read once: the records of every declared key and every code-declared record, their Limits
   and their runbooks (three queries).
2. Compare in Python: new, changed, unchanged, no longer declared.
3. Write in bulk, through the store (``store.insert_schedules``, ``write_records``...): new
   records with their Limits, runbooks and audit; changed records (locked first, ``FOR NO
   KEY UPDATE``, and compared again on the locked version); changed Limits, each audited
   ``schedule.retention_changed``; records no longer declared retired.

Only rows that change are locked, and only for the sync's own short transaction: an
unchanged sync writes no schedule row and locks none, so it never keeps a claim or a plan
pass from a schedule (claims skip a locked schedule row). Syncs are serialised by an advisory
lock that nothing else takes.

The fingerprint of the declared set is recorded (``SyncState``) by every completed sync: a
replica whose declarations have that fingerprint skips its start-up sync
(``sync_if_changed``), so a rolling deploy of N replicas runs one sync, not N.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import transaction

from .. import audit, discovery, runbooks, store
from ..clock import ensure_aware_utc
from ..declarations import Declaration
from ..exceptions import UnknownJob
from ..models import Limit, Origin, Schedule, ScheduleStatus, SyncState
from ..registry import registry
from . import limits
from .one_offs import plan_late_one_offs
from .rows import first_due
from .schedules import change_action, outdates_planned, unpark

SYNC_ACTOR = "django_jobs.sync"
REASON = "declared in code"

# Bumped when what a sync writes for the same declarations changes (new columns, new
# defaults): a replica of the new release then syncs even though its declarations did not
# change. Runbook texts need no bump: the fingerprint includes them.
FORMAT = 3  # 2: schedules have a priority; 3: a change of queue is written (2 only hashed it)


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
    # Not synced: the last completed sync wrote this same declared set (``sync_if_changed``).
    skipped: bool = False
    seconds: float = 0.0

    def __str__(self) -> str:
        if self.skipped:
            return "skipped: the declared set is unchanged since the last sync"
        consumed = f", {len(self.consumed)} consumed one-off(s)" if self.consumed else ""
        return (
            f"{len(self.created)} created, {len(self.updated)} updated, "
            f"{len(self.retired)} retired, {len(self.unchanged)} unchanged{consumed}; "
            f"runbooks written for {len(self.runbooks)}"
        )


@dataclass(frozen=True)
class _Sync:
    """Who syncs, when, and how the sync is recorded in ``SyncState``."""

    now: datetime
    actor: str
    by: str
    fingerprint: str
    count: int


def fingerprint(declarations: Sequence[Declaration]) -> str:
    """sha256 of the declared set: every field each declaration writes, in key order, and
    the runbook texts this release writes (a new release that words them differently syncs
    again)."""
    digest = hashlib.sha256(f"format {FORMAT}\n".encode())
    probes = (Schedule(tenant="", key="k"), Schedule(tenant="t", key="k"))
    digest.update(json.dumps([runbooks.procedures(p) for p in probes], sort_keys=True).encode())
    for d in sorted(declarations, key=lambda d: (d.tenant, d.key)):
        fields = {**d.record_fields(), **d.limit_fields(), "tenant": d.tenant, "key": d.key}
        digest.update(json.dumps(fields, sort_keys=True, default=repr).encode())
        digest.update(b"\n")
    # The enqueued work's policies of every registered job (their policy records follow).
    for handler in registry.all():
        policies = {**handler.policy_record_fields, **handler.policies.limit, "job": handler.name}
        digest.update(json.dumps(policies, sort_keys=True, default=repr).encode())
        digest.update(b"\n")
    return digest.hexdigest()


def sync_schedules(
    declarations: Iterable[Declaration],
    *,
    now: datetime,
    actor: str = SYNC_ACTOR,
    by: str = "jobs sync",
) -> SyncReport:
    """Write declared schedules to ``Schedule`` rows.

    New declarations are created; changed ones updated (a timing change leaves an
    ``AuditRecord`` with before and after); code-declared schedules no longer declared are
    retired, never deleted, so their history stays. Run-time schedules are left alone, unless
    a declaration takes over their key. Concurrent syncs are serialised. ``by`` (the command
    or replica) is recorded with the set's fingerprint."""
    return _run(list(declarations), now=now, actor=actor, by=by, only_if_changed=False)


def sync_if_changed(declarations: Iterable[Declaration], *, now: datetime, by: str) -> SyncReport:
    """The start-up sync of a replica: skipped when the last completed sync wrote this
    declared set. A sync in progress elsewhere is waited for, then the set checked again, so
    replicas started together run one sync between them."""
    return _run(list(declarations), now=now, actor=SYNC_ACTOR, by=by, only_if_changed=True)


def synced(digest: str) -> bool:
    """Whether the last completed sync wrote the declared set of fingerprint ``digest``."""
    return SyncState.objects.filter(id=1, fingerprint=digest).exists()


def _run(
    declarations: list[Declaration], *, now: datetime, actor: str, by: str, only_if_changed: bool
) -> SyncReport:
    started = time.monotonic()
    # A schedules module that failed to import left the set partial: syncing it would retire
    # what that module declares (check E033 says which).
    discovery.refuse_partial_set()
    now = ensure_aware_utc(now, name="now")
    sync = _Sync(now, actor, by, fingerprint(declarations), len(declarations))
    if only_if_changed and synced(sync.fingerprint):
        return SyncReport(skipped=True)
    with transaction.atomic():
        store.lock_for_sync()  # waits for a sync in progress
        if only_if_changed and synced(sync.fingerprint):
            return SyncReport(skipped=True)
        report = _write(declarations, sync)
        report.seconds = time.monotonic() - started
        SyncState.objects.update_or_create(
            id=1,
            defaults={
                "fingerprint": sync.fingerprint,
                "schedules": sync.count,
                "synced_at": now,
                "synced_by": by[:200],
                "seconds": report.seconds,
            },
        )
        if report.created or report.updated or report.retired:
            store.notify("sync")  # serving replicas plan the changed schedules now
    return report


def _write(declarations: list[Declaration], sync: _Sync) -> SyncReport:
    report = SyncReport()
    consumed = store.consumed_one_offs()
    live = []
    for declaration in declarations:
        if _consumed_by(declaration) in consumed:
            report.consumed.append(declaration.label)
        else:
            live.append(declaration)
    records = _read_records(live)
    fresh = [d for d in live if (d.tenant, d.key) not in records]
    kept = [(d, records[(d.tenant, d.key)]) for d in live if (d.tenant, d.key) in records]
    created = _create(fresh, sync)
    changed = _update(kept, sync)
    limited = _set_limits(kept, sync)
    rewritten = runbooks.stale([s for _, s in kept])
    store.write_runbooks(rewritten)
    declared = {(d.tenant, d.key) for d in live}
    report.retired = _retire(
        [s for k, s in records.items() if k not in declared and s.origin == Origin.CODE], sync
    )
    report.updated.extend(_align_policy_records(sync))
    for _, schedule in kept:
        moved = schedule.pk in changed or schedule.pk in limited
        (report.updated if moved else report.unchanged).append(str(schedule))
    report.created = [str(s) for s in created]
    written = {s.pk for s in created} | {r.schedule_id for r in rewritten}
    report.runbooks = [str(s) for s in [*created, *(s for _, s in kept)] if s.pk in written]
    return report


def _align_policy_records(sync: _Sync) -> list[str]:
    """The policy records of enqueued work (``services.enqueue``) set to their job's
    ``@job(...)`` policies as this release registers them; the names of those changed. One
    read of them all; an audit record with before and after for each one changed, like a
    declared schedule's change. A record of a job this release does not register is left."""
    changed, written = [], []
    records = Schedule.objects.filter(origin=Origin.ENQUEUE).select_related("limit")
    for record in records.select_for_update(of=("self",)):
        try:
            handler = registry.get(record.job)
        except UnknownJob:
            continue
        wanted, limit = handler.policy_record_fields, handler.policies.limit
        before = {name: getattr(record, name) for name in wanted}
        if before != wanted:
            for name, value in {**wanted, "updated_at": sync.now}.items():
                setattr(record, name, value)
            written.append(record)
            audit.record(
                at=sync.now,
                actor=sync.actor,
                action="schedule.policies_changed",
                tenant=record.tenant,
                schedule_id=record.pk,
                reason=f"the @job({handler.name!r}) policies of this release ({sync.by})",
                before={k: v for k, v in before.items() if wanted[k] != v},
                after={k: v for k, v in wanted.items() if before[k] != v},
            )
            changed.append(str(record))
        if limits.retention(getattr(record, "limit", None)) != limit:
            limits.set_limit(
                record,
                limit,
                now=sync.now,
                actor=sync.actor,
                reason=f"the @job({handler.name!r}) retention of this release ({sync.by})",
            )
    store.write_records(written)
    return changed


def _read_records(declarations: list[Declaration]) -> dict[tuple[str, str], Schedule]:
    """The records of the declared keys (of any origin: a declaration takes over a run-time
    schedule of its key) and every code-declared record, by (tenant, key): one query."""
    keys = sorted({d.key for d in declarations})
    wanted = {(d.tenant, d.key) for d in declarations}
    rows = Schedule.objects.filter(origin=Origin.CODE) | Schedule.objects.filter(key__in=keys)
    return {
        (s.tenant, s.key): s for s in rows if s.origin == Origin.CODE or (s.tenant, s.key) in wanted
    }


def _fields(declaration: Declaration, created_at: datetime) -> dict[str, Any]:
    """The columns ``declaration`` sets on a record created at ``created_at``."""
    timing = declaration.timing.created(created_at)  # "after" counts from the creation
    return {**declaration.record_fields(), **timing.record_fields()}


def _create(declarations: list[Declaration], sync: _Sync) -> list[Schedule]:
    """New records with their Limits, runbooks and ``schedule.created`` audit records (their
    retention included), each kind copied in with one statement."""
    made = {}
    for declaration in declarations:
        made[declaration] = Schedule(
            tenant=declaration.tenant,
            key=declaration.key,
            origin=Origin.CODE,
            created_at=sync.now,
            updated_at=sync.now,
            **_fields(declaration, sync.now),
        )
        made[declaration].next_due_at = first_due(made[declaration], now=sync.now)
    store.insert_schedules(list(made.values()))  # numbered: their Limits refer to them
    store.insert_limits([Limit(schedule=s, **d.limit_fields()) for d, s in made.items()])
    store.insert_runbooks([row for s in made.values() for row in runbooks.rows(s)])
    audit.record_all(
        [
            _entry(s, sync, "schedule.created", after={**_fields(d, sync.now), **d.limit_fields()})
            for d, s in made.items()
        ],
        insert=store.copy_audit,
    )
    plan_late_one_offs(made.values(), now=sync.now)  # a deploy that landed after an instant
    return list(made.values())


def _changes(schedule: Schedule, declaration: Declaration) -> dict[str, Any]:
    fields = _fields(declaration, schedule.created_at)
    changed = {k: v for k, v in fields.items() if getattr(schedule, k) != v}
    if schedule.origin != Origin.CODE:
        changed["origin"] = Origin.CODE
    return changed


def _update(kept: list[tuple[Declaration, Schedule]], sync: _Sync) -> set[int]:
    """Bring changed records to their declarations; return their primary keys.

    The changed rows are locked and read again, and compared on that version: a concurrent
    write (an operator's disable, the planner's advance) is never overwritten with what the
    first read saw, and a one-off consumed meanwhile is not revived."""
    wanted = {s.pk: d for d, s in kept if _changes(s, d)}
    if not wanted:
        return set()
    locked = list(
        Schedule.objects.select_for_update(no_key=True).filter(pk__in=wanted).order_by("pk")
    )
    if any(s.status == ScheduleStatus.RETIRED for s in locked):
        consumed = store.consumed_one_offs()
        locked = [s for s in locked if _consumed_by(wanted[s.pk]) not in consumed]
    written, entries, outdated = [], [], []
    for schedule in locked:
        changed = _changes(schedule, wanted[schedule.pk])
        if not changed:
            continue
        before = {k: getattr(schedule, k) for k in changed}
        action = change_action(before, changed)
        parked = f"{schedule.parked_field}: {schedule.parked_reason}"
        if schedule.parked_field:  # written again: the planner checks the new record
            before["parked"], changed["parked"] = parked, ""
        replan = outdates_planned(changed)
        _apply(schedule, changed, sync.now, replan=replan)
        entries.append(_entry(schedule, sync, action, before=before, after=changed))
        written.append(schedule)
        if replan:
            outdated.append(schedule.pk)
    store.write_records(written)
    store.withdraw_planned_ahead(outdated, now=sync.now)
    audit.record_all(entries, insert=store.copy_audit)
    plan_late_one_offs([s for s in written if s.pk in outdated], now=sync.now)
    return {s.pk for s in written}


def _apply(schedule: Schedule, changed: dict[str, Any], now: datetime, *, replan: bool) -> None:
    """Set ``changed`` on ``schedule`` as one update of it does (a revived one is no longer
    retired; ``replan``, a timing or status change, re-plans it; a parked one is unparked)."""
    for name in changed:
        if name != "parked":
            setattr(schedule, name, changed[name])
    schedule.updated_at = now
    if changed.get("status", ScheduleStatus.RETIRED) != ScheduleStatus.RETIRED:
        schedule.retired_at = None
    if replan:
        schedule.next_due_at = now  # re-plan from the recovery point with the new timing
    if schedule.parked_field:
        unpark(schedule, now=now)
    schedule.full_clean(
        exclude=["running_occurrence"], validate_unique=False, validate_constraints=False
    )


def _set_limits(kept: list[tuple[Declaration, Schedule]], sync: _Sync) -> set[int]:
    """Bring the Limits of existing records to their declarations, each one written audited
    ``schedule.retention_changed`` with what it kept before; return the primary keys of the
    schedules whose Limit was written (one read of them all; syncs are serialised)."""
    have = {
        limit.schedule_id: limit
        for limit in Limit.objects.filter(schedule_id__in=[s.pk for _, s in kept])
    }
    written, entries = [], []
    for declaration, schedule in kept:
        wanted = declaration.limit_fields()
        before = limits.retention(have.get(schedule.pk))
        if before == wanted:
            continue
        written.append(Limit(schedule=schedule, **wanted))
        entries.append(
            limits.changed(
                schedule, before=before, after=wanted, at=sync.now, actor=sync.actor, reason=REASON
            )
        )
    store.write_limits(written)
    audit.record_all(entries, insert=store.copy_audit)
    return {limit.schedule_id for limit in written}


def _retire(gone: list[Schedule], sync: _Sync) -> list[str]:
    """Retire the code-declared records no longer declared: audited, never deleted, so their
    history stays. Locked and read again first; one already retired is left as it is."""
    ids = [s.pk for s in gone if s.status != ScheduleStatus.RETIRED]
    if not ids:
        return []
    locked = list(
        Schedule.objects.select_for_update(no_key=True)
        .filter(pk__in=ids)
        .exclude(status=ScheduleStatus.RETIRED)
        .order_by("tenant", "key")
    )
    audit.record_all(
        [
            _entry(
                s,
                sync,
                "schedule.retired",
                reason="no longer declared in code",
                before={"status": s.status},
                after={"status": ScheduleStatus.RETIRED},
            )
            for s in locked
        ],
        insert=store.copy_audit,
    )
    for schedule in locked:
        schedule.status = ScheduleStatus.RETIRED
        schedule.retired_at = schedule.updated_at = sync.now
    store.write_status(locked)
    return [str(s) for s in locked]


def _entry(
    schedule: Schedule,
    sync: _Sync,
    action: str,
    *,
    reason: str = REASON,
    before: dict[str, Any] | None = None,
    after: dict[str, Any] | None = None,
) -> dict[str, Any]:
    return audit.entry(
        at=sync.now,
        actor=sync.actor,
        action=action,
        tenant=schedule.tenant,
        schedule_id=schedule.pk,
        reason=reason,
        before=before,
        after=after,
    )


def _consumed_by(declaration: Declaration) -> tuple[Any, ...] | None:
    """How a consumed one-off of this declaration is recorded (``ConsumedOneOff``), or None
    for a recurring declaration."""
    timing = declaration.timing
    if not timing.one_off:
        return None
    # As the ledger holds it: ``at`` by its instant, ``after`` by its delay (not yet created).
    given = timing.record_fields()
    run_at = given["run_at"] if timing.fixed_instant else None
    return (declaration.tenant, declaration.key, timing.kind, run_at, given["delay"])
