"""Claims: taking due occurrences under a fresh lease, oldest first, with ``FOR UPDATE SKIP
LOCKED``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple

from django.db import connection, transaction
from psycopg import sql

from ..clock import ensure_aware_utc
from ..models import Schedule, SkipReason
from ._sql import (
    _RUN_VALUES,
    CLAIMABLE_IN,
    FENCING_TOKENS,
    TENANT_MISMATCH,
    _all_loadable,
    _capped,
    _execute,
    _loadable,
    _named_rows,
    _not_paused,
    load_queries,
)
from .records import Claimed, Ended, Lease

# The schedule fields a run reads (the handler's name, timeout, retry policy, and the key and
# tenant that name it): returned by the claim itself, so a claim costs no second query.
# In the model's field order, as ``Model.from_db`` reads values.
RUN_FIELDS = tuple(
    f.attname
    for f in Schedule._meta.concrete_fields
    if f.attname in {"tenant", "key", "job", "timeout", "max_attempts", "backoff", "max_backoff"}
)


def _run_fields() -> str:
    """SQL: the ``RUN_FIELDS`` of the claimed row's schedule ``s``, each as ``s_<field>``."""
    fields = (
        sql.SQL("{} AS {}").format(sql.Identifier("s", name), sql.Identifier(f"s_{name}"))
        for name in RUN_FIELDS
    )
    return sql.SQL(", ").join(fields).as_string(None)


_FRAGMENTS = dict(
    claimable_states=CLAIMABLE_IN,
    run_values_loadable=_all_loadable("s", _RUN_VALUES),
    due_at_loadable=_loadable("o.due_at", "timestamptz"),
    scheduled_at_loadable=_loadable("o.scheduled_at", "timestamptz"),
    not_paused=_not_paused("s.tenant", "s.key"),
    capped_max_delay=_capped("s.max_delay"),
    run_fields=_run_fields(),
    fencing_tokens=sql.Literal(FENCING_TOKENS).as_string(None),
)
# ``claim``: every queue but those given apart (the limited ones, each claimed on its own
# under its lock); ``claim_queue``: one queue, over its range of django_jobs_occurrence_queue.
QUERIES = load_queries(
    "claims",
    queue_filter="o.queue <> ALL(%(other_queues)s::text[])",
    queue_order="django_jobs_claim_order(o.due_at, o.priority)",
    **_FRAGMENTS,
)
QUEUE_QUERIES = load_queries(
    "claims",
    queue_filter="o.queue = %(queue)s::text",
    # models.occurrences.QUEUE_CLAIM_ORDER: an order only django_jobs_occurrence_queue gives.
    queue_order="django_jobs_claim_order(o.due_at, (o.priority + 0)::smallint)",
    **_FRAGMENTS,
)


def claim_runs(
    *,
    owner: str,
    now: datetime,
    lease_for: timedelta,
    limit: int,
    tenant: str | None = None,
    exclude_keys: Sequence[str] = (),
    start_now: int | None = None,
    queue: str | None = None,
    other_queues: Sequence[str] = (),
    max_running: int | None = None,
) -> Claimed:
    """Take up to ``limit`` due occurrences for ``owner``; return their leases, oldest first,
    each with its schedule (the ``RUN_FIELDS`` loaded).

    Due means: scheduled or waiting for a retry with ``due_at <= now``, or processing with a
    lease that expired at or before ``now``. The first ``start_now`` (default: all) start at
    once; the rest are claimed ahead of a free run thread, unstarted (``attempt_started_at``
    NULL) until ``mark_started``. Steps, in one statement (``claim`` in sql/claims.sql):

    1. pick due rows of enabled, active schedules ``FOR UPDATE SKIP LOCKED``, so concurrent
       claimers never wait for, nor take, each other's rows;
    2. a taken-over lease whose attempt had started is a lost attempt and counts as a failure,
       so a job that kills its worker is bounded by its retries: when that uses up the
       schedule's ``max_attempts`` the occurrence goes ``dead`` (``WorkerLost``) instead of
       running again. An attempt claimed ahead and never started costs nothing;
    3. set owner and expiry, the attempt count up by one, and a fencing token from one
       sequence (``FENCING_TOKENS``), so an identity never gets a token twice, even across
       a purge and the replay that recreates it;
    4. write a taken-over lease's attempt's history row: ``lease_lost``, or ``unstarted``
       (the new attempt lives on the occurrence row; its Attempt row is written at its end);
    5. for overlap ``skip``/``queue`` schedules, record the claimed occurrence as the one
       running; no other schedule row is written (a schedule's last start is read from its
       occurrences, ``services.with_recovery_points``).

    Not one statement alone, though: in its transaction a statement before it turns off the
    plan types that read every due row (``_walk_the_due_index``) and, inside a caller's
    transaction, one after it gives them back: a claim is two statements, or three. The
    settings cannot ride in the claim: they must hold when it is planned, and a
    ``set_config`` in it would run only when it executes.

    A missed scheduled run is left for the planner's misfire decision, and a schedule whose
    overlap policy is not ``allow`` gets at most one processing occurrence. For overlap
    ``skip``, a planned run (never started, trigger ``schedule``) due while another occurrence
    of its schedule is processing is skipped, reason ``overlap``, and returned in
    ``Claimed.overlapped``: its instant may have been planned ahead (``PLAN_AHEAD_SECONDS``),
    before the planner could know. Retries and operators' runs wait for the one running. An
    occurrence whose tenant is not its schedule's (a row written behind the store's back) is
    never run: it goes ``dead`` (``TenantMismatch``) and is returned in ``Claimed.forged``.

    With ``queue``, only that queue's occurrences, else every queue but ``other_queues``;
    with ``max_running``, within the queue's fleet-wide limit (``_take_due``).
    """
    now = ensure_aware_utc(now, name="now")
    expires = now + lease_for
    params = dict(now=now, expires=expires, owner=owner, start_now=start_now, limit=limit)
    params |= dict(tenant=tenant, excluded=list(exclude_keys), queue=queue)
    params["other_queues"] = list(other_queues)
    return _claimed(_take_due(params, max_running=max_running), owner=owner, expires=expires)


