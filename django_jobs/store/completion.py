"""Completion: the fenced writes that end an attempt (complete, fail, dead-letter, release, excuse
an outage).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from psycopg.types.json import Jsonb

from ..clock import ensure_aware_utc
from ..models import AttemptOutcome
from ..safe_error import SafeError
from ._sql import _execute, _named_rows, load_queries
from .records import Lease, WriteResult, _lease_arrays, _lease_one

QUERIES = load_queries("completion")

# The fenced write once per way an attempt ends, each with what it sets on an accepted
# occurrence (``completed``, ``retry``, ``dead``, ``released`` in sql/completion.sql).
_ENDS = ("completed", "retry", "dead", "released")
FENCED_WRITES = {
    ends: load_queries("fenced_write", accepted=QUERIES[ends])["fenced_write"] for ends in _ENDS
}
# The same for one lease without skip_locked: what a run thread writes for its own run.
FENCED_WRITES_ONE = {
    ends: load_queries("fenced_write", accepted=QUERIES[ends])["fenced_write_one"] for ends in _ENDS
}


def _fenced_write(
    leases: Sequence[Lease],
    *,
    now: datetime,
    ends: str,
    outcome: AttemptOutcome,
    params: dict[str, Any],
    skip_locked: bool = False,
) -> WriteResult:
    """End the attempts of ``leases`` as ``ends`` (a key of ``FENCED_WRITES``) where the lease
    is current; record every attempt's end. One statement: for one lease without
    ``skip_locked``, ``FENCED_WRITES_ONE``'s, which finds its row by primary key.

    An accepted lease's attempt gets its history row (``Attempt``) with ``outcome``, inserted
    in the same statement: the only Attempt row write of an attempt. A refused one's row,
    written by the claim that took its lease over, becomes ``fenced_out``, in a second
    statement (only when a lease was refused). No
    schedule row is written: a schedule's last completion is read from its occurrences
    (``services.with_recovery_points``), and an overlap skip/queue schedule's guard
    (``running_occurrence``) stays on the occurrence it guarded, which a claim passes once
    that occurrence is no longer processing. With ``skip_locked``, a row another transaction
    has locked is neither accepted nor refused.
    """
    if not leases:
        return WriteResult(frozenset(), frozenset())
    owners = {lease.owner for lease in leases}
    if len(owners) != 1:
        raise ValueError("a fenced write takes leases of one owner")
    one = len(leases) == 1 and not skip_locked
    params = {
        **(_lease_one(leases[0]) if one else _lease_arrays(leases)),
        "owner": owners.pop(),
        "now": ensure_aware_utc(now, name="now"),
        "outcome": outcome.value,
        "error_type": "",
        "error_message": "",
        "result": None,
        "skip_locked": skip_locked,
        **params,
    }
    statement = (FENCED_WRITES_ONE if one else FENCED_WRITES)[ends]
    rows = _named_rows(statement, params)
    done = {row.id for row in rows if row.accepted}
    skipped = {row.id for row in rows if not row.accepted}  # locked: neither
    refused = {lease.occurrence_id for lease in leases} - done - skipped
    if refused:
        stale = _lease_arrays([lease for lease in leases if lease.occurrence_id in refused])
        _execute(QUERIES["fenced_out"], {**params, **stale})
    return WriteResult(accepted=frozenset(done), refused=frozenset(refused))


def complete(leases: Sequence[Lease], *, now: datetime, result: Any = None) -> WriteResult:
    """Mark occurrences completed, each only while its lease's token is current; with
    ``result`` (one lease: what its handler returned, checked by ``validation.result``)."""
    if result is not None and len(leases) != 1:
        raise ValueError("a result is written with the completion of one lease")
    return _fenced_write(
        leases,
        now=now,
        ends="completed",
        outcome=AttemptOutcome.SUCCEEDED,
        params={"result": None if result is None else Jsonb(result)},
    )


def record_result(lease: Lease, result: Any) -> bool:
    """Keep ``result`` on the occurrence ``lease`` completed (``run.atomic()`` committed the
    completion before the handler returned it); ``False`` if it is no longer that completion."""
    params = {"id": lease.occurrence_id, "token": lease.token, "result": Jsonb(result)}
    return bool(_named_rows(QUERIES["record_result"], params))


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
    result = _fenced_write(
        [lease],
        now=now,
        ends="dead" if retry_at is None else "retry",
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
        leases, now=now, ends="released", outcome=outcome, params={}, skip_locked=True
    )


def excuse_outage(lease: Lease, *, now: datetime) -> bool:
    """The store could not be reached while ``lease``'s attempt ran, and another claim took
    the occurrence over meanwhile, counting the attempt as lost: record it ``outage`` and give
    the failure back. An occurrence that lost attempt had dead-lettered (and that nothing
    claimed since) is due again at once. One statement; ``False`` if there was nothing to
    excuse (an attempt of another owner, or not one that counted).
    """
    params = {
        "id": lease.occurrence_id,
        "token": lease.token,
        "owner": lease.owner,
        "now": ensure_aware_utc(now, name="now"),
    }
    return bool(_named_rows(QUERIES["excuse_outage"], params))


def outage_streak(lease: Lease) -> int:
    """How many attempts in a row of ``lease``'s occurrence a store outage ended (given back
    or excused), before this one: the worker bounds them (``executor.MAX_OUTAGE_GIVE_BACKS``)."""
    (row,) = _named_rows(QUERIES["outage_streak"], {"id": lease.occurrence_id})
    return int(row.streak)
