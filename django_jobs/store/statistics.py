"""Statistics: the planner's picture of the occurrence table, refreshed once a plan pass (or
several) inserted a large share of it.

A burst is planned ahead of its instant (``PLAN_AHEAD_SECONDS``, 30 s by default), sooner than
autovacuum analyzes the table (``autovacuum_naptime``, a minute by default). Until it does,
the planner sizes the partial indexes on ``state`` by the statistics of before the burst: a
handful of rows where there are thousands. Then the statements of the burst read every live
row for a few: a completion of 9 leases walked the 10,000 entries of the live index (13 ms,
against under 1 ms by primary key), and so did the wake-up lookups. ``refresh_statistics``
analyzes the table once the rows planned since its last refresh reach a tenth of its
estimated size (at least ``REFRESH_AT_LEAST``), the threshold autovacuum applies, but at once.
"""

from __future__ import annotations

from psycopg import sql

from ._sql import TABLES, _execute, _named_rows, load_queries

# Fewer planned rows than this never refresh the statistics: a small plan changes little.
REFRESH_AT_LEAST = 1000
# The share of the table's estimated rows that, planned since the last refresh, refreshes it
# (autovacuum's default autovacuum_analyze_scale_factor).
REFRESH_SHARE = 0.1

QUERIES = load_queries(
    "statistics",
    occurrence_table=sql.Literal(TABLES["occurrence"]).as_string(None),
)


def refresh_statistics(*, planned: int) -> bool:
    """Analyze the occurrence table if ``planned`` rows (inserted since the caller's last
    refresh) are at least ``REFRESH_AT_LEAST`` and a tenth of its estimated rows. Return
    whether it was analyzed (or left to an analysis already under way: ``SKIP_LOCKED``), so
    the caller counts afresh. Two statements at most, outside any statement of the plan."""
    if planned < REFRESH_AT_LEAST:
        return False
    (row,) = _named_rows(QUERIES["estimated_occurrences"], {})
    if planned < REFRESH_SHARE * row.estimated:
        return False
    _execute(QUERIES["analyze_occurrences"], {})
    return True
