"""``enqueue()``: one occurrence of a registered job, from application code, in the caller's
transaction.

Enqueued work is an occurrence like a schedule's, so it has the same fencing, retries, dead
letters, replay, audit of operators' actions and retention. It hangs off its job's *policy
record* in its tenant: a ``Schedule`` row of origin ``enqueue`` and timing ``enqueued`` (never
planned), keyed ``@<job>``, whose policies are the job's ``@job(...)`` ones
(``registry.JobPolicies``; ``jobs sync`` keeps them equal) and whose ``Limit`` is the job's
retention. The first enqueue of a job in a tenant creates it; every later one is one
statement (``store.enqueue``). docs/data-model.md explains the design. ``enqueue_task`` is the
Tasks backend's: the same, with the enqueued ``Task``'s path recorded in that statement.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID, uuid4

from django.db import IntegrityError, transaction

from .. import audit, runbooks, store
from ..clock import ensure_aware_utc
from ..declarations import TENANT_PATTERN
from ..exceptions import JobsError
from ..identity import enqueued_id
from ..models import Limit, Occurrence, Origin, Schedule, ScheduleStatus
from ..models.task_paths import TASK_PATH_MAX_CHARS
from ..registry import JobHandler, registry
from ..scheduling.policies import MAX_DURATION, Misfire, Overlap, TimingKind
from ..scheduling.timing import instant_problem
from ..spec import queue_problem
from ..validation import arguments, printable
from ..validation import priority as priority_problem
from .timeline import now as timeline_now

# A policy record's key: ``@`` and the job's name. No declared or run-time schedule key can
# start with ``@`` (letters, digits and . _ : / -, starting with a letter or digit).
POLICY_KEY_PREFIX = "@"
KEY_MAX_CHARS = 200
# Who the audit record of a policy record's creation names: the first enqueue made it.
ENQUEUE_ACTOR = "django_jobs.enqueue"


def policy_key(job: str) -> str:
    """The key of ``job``'s policy record (in every tenant)."""
    return f"{POLICY_KEY_PREFIX}{job}"


@dataclass(frozen=True)
class Enqueued:
    """What ``enqueue()`` wrote: the occurrence's identity, and whether this call created it
    (``False``: the key was enqueued before, and that occurrence is the one)."""

    id: UUID
    job: str
    tenant: str
    created: bool

    def occurrence(self) -> Occurrence:
        """The occurrence, as it is now (visible once the enqueuing transaction commits)."""
        return Occurrence.objects.get(pk=self.id)


def enqueue(
    job: str | Callable[..., object],
    *,
    args: dict[str, Any] | None = None,
    at: datetime | None = None,
    after: timedelta | None = None,
    key: str | None = None,
    tenant: str = "",
    priority: int | None = None,
    queue: str | None = None,
) -> Enqueued:
    """Enqueue one run of ``job`` (its registered name, or the ``@job`` function itself).

    Written in the caller's database transaction: workers see it only if the caller commits,
    and the NOTIFY that wakes them is delivered at that commit. It runs at ``at`` (an aware
    instant), ``after`` from now, or now; with ``args`` (a JSON object, as a schedule's) as
    ``run.args``; before due work of lower ``priority`` (default: the job's; see
    ``models.occurrences.PRIORITY_MINUTES``); on ``queue`` (default: the job's,
    ``@job(queue=)``), which only replicas serving it claim (``runworker --queue``). With a
    ``key``, its identity derives from
    (tenant, job, key): enqueuing the same key again, concurrently or later, changes nothing
    and returns the same identity (``created`` False) for as long as that occurrence is
    kept by its retention. Without one, each call is new work. The instant it runs at is
    from 1970-01-01 to before 2200-01-01 UTC (``timing.check_instant``), as every timing's;
    ``after`` is at most a century (``MAX_DURATION``).

    Raises ``JobsError`` naming the job and the field for bad input; nothing is written then.
    """
    return _enqueue(
        _handler(job),
        args=args,
        at=at,
        after=after,
        key=key,
        tenant=tenant,
        priority=priority,
        queue=queue,
    )


