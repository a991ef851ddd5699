"""Queues at scale (issue #36): R due occurrences of enqueued work (generated directly, all
due now), and what a replica's claim and wake-up lookup cost over them, in two layouts of the
same R rows, in one run:

(a) every row on one queue (``q0``);
(b) the rows spread over Q queues (``q0`` .. ``q{Q-1}``, interleaved: row n on queue n mod Q,
    R/Q each, as work of several queues arrives);
(c) the same R/Q each, in blocks of due instants, ``q0``'s due last: the other queues hold
    the older backlog, which a walk of an index in due or claim order filtered by queue
    reads through before it finds ``q0``'s first row.

In each layout, the claim as ``worker/claims.py`` makes it: ``store.claim_runs(queue="q0")``
for a ``runworker --queue q0`` replica, and ``store.claim_runs(other_queues=[])`` for a replica
serving every queue (no queue limited), a batch of B each time, rolled back so every sample
sees the same table (200, or as many as 30 s allow); its p50 and p95. The target: a claim of
one queue in (b) within 1.5x of the same claim in (a); (c) is the same ratio when the queues'
work is not interleaved.

And the wake-up lookup of an idle replica (``store.next_wakeup``, as ``worker/cadence.py``
calls it): one serving a queue with nothing in it (``idle``) while the other queues hold the
R rows; one serving ``q0``; one serving every queue.

The one policy record's ``max_delay`` is a year, so the backlog's rows are runs, not misfires
skipped by the claim. One claim of each kind is also explained (``auto_explain`` at NOTICE
level, ``ANALYZE`` and ``BUFFERS``: the plan of the statement ``claim_runs`` runs), and the
wake-up lookups: what each walks in the JSON (``walk_*``), the plans in a text file beside it
(``queues-plans-<R>.txt``)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from ..postgres import Database
from .bigtable import CHUNK
from .thundering import RESET, percentile

FILL = """
    INSERT INTO django_jobs_occurrence (
        id, schedule_id, tenant, scheduled_at, state, skip_reason, trigger, due_at,
        lease_owner, fencing_token, attempts, failures, last_error_type, last_error_message,
        args, priority, queue)
    SELECT gen_random_uuid(), %(schedule)s, '', t, 'scheduled', '', 'enqueued', t,
           '', 0, 0, 0, '', '', '{}', 0,
           'q' || CASE WHEN %(blocks)s THEN %(queues)s - 1 - n * %(queues)s / %(rows)s
                       ELSE n %% %(queues)s END
    FROM generate_series(%(low)s, %(high)s - 1) AS n,
         LATERAL (SELECT %(start)s::timestamptz + n * interval '1 millisecond' AS t) AS at
