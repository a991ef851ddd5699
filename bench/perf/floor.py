"""The SQL floor of a burst: the least a fenced claim and completion write, on our own tables.

S occurrences of one schedule, planned before the clock starts (as ``PLAN_AHEAD_SECONDS``
plans a burst), taken by W processes x C threads, each thread on its own connection (the clock
starts once all have connected) doing nothing but: claim up to B due rows (``FOR UPDATE SKIP
LOCKED``; state, lease, token and attempt count written), commit; complete them, each checked
against its token, commit. No handler, no Python beyond the loop, no planner settings. With
``attempts`` (``ATTEMPT_ROWS``): ``none``; ``at claim``, one Attempt inserted per claim and
ended at completion, as the worker did before #38; ``at end``, one Attempt inserted by the
completion, as the worker does since (the attempt lives on the occurrence row until it ends).

It is not a design: it leaves out what the worker must do (overlap guards, lost attempts,
forged rows, the kill switch, values Python cannot load, timeouts). It says how fast this
machine's PostgreSQL can go through a burst at all with one row per occurrence, so a target
for the real path can be read against it.
"""

from __future__ import annotations

import multiprocessing
import threading
import time
from typing import Any

import psycopg

from ..postgres import Database
from .measure import Counters

CLAIM = """
UPDATE django_jobs_occurrence o SET state = 'processing', lease_owner = %(owner)s,
    lease_expires_at = now() + interval '60 s', due_at = now() + interval '60 s',
    fencing_token = o.fencing_token + 1, attempts = o.attempts + 1, started_at = now()
WHERE o.id IN (SELECT id FROM django_jobs_occurrence
               WHERE state IN ('scheduled', 'failed', 'processing') AND due_at <= now()
               ORDER BY due_at LIMIT %(batch)s FOR UPDATE SKIP LOCKED)
RETURNING o.id, o.fencing_token"""
START = """
INSERT INTO django_jobs_attempt (occurrence_id, number, fencing_token, replica, trigger,
    started_at, outcome, error_type, error_message)
SELECT id, 1, token, %(owner)s, 'schedule', now(), 'running', '', ''
FROM unnest(%(ids)s::uuid[], %(tokens)s::bigint[]) AS t(id, token)"""
COMPLETE = """
UPDATE django_jobs_occurrence o SET state = 'completed', finished_at = now(), lease_owner = '',
    lease_expires_at = NULL
FROM unnest(%(ids)s::uuid[], %(tokens)s::bigint[]) AS t(id, token)
WHERE o.id = t.id AND o.fencing_token = t.token AND o.state = 'processing'"""
# The history row written once, with the completion (#38).
ENDED = """
INSERT INTO django_jobs_attempt (occurrence_id, number, fencing_token, replica, trigger,
    started_at, finished_at, outcome, error_type, error_message)
SELECT id, 1, token, %(owner)s, 'schedule', now(), now(), 'succeeded', '', ''
FROM unnest(%(ids)s::uuid[], %(tokens)s::bigint[]) AS t(id, token)"""
ATTEMPT_ROWS = ("none", "at claim", "at end")
END_ATTEMPT = """
UPDATE django_jobs_attempt a SET outcome = 'succeeded', finished_at = now()
FROM unnest(%(ids)s::uuid[], %(tokens)s::bigint[]) AS t(id, token)
WHERE a.occurrence_id = t.id AND a.fencing_token = t.token"""
PLAN = """
INSERT INTO django_jobs_occurrence (id, schedule_id, tenant, scheduled_at, state, skip_reason,
    trigger, due_at, lease_owner, fencing_token, attempts, failures, last_error_type,
    last_error_message)
SELECT gen_random_uuid(), %(schedule)s, '', now() - g * interval '1 microsecond', 'scheduled',
       '', 'schedule', now(), '', 0, 0, 0, '', ''
FROM generate_series(1, %(count)s) AS g"""


def _thread(url: str, owner: str, batch: int, attempts: str, ready: Any) -> None:
    with psycopg.connect(url, autocommit=True, application_name=f"perf-{owner}") as conn:
        ready.wait()  # every thread connected: the clock starts
        while True:
            with conn.transaction():
                rows = conn.execute(CLAIM, {"owner": owner, "batch": batch}).fetchall()
                taken = {"ids": [r[0] for r in rows], "tokens": [r[1] for r in rows]}
                if rows and attempts == "at claim":
                    conn.execute(START, {**taken, "owner": owner})
            if not rows:
                return
            with conn.transaction():
                conn.execute(COMPLETE, taken)
                if attempts == "at claim":
                    conn.execute(END_ATTEMPT, taken)
                elif attempts == "at end":
                    conn.execute(ENDED, {**taken, "owner": owner})


def _process(url: str, name: str, threads: int, batch: int, attempts: str, ready: Any) -> None:
    running = [
        threading.Thread(target=_thread, args=(url, f"{name}-{n}", batch, attempts, ready))
        for n in range(threads)
    ]
    for thread in running:
        thread.start()
    for thread in running:
        thread.join()


def run(
    db: Database, *, schedules: int, replicas: int, concurrency: int, batch: int, attempts: str
) -> dict[str, Any]:
    from django.db import connection

    from .thundering import RESET, add_schedules, completed

    db.execute(RESET)
    add_schedules(1, job="perf.noop", due=db_now(db), prefix="perf.floor")
    ((schedule,),) = db.rows("SELECT id FROM django_jobs_schedule")
    db.execute(PLAN, {"schedule": schedule, "count": schedules})
    db.execute("VACUUM ANALYZE django_jobs_occurrence")
    connection.close()
    spawn = multiprocessing.get_context("spawn")
    # The clock starts once every process has started and every thread has connected.
    ready = spawn.Barrier(replicas * concurrency + 1)
    processes = [
        spawn.Process(target=_process, args=(db.url, f"f{n}", concurrency, batch, attempts, ready))
        for n in range(replicas)
    ]
    for process in processes:
        process.start()
    before = Counters.read(db, [])
    ready.wait()
    began = time.monotonic()
    for process in processes:
        process.join()
    took = time.monotonic() - began
    spent = Counters.read(db, []) - before
    done = completed(db)
    return {
        "scenario": f"SQL floor (Attempt rows: {attempts})",
        "schedules": schedules,
        "replicas": replicas,
        "concurrency": concurrency,
        "batch": batch,
        "makespan_s": took,
        "per_second": done / took,
        "completed": done,
        "commits_per_occurrence": spent.commits / schedules,
        "wal_bytes_per_occurrence": spent.wal_bytes / schedules,
        "row_versions_per_occurrence": spent.row_versions / schedules,
    }


def db_now(db: Database) -> Any:
    ((now,),) = db.rows("SELECT now()")
    return now


__all__ = ["run"]
