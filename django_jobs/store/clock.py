"""The database's clock, which every replica and interface aligns with (``SystemClock.align``)."""

from __future__ import annotations

from datetime import UTC, datetime

from ._sql import _named_rows, load_queries

QUERIES = load_queries("clock")


def database_clock() -> datetime:
    """PostgreSQL's wall clock right now (``clock_timestamp()``, not the frozen ``now()``)."""
    (row,) = _named_rows(QUERIES["database_clock"], {})
    return row.now.astimezone(UTC)  # type: ignore[no-any-return]
