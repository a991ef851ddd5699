"""Operator actions, called by ``django_jobs.services`` in its transaction: replay, cancel
(a schedule's running occurrences, or one occurrence)."""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from ..clock import ensure_aware_utc
from ._sql import _named_rows, load_queries

QUERIES = load_queries("operator")


def replay(occurrence: UUID, *, schedule_id: int, tenant: str, now: datetime) -> bool:
    """Make a finished occurrence due again now, as a manual trigger: its next claim is a new
    attempt (number N+1) of the same occurrence, with the same identity and scheduled instant.
    The retry budget starts afresh. Refused (``False``) while it is scheduled or processing,
    and unless it is an occurrence of ``schedule_id`` in ``tenant``: the service checked the
    permission on that schedule, so the write may touch nothing else."""
    params = {
        "id": occurrence,
        "schedule": schedule_id,
        "tenant": tenant,
        "now": ensure_aware_utc(now, name="now"),
    }
    return bool(_named_rows(QUERIES["replay"], params))


def cancel_running(schedule_id: int, *, tenant: str, now: datetime) -> list[UUID]:
    """Cancel the schedule's processing occurrences: their leases end here, so the replicas
    running them find renewal refused and stop; their attempts are recorded cancelled. Only
    occurrences of ``schedule_id`` in ``tenant`` (the schedule the service checked)."""
    params = {"schedule": schedule_id, "tenant": tenant, "now": ensure_aware_utc(now, name="now")}
    return [row.id for row in _named_rows(QUERIES["cancel_running"], params)]


def cancel_occurrence(occurrence: UUID, *, schedule_id: int, tenant: str, now: datetime) -> bool:
    """Cancel one unfinished occurrence: waiting (scheduled, or failed and waiting for a
    retry), it will not run; processing, its lease ends here and the replica running it
    stops at its next renewal. Refused (``False``) once it has finished, and unless it is an
    occurrence of ``schedule_id`` in ``tenant``."""
    params = {
        "id": occurrence,
        "schedule": schedule_id,
        "tenant": tenant,
        "now": ensure_aware_utc(now, name="now"),
    }
    return bool(_named_rows(QUERIES["cancel_occurrence"], params))
