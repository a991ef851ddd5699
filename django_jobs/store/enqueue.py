"""Enqueued work: the occurrence ``enqueue()`` writes, in the caller's transaction."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from psycopg.types.json import Jsonb

from ..scheduling.timing import check_instant
from ._sql import _named_rows, load_queries
from .replicas import CHANNEL

QUERIES = load_queries("enqueue")


@dataclass(frozen=True)
class EnqueueWrite:
    """What one enqueue writes (``None``: nothing, there is no policy record yet)."""

    created: bool  # False: the identity existed already (a key enqueued before)


def enqueue(
    occurrence_id: UUID,
    *,
    tenant: str,
    policy_key: str,
    at: datetime,
    args: dict[str, Any],
    priority: int | None,
) -> EnqueueWrite | None:
    """One occurrence of the policy record ``(tenant, policy_key)`` at ``at``, trigger
    ``enqueued``, and the NOTIFY that wakes replicas when the caller commits. One statement.
    ``None`` when there is no such record (the caller creates it and calls again); with an
    existing ``occurrence_id`` nothing changes (``created`` False). An ``at`` outside the
    window of instants (``timing.check_instant``) is refused (``InvalidTiming``), never
    written: a page renders every row."""
    params = {
        "id": occurrence_id,
        "tenant": tenant,
        "key": policy_key,
        "at": check_instant("at", at),
        "args": Jsonb(args),
        "priority": priority,
        "channel": CHANNEL,
        "reason": "enqueue",
    }
    (row,) = _named_rows(QUERIES["enqueue"], params)
    if not row.recorded:
        return None
    return EnqueueWrite(created=row.created)