def enqueue_task(
    job: str,
    *,
    alias: str,
    path: str,
    args: dict[str, Any],
    at: datetime | None,
    priority: int | None,
    queue: str | None = None,
) -> Enqueued:
    """What ``JobsBackend.enqueue`` (backend ``alias``) writes: ``enqueue()`` of the alias's
    job ``job``, with the ``Task``'s ``path`` recorded for ``alias`` (``TaskPath``) in the
    same statement, on ``queue`` (the ``Task``'s ``queue_name``; default: the job's). Only
    the backend calls it, with the path the ``Task`` object reports,
    never one read from arguments: the Tasks handler imports no other path
    (``tasks.known_task``). Raises ``JobsError`` naming the task for a path that cannot be
    one."""
    if not path or len(path) > TASK_PATH_MAX_CHARS:
        raise JobsError(
            f"enqueue of task {path[:200]!r} (backend {alias!r}): task: a module path of 1-"
            f"{TASK_PATH_MAX_CHARS} characters"
        )
    return _enqueue(
        registry.get(job),
        args=args,
        at=at,
        after=None,
        key=None,
        tenant="",
        priority=priority,
        queue=queue,
        task=(alias, path),
    )


def task_path_recorded(alias: str, path: str) -> bool:
    """Whether ``path`` was recorded for the Tasks backend alias ``alias`` (``enqueue_task``):
    the only paths the Tasks handler may import."""
    return store.task_path_recorded(alias, path)


@dataclass(frozen=True)
class ScheduleOf:
    """The schedule (a policy record or not) an occurrence hangs off, as the Tasks handler
    checks it: its tenant, key, job and origin."""

    tenant: str
    key: str
    job: str
    origin: str


def schedule_of(occurrence_id: UUID | str) -> ScheduleOf | None:
    """The schedule of occurrence ``occurrence_id``, or ``None`` if there is no such
    occurrence."""
    record = (
        Occurrence.objects.filter(pk=occurrence_id)
        .values_list("schedule__tenant", "schedule__key", "schedule__job", "schedule__origin")
        .first()
    )
    return None if record is None else ScheduleOf(*record)


def _enqueue(
    handler: JobHandler,
    *,
    args: dict[str, Any] | None,
    at: datetime | None,
    after: timedelta | None,
    key: str | None,
    tenant: str,
    priority: int | None,
    queue: str | None = None,
    task: tuple[str, str] | None = None,
) -> Enqueued:
    """``enqueue()`` of ``handler``'s job; with ``task`` (alias, path), ``enqueue_task``'s."""
    name = handler.name
    given, problem = arguments(args)
    if problem is not None:
        raise JobsError(f"enqueue of job {name!r}: args: {problem}")
    if (unfit := handler.parameters.problem(given or {})) is not None:
        raise JobsError(f"enqueue of job {name!r}: args: {unfit}")
    _check(name, tenant=tenant, key=key, priority=priority, at=at, after=after, queue=queue)
    now = timeline_now()
    when = _instant(name, at=at, after=after, now=now)
    identity = enqueued_id(tenant, name, key) if key is not None else uuid4()

    path = None if task is None else store.TaskPathRecord(alias=task[0], path=task[1], at=now)

    def write() -> store.EnqueueWrite | None:
        return store.enqueue(
            identity,
            tenant=tenant,
            policy_key=policy_key(name),
            at=when,
            args=given or {},
            priority=priority,
            queue=queue,
            task=path,
        )

    written = write()
    if written is None:  # the job's first enqueue in this tenant
        _create_policy_record(handler, tenant, now=now)
        written = write()
    if written is None:
        raise JobsError(f"enqueue of job {name!r}: its policy record could not be created")
    return Enqueued(id=identity, job=name, tenant=tenant, created=written.created)


