"""Steps of ``run.once()``: what an occurrence already did, across attempts."""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from ..clock import ensure_aware_utc
from ._sql import _named_rows, load_queries
from .records import Lease

QUERIES = load_queries("steps")


def step_done(occurrence: UUID, name: str) -> bool:
    """Whether ``run.once(name)`` already happened for this occurrence (any attempt)."""
    (row,) = _named_rows(QUERIES["step_done"], {"occurrence": occurrence, "name": name})
    return bool(row.done)


def record_step(lease: Lease, name: str, *, now: datetime) -> bool:
    """Record that step ``name`` happened, only while ``lease`` is current. One statement.

    Returns ``False`` when the token is stale (nothing recorded) or the step was recorded
    already.
    """
    params = {
        "id": lease.occurrence_id,
        "token": lease.token,
        "owner": lease.owner,
        "name": name,
        "now": ensure_aware_utc(now, name="now"),
    }
    return bool(_named_rows(QUERIES["record_step"], params))
