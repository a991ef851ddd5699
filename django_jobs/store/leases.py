"""Leases: renewing, starting and holding a claimed occurrence, each fenced by its token."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from uuid import UUID

from ..clock import ensure_aware_utc
from ._sql import _named_rows, load_queries
from .records import Lease, _lease_arrays

QUERIES = load_queries("leases")


def renew(
    leases: Sequence[Lease], *, owner: str, now: datetime, lease_for: timedelta
) -> list[Lease]:
    """Extend the leases ``owner`` still holds; return them with their new expiry.

    A lease is still held while its token is the occurrence's current one and the occurrence
    is processing under ``owner``. A lease missing from the result is lost: the worker must
    stop that run at once.

    Never waits for a row lock: a row locked by another transaction (in practice the holder's
    own ``run.atomic()``, which no claim can take over while it holds the lock) is returned
    still held but not extended, and renewed by a later call. One statement.
    """
    if not leases:
        return []
    expires = ensure_aware_utc(now, name="now") + lease_for
    params = {**_lease_arrays(leases), "owner": owner, "expires": expires}
    kept = {row.id: row.renewed for row in _named_rows(QUERIES["renew"], params)}
    return [
        Lease(**{**lease.__dict__, "expires_at": expires}) if kept[lease.occurrence_id] else lease
        for lease in leases
        if lease.occurrence_id in kept
    ]


def mark_started(leases: Sequence[Lease], *, now: datetime) -> frozenset[UUID]:
    """Runs claimed ahead are starting: from now on a lapse of their lease is a lost attempt.
    One statement for all of ``leases`` (the worker's run threads group theirs:
    ``worker/starts.py``). Returns the occurrences whose start it recorded: a lease taken
    over meanwhile (its token stale) marks nothing, and its run must not
    start.

    Committed without waiting for the WAL flush (``synchronous_commit`` off for this one
    statement): it must outlive this worker process, which it does once committed; only a
    crash of PostgreSQL itself in the next moments could lose it, and then the attempts count
    as unstarted.
    """
    if not leases:
        return frozenset()
    ordered = sorted(leases, key=lambda lease: lease.occurrence_id)
    params = {**_lease_arrays(ordered), "now": ensure_aware_utc(now, name="now")}
    return frozenset(row.occurrence_id for row in _named_rows(QUERIES["mark_started"], params))


def hold(lease: Lease) -> bool:
    """Lock the occurrence for the rest of the caller's transaction, if ``lease`` is current.

    Used by ``Run.atomic()``: while the lock is held no other replica can claim, complete or
    fail the occurrence, so the handler's writes and the completion commit together or not
    at all. Returns ``False`` (and locks nothing) when the token is stale.
    """
    params = {"id": lease.occurrence_id, "token": lease.token, "owner": lease.owner}
    return bool(_named_rows(QUERIES["hold"], params))
