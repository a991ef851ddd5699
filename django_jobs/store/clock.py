"""The database-aligned clock: how far this host's clock is from PostgreSQL's."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from ..clock import ensure_aware_utc
from ._sql import _named_rows, load_queries

QUERIES = load_queries("clock")


def measure_clock_offset(local_now: datetime, local_after: datetime, db_now: datetime) -> timedelta:
    """The database clock minus this host's, from one round trip bracketed by local readings.

    Assumes the database read its clock half way through the round trip; the error is at most
    half the round trip.
    """
    midpoint = local_now + (local_after - local_now) / 2
    return ensure_aware_utc(db_now, name="db_now") - ensure_aware_utc(midpoint, name="local")


def database_clock() -> datetime:
    """PostgreSQL's wall clock right now (``clock_timestamp()``, not the frozen ``now()``)."""
    (row,) = _named_rows(QUERIES["database_clock"], {})
    return row.now.astimezone(UTC)  # type: ignore[no-any-return]