def _handler(job: str | Callable[..., object]) -> JobHandler:
    if isinstance(job, str):
        return registry.get(job)  # UnknownJob (a JobsError) names it
    handler = registry.of(job)
    if handler is None:
        raise JobsError(
            f"enqueue: {getattr(job, '__qualname__', job)!s} is not a registered job; "
            'decorate it with @job("<name>") or pass the name'
        )
    return handler


def _check(
    name: str,
    *,
    tenant: object,
    key: object,
    priority: object,
    at: object,
    after: object,
    queue: object = None,
) -> None:
    what = f"enqueue of job {name!r}"
    if len(policy_key(name)) > KEY_MAX_CHARS:
        raise JobsError(
            f"{what}: job: names of enqueued jobs are at most {KEY_MAX_CHARS - 1} characters"
        )
    if not isinstance(tenant, str) or not TENANT_PATTERN.fullmatch(tenant):
        raise JobsError(f"{what}: tenant: at most 100 letters, digits and . _ : -, got {tenant!r}")
    if key is not None and (
        not isinstance(key, str)
        or not key
        or len(key) > KEY_MAX_CHARS
        or not printable(key, layout=False)
    ):
        raise JobsError(f"{what}: key: 1-{KEY_MAX_CHARS} printable characters, got {key!r}")
    if priority is not None and (problem := priority_problem(priority)) is not None:
        raise JobsError(f"{what}: priority: {problem}")
    if queue is not None and (problem := queue_problem(queue)) is not None:
        raise JobsError(f"{what}: queue: {problem}")
    if at is not None and after is not None:
        raise JobsError(f"{what}: give at or after, not both")
    if at is not None and (problem := instant_problem(at)) is not None:
        raise JobsError(f"{what}: at: {problem}")
    if after is not None and (
        not isinstance(after, timedelta) or not timedelta(0) <= after <= MAX_DURATION
    ):
        raise JobsError(
            f"{what}: after: a timedelta of 0 or more, at most {MAX_DURATION.days} days, "
            f"got {after!r}"
        )


def _instant(name: str, *, at: datetime | None, after: timedelta | None, now: datetime) -> datetime:
    """When the work runs: ``at``, ``after`` from ``now``, or ``now``; inside the window of
    instants (``timing.check_instant``) that every timing names too."""
    if at is not None:
        return ensure_aware_utc(at, name="at")  # in the window: _check
    try:
        when = now + (after or timedelta(0))
        problem = instant_problem(when)
    except OverflowError:  # only from a clock near year 9999: after is at most a century
        problem = "lands past year 9999"
    if problem is not None:
        raise JobsError(f"enqueue of job {name!r}: after: {after} from {now.isoformat()} {problem}")
    return when


def _create_policy_record(handler: JobHandler, tenant: str, *, now: datetime) -> None:
    """``handler``'s policy record in ``tenant``, with its Limit and runbooks, unless another
    transaction made it first (then that one's, once it commits)."""
    try:
        with transaction.atomic():  # a savepoint inside the caller's transaction
            record = Schedule(
                tenant=tenant,
                key=policy_key(handler.name),
                job=handler.name,
                timing_kind=TimingKind.ENQUEUED,
                overlap=Overlap.ALLOW,
                misfire=Misfire.SKIP,
                max_catchup=0,
                status=ScheduleStatus.ACTIVE,
                origin=Origin.ENQUEUE,
                created_at=now,
                updated_at=now,
                **handler.policy_record_fields,
            )
            store.insert_schedules([record])
            store.insert_limits([Limit(schedule=record, **handler.policies.limit)])
            audit.record(  # with its retention, as every schedule's creation is recorded
                at=now,
                actor=ENQUEUE_ACTOR,
                action="schedule.created",
                tenant=tenant,
                schedule_id=record.pk,
                reason=f"the first enqueue of job {handler.name!r} in this tenant",
                after={**handler.policy_record_fields, **handler.policies.limit},
            )
            runbooks.write(record)  # inspect, replay, disable: as every active record has
    except IntegrityError:
        if not Schedule.objects.filter(tenant=tenant, key=policy_key(handler.name)).exists():
            raise