def _take_due(params: dict[str, Any], *, max_running: int | None = None) -> list[Any]:
    """Run the claim statement with the due index walked in order; its rows.

    With ``params["queue"]``, the statement walks one range of django_jobs_occurrence_queue
    in claim order: no row of another queue is read. With ``max_running`` (the queue's
    fleet-wide limit, ``DJANGO_JOBS["QUEUES"]``) it first takes the queue's lock (advisory,
    until the transaction ends: ``queue_lock``), then counts the queue's processing
    occurrences whose lease has not lapsed, in a statement of its own that sees every claim
    committed before the lock was granted, and takes at most the difference: claimers of the
    queue on every replica take turns, so no two count one free slot.
    """
    if max_running is not None and params["queue"] is None:
        raise ValueError("max_running limits one queue: give its queue")
    queries = QUERIES if params["queue"] is None else QUEUE_QUERIES
    with transaction.atomic():
        if max_running is not None:
            _execute(QUERIES["queue_lock"], {"queue": params["queue"]})
            (row,) = _named_rows(
                QUERIES["queue_running"], {"queue": params["queue"], "now": params["now"]}
            )
            params = {**params, "limit": min(params["limit"], max_running - row.running)}
            if params["limit"] <= 0:
                return []
        # Whatever the statistics say: right after a burst was planned they still describe a
        # near-empty table, and the planner would sort every due row to return the first
        # ``limit``. Settings local to this transaction.
        previous = _walk_the_due_index()
        rows = _named_rows(queries["claim"], params)
        if len(connection.atomic_blocks) > 1:
            _restore_planner(previous)  # inside a caller's transaction: give them back
    return rows


class _Planner(NamedTuple):
    """The planner settings a claim turns off, as they were before."""

    enable_sort: str
    enable_bitmapscan: str
    enable_seqscan: str
    jit: str


def _walk_the_due_index() -> _Planner:
    """Turn off, for the rest of the transaction, the plans that read every due row; return
    the settings they had."""
    (row,) = _named_rows(QUERIES["walk_the_due_index"], {})
    return _Planner(**{name: getattr(row, name) for name in _Planner._fields})


def _restore_planner(previous: _Planner) -> None:
    """Give back the planner settings ``_walk_the_due_index`` found."""
    _execute(QUERIES["restore_planner"], previous._asdict())


def _claimed(rows: list[Any], *, owner: str, expires: datetime) -> Claimed:
    """The claim's rows as runs to start, and the occurrences it ended instead: dead after a
    lost attempt, forged, or skipped for overlap or, enqueued, past their job's max_delay
    (the ``trigger`` column says which)."""
    claimed = Claimed()
    ended = {
        TENANT_MISMATCH: claimed.forged,
        SkipReason.OVERLAP.value: claimed.overlapped,
        SkipReason.MISFIRE.value: claimed.late,
    }
    for row in rows:
        if row.token is None:
            ended.get(row.trigger, claimed.dead).append(row.id)
            claimed.ended.append(_ended(row, why=row.trigger, error=row.error or ""))
        else:
            claimed.runs.append((_lease(row, owner=owner, expires=expires), _schedule(row)))
            if row.lost_by is not None:
                # The attempt lost is the one before the claim's.
                lost = _ended(row, why=row.lost_by, attempt=row.attempts - 1)
                claimed.taken_over.append(lost)
    return claimed


def _ended(row: Any, *, why: str, error: str = "", attempt: int | None = None) -> Ended:
    """What the alerts say of a claim row (``records.Ended``)."""
    return Ended(
        occurrence_id=row.id,
        schedule_id=row.schedule_id,
        tenant=row.s_tenant,
        key=row.s_key,
        job=row.s_job,
        scheduled_at=row.scheduled_at.astimezone(UTC),
        attempt=row.attempts if attempt is None else attempt,
        why=why,
        error=error,
    )


def _lease(row: Any, *, owner: str, expires: datetime) -> Lease:
    """The lease a claim row stands for."""
    return Lease(
        occurrence_id=row.id,
        token=row.token,
        owner=owner,
        expires_at=expires,
        schedule_id=row.schedule_id,
        tenant=row.tenant,
        scheduled_at=row.scheduled_at.astimezone(UTC),
        attempt=row.attempts,
        trigger=row.trigger,
        failures=row.failures,
        args=_args(row.args),
        queue=row.queue,
    )


def _args(stored: Any) -> dict[str, Any]:
    """The claimed occurrence's arguments: Django's connection hands jsonb over as its text."""
    if isinstance(stored, str):
        return json.loads(stored) if stored != "{}" else {}
    return dict(stored)


def _schedule(row: Any) -> Schedule:
    """The claimed occurrence's schedule with the fields a run needs, read with the claim; any
    other field loads on access."""
    values = [getattr(row, f"s_{name}") for name in RUN_FIELDS]
    return Schedule.from_db(connection.alias, ["id", *RUN_FIELDS], [row.schedule_id, *values])