"""
IDLE = "idle"  # a queue with no rows, served by an idle replica


def _fill(db: Database, *, schedule: int, rows: int, queues: int, blocks: bool) -> float:
    """R due occurrences of ``schedule``, 1 ms apart, on ``queues`` queues (interleaved, or
    in ``blocks`` with ``q0``'s due last); seconds taken (the statistics refreshed, as
    autovacuum would have since)."""
    start = datetime.now(UTC) - timedelta(milliseconds=rows) - timedelta(minutes=1)
    filled_at = time.perf_counter()
    for first in range(0, rows, CHUNK):
        high = min(rows, first + CHUNK)
        params = {"schedule": schedule, "start": start, "low": first, "high": high}
        db.execute(FILL, {**params, "queues": queues, "rows": rows, "blocks": blocks})
    db.execute("VACUUM ANALYZE django_jobs_occurrence")
    seconds = time.perf_counter() - filled_at
    db.execute("CHECKPOINT")
    return seconds


def _claim(*, batch: int, queue: str | None) -> Any:
    """One claim, as a replica makes it: of ``queue`` (``--queue``) or of every queue."""
    from django_jobs import store

    return store.claim_runs(
        owner="bench",
        now=datetime.now(UTC),
        lease_for=timedelta(seconds=30),
        limit=batch,
        start_now=batch,
        queue=queue,
        other_queues=[],
    )


def _claims(*, batch: int, queue: str | None, samples: int, budget: float) -> list[float]:
    """Seconds per claim, each rolled back (every sample sees the same table): ``samples``
    of them, or as many as ``budget`` seconds allow (at least 3)."""
    from django.db import transaction

    times: list[float] = []
    deadline = time.perf_counter() + budget
    while len(times) < samples and (len(times) < 3 or time.perf_counter() < deadline):
        with transaction.atomic():
            started = time.perf_counter()
            claimed = _claim(batch=batch, queue=queue)
            times.append(time.perf_counter() - started)
            if len(claimed.runs) != batch:
                raise RuntimeError(f"claim of {queue or 'every queue'} took {len(claimed.runs)}")
            transaction.set_rollback(True)
    return times


def _wakeups(queues: Sequence[str] | None, *, samples: int, budget: float) -> list[float]:
    """Seconds per ``next_wakeup`` of a replica serving ``queues``: ``samples`` of them, or
    as many as ``budget`` seconds allow (at least 3)."""
    from django_jobs import store

    times: list[float] = []
    deadline = time.perf_counter() + budget
    while len(times) < samples and (len(times) < 3 or time.perf_counter() < deadline):
        started = time.perf_counter()
        store.next_wakeup(now=datetime.now(UTC), queues=queues)
        times.append(time.perf_counter() - started)
    return times


def _explained(call: Callable[[], Any], marker: str) -> list[str]:
    """The plan (``EXPLAIN ANALYZE``, with buffers) of the statement containing ``marker``
    that ``call`` runs, read from auto_explain's notice; rolled back."""
    from django.db import connection, transaction

    notices: list[str] = []
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("LOAD 'auto_explain'")
            for name, value in (
                ("log_min_duration", "0"),
                ("log_analyze", "on"),
                ("log_buffers", "on"),
                ("log_timing", "on"),
                ("log_level", "notice"),
            ):
                cursor.execute(f"SET LOCAL auto_explain.{name} = {value}")
        raw = connection.connection

        def heard(diagnostic: Any) -> None:
            notices.append(diagnostic.message_primary or "")

        raw.add_notice_handler(heard)
        try:
            call()
        finally:
            raw.remove_notice_handler(heard)
        transaction.set_rollback(True)
    plans = [n for n in notices if marker in n]
    if not plans:
        return []
    # auto_explain's text begins with the query; the plan starts at its first node.
    lines = plans[-1].splitlines()
    first = next((i for i, line in enumerate(lines) if "(actual" in line), 0)
    return lines[first:]


def _walk(plan: list[str]) -> str:
    """What the plan's first scan of the occurrence table reads: its node, and the rows its
    filter removed."""
    for i, line in enumerate(plan):
        if "Scan" in line and " o " in f"{line} " and "django_jobs_occurrence" in line:
            node = line.strip().removeprefix("->  ")
            node = node[: node.index("  (cost")] if "  (cost" in node else node
            actual = line[line.index("(actual") :] if "(actual" in line else ""
            rows = actual.split("rows=")[1].split()[0] if "rows=" in actual else "?"
            removed = next(
                (
                    n.strip().removeprefix("Rows Removed by Filter: ")
                    for n in plan[i + 1 : i + 6]
                    if "Rows Removed by Filter" in n
                ),
                "0",
            )
            return f"{node}: {rows} rows, {removed} removed by filter"
    return "?"


def _ms(values: list[float], p: float) -> float:
    return (percentile(values, p) or 0) * 1000


