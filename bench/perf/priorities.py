"""Priority at scale: a backlog of R due occurrences (enqueued work, generated directly), and
the claim's latency over it, first with every row at priority 0, then with priorities spread
from -100 to 100; the ratio in the same run. Every claim is rolled back, so every sample sees
the same table. The claim walks the claim-order index (``django_jobs_occurrence_claim``) in
order and stops after its batch: its cost should not grow with R nor with the spread."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

from ..postgres import Database
from .bigtable import CHUNK, _claim_latency
from .thundering import RESET, percentile

FILL = """
    INSERT INTO django_jobs_occurrence (
        id, schedule_id, tenant, scheduled_at, state, skip_reason, trigger, due_at,
        lease_owner, fencing_token, attempts, failures, last_error_type, last_error_message,
        args, priority)
    SELECT gen_random_uuid(), %(schedule)s, '', t, 'scheduled', '', 'enqueued', t,
           '', 0, 0, 0, '', '', '{}', 0
    FROM generate_series(%(low)s, %(high)s - 1) AS n,
         LATERAL (SELECT %(start)s::timestamptz + n * interval '1 millisecond' AS t) AS at
"""


def run(db: Database, *, rows: int, batch: int = 24, samples: int = 200) -> dict[str, Any]:
    from django_jobs import enqueue

    db.execute(RESET)
    enqueue("perf.noop")  # the job's policy record (and one row)
    ((schedule,),) = db.rows("SELECT id FROM django_jobs_schedule WHERE key = '@perf.noop'")
    now = datetime.now(UTC)
    start = now - timedelta(milliseconds=rows) - timedelta(minutes=1)  # every row due now
    filled_at = time.perf_counter()
    for first in range(0, rows, CHUNK):
        db.execute(
            FILL,
            {"schedule": schedule, "start": start, "low": first, "high": min(rows, first + CHUNK)},
        )
    db.execute("VACUUM ANALYZE django_jobs_occurrence")
    fill_seconds = time.perf_counter() - filled_at
    db.execute("CHECKPOINT")
    uniform = _claim_latency(batch, samples)
    db.execute(
        "UPDATE django_jobs_occurrence SET priority = (random() * 200)::int - 100"
        " WHERE trigger = 'enqueued'"
    )
    db.execute("VACUUM ANALYZE django_jobs_occurrence")
    db.execute("CHECKPOINT")
    spread = _claim_latency(batch, samples)
    (top,) = db.rows("SELECT count(*) FILTER (WHERE priority >= 90) FROM django_jobs_occurrence")[
        0:1
    ]
    u50, u99 = percentile(uniform, 50) or 0, percentile(uniform, 99) or 0
    s50, s99 = percentile(spread, 50) or 0, percentile(spread, 99) or 0
    return {
        "scenario": "priority: claim over a due backlog",
        "due_rows": rows,
        "claim_batch": batch,
        "fill_s": fill_seconds,
        "claim_p50_ms_uniform": u50 * 1000,
        "claim_p50_ms_spread": s50 * 1000,
        "p50_ratio": s50 / u50 if u50 else None,
        "claim_p99_ms_uniform": u99 * 1000,
        "claim_p99_ms_spread": s99 * 1000,
        "p99_ratio": s99 / u99 if u99 else None,
        "rows_at_priority_90_or_more": top[0],
    }
