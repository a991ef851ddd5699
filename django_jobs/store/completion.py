"""Completion: the fenced writes that end an attempt (complete, fail, dead-letter, release, excuse
an outage).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from ..clock import ensure_aware_utc
from ..models import AttemptOutcome
from ..safe_error import SafeError
from ._sql import ATT, OCC, SCH, WORKER_LOST, _rows
from .records import Lease, WriteResult, _lease_arrays


def _fenced_write(
    leases: Sequence[Lease],
    *,
    now: datetime,
    set_sql: str,
    outcome: AttemptOutcome,
    params: dict[str, Any],
    completes: bool = False,
    skip_locked: bool = False,
) -> WriteResult:
    """Apply ``set_sql`` to the occurrences whose lease is current; record every attempt's end.

    Accepted leases get ``outcome`` on their Attempt; refused ones get ``fenced_out``. The
    schedule of an accepted occurrence that was its running one (overlap skip/queue) is free
    to start the next; with ``completes`` its ``last_completed_at`` advances too.
    """
    if not leases:
        return WriteResult(frozenset(), frozenset())
    owners = {lease.owner for lease in leases}
    if len(owners) != 1:
        raise ValueError("a fenced write takes leases of one owner")
    now = ensure_aware_utc(now, name="now")
    sql = f"""
        WITH input AS (
            SELECT * FROM unnest(%(ids)s::uuid[], %(tokens)s::bigint[]) AS t(id, token)
        ),
        -- Rows another transaction has locked are skipped, never waited for: only a
        -- handler's own run.atomic() can hold one (claims skip rows they cannot lock).
        free AS (
            SELECT o.id FROM {OCC} o JOIN input ON o.id = input.id
            WHERE %(skip_locked)s FOR NO KEY UPDATE OF o SKIP LOCKED
        ),
        done AS (
            UPDATE {OCC} o SET {set_sql},
                lease_owner = '', lease_expires_at = NULL
            FROM input
            WHERE o.id = input.id AND o.fencing_token = input.token
              AND o.lease_owner = %(owner)s AND o.state = 'processing'
              AND (NOT %(skip_locked)s OR o.id IN (SELECT id FROM free))
            RETURNING o.id, o.schedule_id
        ),
        ended AS (
            UPDATE {ATT} a SET
                outcome = CASE WHEN a.occurrence_id IN (SELECT id FROM done)
                          THEN %(outcome)s ELSE 'fenced_out' END,
                finished_at = %(now)s,
                error_type = %(error_type)s,
                error_message = %(error_message)s
            FROM input
            WHERE a.occurrence_id = input.id AND a.fencing_token = input.token
              AND a.outcome IN ('running', 'claimed', 'lease_lost')
              AND (NOT %(skip_locked)s OR a.occurrence_id IN (SELECT id FROM free))
        ),
        ended_runs AS (
            UPDATE {SCH} s SET
                running_occurrence = NULL,
                last_completed_at = CASE WHEN %(completes)s
                    THEN GREATEST(s.last_completed_at, %(now)s) ELSE s.last_completed_at END
            FROM done
            WHERE s.id = done.schedule_id AND s.running_occurrence = done.id
        ),
        -- Other schedules' recovery point advances with SKIP LOCKED: statements that each
        -- advance several schedules can then never deadlock. A row locked at that moment is
        -- being advanced by another transaction to an instant a moment apart; the exact
        -- instants always stay on the occurrence rows.
        progress AS (
            UPDATE {SCH} s SET last_completed_at = %(now)s
            WHERE %(completes)s AND s.id IN (
                SELECT id FROM {SCH}
                WHERE id IN (SELECT schedule_id FROM done)
                  AND (running_occurrence IS NULL
                       OR running_occurrence NOT IN (SELECT id FROM done))
                  AND (last_completed_at IS NULL OR last_completed_at < %(now)s)
                FOR NO KEY UPDATE SKIP LOCKED
            )
        )
        SELECT id FROM done
    """
    done = {
        r[0]
        for r in _rows(
            sql,
            {
                **_lease_arrays(leases),
                "owner": owners.pop(),
                "now": now,
                "outcome": outcome.value,
                "error_type": "",
                "error_message": "",
                "completes": completes,
                "skip_locked": skip_locked,
                **params,
            },
        )
    }
    ids = {lease.occurrence_id for lease in leases}
    return WriteResult(accepted=frozenset(done), refused=frozenset(ids - done))


def complete(leases: Sequence[Lease], *, now: datetime) -> WriteResult:
    """Mark occurrences completed, each only while its lease's token is current."""
    return _fenced_write(
        leases,
        now=now,
        set_sql="state = 'completed', finished_at = %(now)s",
        outcome=AttemptOutcome.SUCCEEDED,
        params={},
        completes=True,
    )