def _layout(
    db: Database,
    *,
    rows: int,
    queues: int,
    batch: int,
    samples: int,
    schedule: int,
    plans: Path | None,
    blocks: bool = False,
) -> dict[str, Any]:
    """One layout's figures: the fill, the claims, the wake-up lookups; what each plan's
    first scan of the occurrence table reads (the whole plans in ``plans``, a text file)."""
    db.execute("TRUNCATE django_jobs_occurrence CASCADE")
    fill = _fill(db, schedule=schedule, rows=rows, queues=queues, blocks=blocks)
    one = _claims(batch=batch, queue="q0", samples=samples, budget=30)
    every = _claims(batch=batch, queue=None, samples=samples, budget=30)
    idle = _wakeups([IDLE], samples=50, budget=20)
    served = _wakeups(["q0"], samples=50, budget=20)
    all_queues = _wakeups(None, samples=50, budget=20)
    explained = _plans(batch=batch)
    if plans is not None:
        plans.parent.mkdir(parents=True, exist_ok=True)
        with plans.open("a") as out:
            for name, plan in explained.items():
                how = " in blocks" if blocks else ""
                out.write(f"## {rows} rows on {queues} queue(s){how}: {name}\n\n")
                out.write("\n".join(plan) + "\n\n")
    return {
        "fill_s": fill,
        "claim_q0_p50_ms": _ms(one, 50),
        "claim_q0_p95_ms": _ms(one, 95),
        "claim_q0_samples": len(one),
        "claim_every_p50_ms": _ms(every, 50),
        "claim_every_p95_ms": _ms(every, 95),
        "wakeup_idle_p50_ms": _ms(idle, 50),
        "wakeup_idle_p95_ms": _ms(idle, 95),
        "wakeup_idle_samples": len(idle),
        "wakeup_q0_p50_ms": _ms(served, 50),
        "wakeup_every_p50_ms": _ms(all_queues, 50),
        **{f"walk_{name}": _walk(plan) for name, plan in explained.items()},
    }


def _plans(*, batch: int) -> dict[str, list[str]]:
    """The plans of one claim of ``q0``, of every queue, and of the idle wake-up lookup."""
    return {
        "claim_q0": _explained(lambda: _claim(batch=batch, queue="q0"), "WITH due AS"),
        "claim_every": _explained(lambda: _claim(batch=batch, queue=None), "WITH due AS"),
        "wakeup_idle": _explained(lambda: _wakeups([IDLE], samples=1, budget=0), "LEAST"),
        "wakeup_q0": _explained(lambda: _wakeups(["q0"], samples=1, budget=0), "LEAST"),
    }


def run(
    db: Database,
    *,
    rows: int,
    queues: int = 10,
    batch: int = 24,
    samples: int = 200,
    plans: Path | None = None,
) -> dict[str, Any]:
    """Both layouts of ``rows`` due rows; the plans appended to ``plans`` (a text file)."""
    from django_jobs import enqueue

    db.execute(RESET)
    enqueue("perf.noop")  # the job's policy record
    db.execute("UPDATE django_jobs_schedule SET max_delay = interval '365 days'")
    ((schedule,),) = db.rows("SELECT id FROM django_jobs_schedule WHERE key = '@perf.noop'")
    if plans is not None and plans.exists():
        plans.unlink()
    kwargs = dict(rows=rows, batch=batch, samples=samples, schedule=schedule, plans=plans)
    one = _layout(db, queues=1, **kwargs)
    spread = _layout(db, queues=queues, **kwargs)
    blocks = _layout(db, queues=queues, blocks=True, **kwargs)
    found: dict[str, Any] = {
        "scenario": "queues: claim over a due backlog",
        "due_rows": rows,
        "queues": queues,
        "claim_batch": batch,
    }
    for name, layout in (("one", one), (f"{queues}q", spread), (f"{queues}q_blocks", blocks)):
        found |= {f"{key}_{name}": value for key, value in layout.items()}
    a50, a95 = one["claim_q0_p50_ms"], one["claim_q0_p95_ms"]
    found["q0_p50_ratio"] = spread["claim_q0_p50_ms"] / a50 if a50 else None
    found["q0_p95_ratio"] = spread["claim_q0_p95_ms"] / a95 if a95 else None
    found["every_p50_ratio"] = spread["claim_every_p50_ms"] / a50 if a50 else None
    found["every_p95_ratio"] = spread["claim_every_p95_ms"] / a95 if a95 else None
    found["blocks_q0_p50_ratio"] = blocks["claim_q0_p50_ms"] / a50 if a50 else None
    found["blocks_q0_p95_ratio"] = blocks["claim_q0_p95_ms"] / a95 if a95 else None
    return found
