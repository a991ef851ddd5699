"""Steps of ``run.once()``: what an occurrence already did, across attempts."""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from ..clock import ensure_aware_utc
from ._sql import OCC, STEP, _rows
from .records import Lease

# --- Steps of run.once(), replicas, wake-ups ----------------------------------------------


def step_done(occurrence: UUID, name: str) -> bool:
    """Whether ``run.once(name)`` already happened for this occurrence (any attempt)."""
    sql = f"SELECT EXISTS (SELECT 1 FROM {STEP} WHERE occurrence_id = %(o)s AND name = %(n)s)"
    return bool(_rows(sql, {"o": occurrence, "n": name})[0][0])


def record_step(lease: Lease, name: str, *, now: datetime) -> bool:
    """Record that step ``name`` happened, only while ``lease`` is current. One statement.

    Returns ``False`` when the token is stale (nothing recorded) or the step was recorded
    already.
    """
    sql = f"""
        INSERT INTO {STEP} (occurrence_id, name, fencing_token, done_at)
        SELECT o.id, %(name)s, o.fencing_token, %(now)s FROM {OCC} o
        WHERE o.id = %(id)s AND o.fencing_token = %(token)s
          AND o.lease_owner = %(owner)s AND o.state = 'processing'
        ON CONFLICT (occurrence_id, name) DO NOTHING
        RETURNING id
    """
    params = {
        "id": lease.occurrence_id,
        "token": lease.token,
        "owner": lease.owner,
        "name": name,
        "now": ensure_aware_utc(now, name="now"),
    }
    return bool(_rows(sql, params))