def fail(
    lease: Lease,
    *,
    now: datetime,
    error: SafeError,
    retry_at: datetime | None,
    outcome: AttemptOutcome = AttemptOutcome.FAILED,
) -> bool:
    """Record a failed attempt: wait for a retry at ``retry_at``, or, with ``None``, dead-letter.

    Returns whether the write was accepted (``False``: the token was stale, nothing changed).
    """
    if retry_at is None:
        set_sql = "state = 'dead', finished_at = %(now)s"
    else:
        set_sql = "state = 'failed', due_at = %(retry_at)s, trigger = 'retry'"
    result = _fenced_write(
        [lease],
        now=now,
        set_sql=set_sql
        + ", failures = o.failures + 1"
        + ", last_error_type = %(error_type)s, last_error_message = %(error_message)s",
        outcome=outcome,
        params={
            "retry_at": ensure_aware_utc(retry_at, name="retry_at") if retry_at else None,
            "error_type": error.type,
            "error_message": error.message,
        },
    )
    return bool(result.accepted)


def dead_letter(
    lease: Lease,
    *,
    now: datetime,
    error: SafeError,
    outcome: AttemptOutcome = AttemptOutcome.FAILED,
) -> bool:
    """Move the occurrence to the dead state (poison) at once; see ``fail``."""
    return fail(lease, now=now, error=error, retry_at=None, outcome=outcome)


_GIVE_BACK = (
    "state = CASE WHEN o.trigger = 'retry' THEN 'failed' ELSE 'scheduled' END, due_at = %(now)s"
)


def release(
    leases: Sequence[Lease],
    *,
    now: datetime,
    outcome: AttemptOutcome = AttemptOutcome.RELEASED,
) -> WriteResult:
    """Give back unfinished work on graceful shutdown: claimable again at once by any replica.

    The released attempt is not counted as a failure. Never waits for a row lock: a row
    locked by a run's own ``run.atomic()`` (a handler that ignored cancellation) is skipped,
    neither accepted nor refused, and its lease left to expire. With ``outcome`` ``unstarted``
    (claimed ahead, never run) or ``outage``, the Attempt says so.
    """
    return _fenced_write(
        leases, now=now, set_sql=_GIVE_BACK, outcome=outcome, params={}, skip_locked=True
    )


def excuse_outage(lease: Lease, *, now: datetime) -> bool:
    """The store could not be reached while ``lease``'s attempt ran, and another claim took
    the occurrence over meanwhile, counting the attempt as lost: record it ``outage`` and give
    the failure back. An occurrence that lost attempt had dead-lettered (and that nothing
    claimed since) is due again at once. One statement; ``False`` if there was nothing to
    excuse (an attempt of another owner, or not one that counted).
    """
    sql = f"""
        WITH counted AS (
            SELECT a.id FROM {ATT} a
            WHERE a.occurrence_id = %(id)s AND a.fencing_token = %(token)s
              AND a.replica = %(owner)s AND a.outcome IN ('lease_lost', 'fenced_out')
            FOR UPDATE
        ),
        excused AS (
            UPDATE {ATT} a SET outcome = 'outage', finished_at = COALESCE(a.finished_at, %(now)s)
            FROM counted WHERE a.id = counted.id
            RETURNING a.id
        ),
        revived AS (
            SELECT o.id FROM {OCC} o
            WHERE o.id = %(id)s AND o.state = 'dead' AND o.fencing_token = %(token)s
              AND o.last_error_type = '{WORKER_LOST}' AND EXISTS (SELECT 1 FROM excused)
        )
        UPDATE {OCC} o SET
            failures = GREATEST(o.failures - 1, 0),
            state = CASE WHEN o.id IN (SELECT id FROM revived) THEN 'scheduled' ELSE o.state END,
            due_at = CASE WHEN o.id IN (SELECT id FROM revived) THEN %(now)s ELSE o.due_at END,
            finished_at = CASE WHEN o.id IN (SELECT id FROM revived) THEN NULL
                          ELSE o.finished_at END,
            last_error_type = CASE WHEN o.id IN (SELECT id FROM revived) THEN ''
                              ELSE o.last_error_type END,
            last_error_message = CASE WHEN o.id IN (SELECT id FROM revived) THEN ''
                                 ELSE o.last_error_message END
        WHERE o.id = %(id)s AND EXISTS (SELECT 1 FROM excused)
        RETURNING o.id
    """
    params = {"id": lease.occurrence_id, "token": lease.token, "owner": lease.owner}
    return bool(_rows(sql, {**params, "now": ensure_aware_utc(now, name="now")}))
