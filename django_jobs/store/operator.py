"""Operator actions, called by ``django_jobs.services`` in its transaction: replay, cancel."""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from ..clock import ensure_aware_utc
from ._sql import ATT, OCC, SCH, _rows

# --- Operator actions (called by django_jobs.services, inside its transaction) ------------


def replay(occurrence: UUID, *, schedule_id: int, tenant: str, now: datetime) -> bool:
    """Make a finished occurrence due again now, as a manual trigger: its next claim is a new
    attempt (number N+1) of the same occurrence, with the same identity and scheduled instant.
    The retry budget starts afresh. Refused (``False``) while it is scheduled or processing,
    and unless it is an occurrence of ``schedule_id`` in ``tenant``: the service checked the
    permission on that schedule, so the write may touch nothing else."""
    sql = f"""
        UPDATE {OCC} SET state = 'scheduled', due_at = %(now)s, trigger = 'manual',
            skip_reason = '', finished_at = NULL, failures = 0
        WHERE id = %(id)s AND schedule_id = %(schedule)s AND tenant = %(tenant)s
          AND state IN ('dead', 'failed', 'skipped', 'completed', 'cancelled')
        RETURNING id
    """
    params = {
        "id": occurrence,
        "schedule": schedule_id,
        "tenant": tenant,
        "now": ensure_aware_utc(now, name="now"),
    }
    return bool(_rows(sql, params))


def cancel_running(schedule_id: int, *, tenant: str, now: datetime) -> list[UUID]:
    """Cancel the schedule's processing occurrences: their leases end here, so the replicas
    running them find renewal refused and stop; their attempts are recorded cancelled. Only
    occurrences of ``schedule_id`` in ``tenant`` (the schedule the service checked)."""
    sql = f"""
        WITH gone AS (
            UPDATE {OCC} SET state = 'cancelled', finished_at = %(now)s,
                lease_owner = '', lease_expires_at = NULL
            WHERE schedule_id = %(schedule)s AND tenant = %(tenant)s AND state = 'processing'
            RETURNING id, fencing_token
        ),
        ended AS (
            UPDATE {ATT} a SET outcome = 'cancelled', finished_at = %(now)s
            FROM gone WHERE a.occurrence_id = gone.id AND a.fencing_token = gone.fencing_token
              AND a.outcome = 'running'
        ),
        freed AS (
            UPDATE {SCH} SET running_occurrence = NULL
            WHERE id = %(schedule)s AND tenant = %(tenant)s
              AND running_occurrence IN (SELECT id FROM gone)
        )
        SELECT id FROM gone
    """
    params = {"schedule": schedule_id, "tenant": tenant, "now": ensure_aware_utc(now, name="now")}
    rows = _rows(sql, params)
    return [r[0] for r in rows]
