"""Stable occurrence identity: tenant + schedule key + scheduled instant in UTC.

The identity is a UUIDv5 over a canonical string, so every process on every replica derives
the same value for the same planned run, forever. It is the occurrence's primary key and the
idempotency key of the command its job dispatches: every retry and every replay reuses it.
"""

from __future__ import annotations

import json
import uuid
from datetime import datetime

from .clock import ensure_aware_utc

# Fixed forever: changing it would give every existing occurrence a new identity.
NAMESPACE = uuid.UUID("6f1c3f0e-5d7b-5b8e-9a51-3f2d1f6c9a10")


def canonical(tenant: str, schedule_key: str, scheduled_at: datetime) -> str:
    """The string the identity is derived from: one spelling per (tenant, key, instant)."""
    instant = ensure_aware_utc(scheduled_at, name="scheduled_at")
    # A JSON array quotes every part, so no tenant or key can run into its neighbour.
    parts = ["v1", tenant, schedule_key, instant.strftime("%Y-%m-%dT%H:%M:%S.%fZ")]
    return json.dumps(parts, ensure_ascii=True, separators=(",", ":"))


def occurrence_id(tenant: str, schedule_key: str, scheduled_at: datetime) -> uuid.UUID:
    """The identity of the occurrence of `schedule_key` (in `tenant`) planned at `scheduled_at`."""
    return uuid.uuid5(NAMESPACE, canonical(tenant, schedule_key, scheduled_at))


def enqueued_id(tenant: str, job: str, key: str) -> uuid.UUID:
    """The identity of the work ``enqueue(job, key=key, tenant=tenant)`` asks for: derived
    from (tenant, job, key), not from an instant, so enqueuing the same key again (at any
    time, for any instant) names the same occurrence. A schedule's identity includes its
    instant instead: each planned run is a new occurrence."""
    parts = ["v1-enqueue", tenant, job, key]
    return uuid.uuid5(NAMESPACE, json.dumps(parts, ensure_ascii=True, separators=(",", ":")))
