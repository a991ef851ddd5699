"""Running store calls on several real PostgreSQL connections at once.

Django gives every thread its own connection, so each thread here is a separate session of
the server: locks, SKIP LOCKED and ON CONFLICT behave as they do between worker replicas.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from django.db import connection, connections

T = TypeVar("T")


def on_own_connection(fn: Callable[[], T]) -> Callable[[], T]:
    def run() -> T:
        try:
            return fn()
        finally:
            connections.close_all()

    return run


def run_together(*fns: Callable[[], T]) -> list[T]:
    """Run each function on its own thread and connection, released together by a barrier."""
    barrier = threading.Barrier(len(fns))

    def released(fn: Callable[[], T]) -> Callable[[], T]:
        def run() -> T:
            barrier.wait(timeout=30)
            return fn()

        return on_own_connection(run)

    with ThreadPoolExecutor(max_workers=len(fns)) as pool:
        futures = [pool.submit(released(fn)) for fn in fns]
        return [f.result(timeout=120) for f in futures]


def wait_until(
    condition: Callable[[], bool], *, timeout: float = 30, what: str | Callable[[], str]
) -> None:
    """Poll ``condition`` until it holds; fail after ``timeout`` seconds. Never a fixed sleep.
    ``what`` may be a callable, called at the failure: a log tail then shows the wait's end,
    not its start."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            said = what() if callable(what) else what
            raise AssertionError(f"timed out after {timeout}s waiting for {said}")
        time.sleep(0.01)


def wait_while_progressing(
    condition: Callable[[], bool],
    progress: Callable[[], object],
    *,
    stall: float = 60,
    ceiling: float = 900,
    what: str,
) -> None:
    """Poll ``condition`` until it holds, for work the worker does in bounded passes: a loaded
    machine makes each pass do less, so the whole takes longer, but it never stops. Fail when
    ``progress()`` (what the work has reached) has not changed for ``stall`` seconds, or after
    ``ceiling`` seconds in all. Never a fixed sleep."""
    began = time.monotonic()
    reached, moved = progress(), began
    while not condition():
        now = time.monotonic()
        if (latest := progress()) != reached:
            reached, moved = latest, now
        if now - moved > stall or now - began > ceiling:
            raise AssertionError(
                f"no progress for {now - moved:.0f}s ({now - began:.0f}s in all, reached"
                f" {reached!r}) waiting for {what}"
            )
        time.sleep(0.01)


def backends_waiting_on_locks() -> int:
    """How many other sessions of this database are blocked waiting for a lock."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND wait_event_type = 'Lock'"
            " AND pid <> pg_backend_pid()"
        )
        return int(cursor.fetchone()[0])


def cut_off_from_the_store() -> None:
    """From a job's handler, on the run thread: a store outage as the worker sees it. The test
    database refuses new connections (``ALLOW_CONNECTIONS false``, superusers included) and the
    handler's own backend is terminated; connections are allowed again once the worker has
    dropped its connection for the outage (``outage.OUTAGES``), so its give-back goes through.

    Ending only the run's own session, while the store answers, is the job's failure: this is
    what makes it an outage instead.
    """
    from psycopg import sql

    from django_jobs.worker.outage import OUTAGES

    seen = OUTAGES.value
    name = connection.settings_dict["NAME"]
    params = {**connection.get_connection_params(), "dbname": "postgres"}
    for key in ("cursor_factory", "context", "prepare_threshold", "server_side_binding"):
        params.pop(key, None)

    def allow(allowed: bool) -> None:
        import psycopg

        with psycopg.connect(**params, autocommit=True) as admin:
            statement = sql.SQL("ALTER DATABASE {} WITH ALLOW_CONNECTIONS {}")
            admin.execute(statement.format(sql.Identifier(name), sql.Literal(allowed)))

    def allow_once_seen() -> None:
        try:
            wait_until(lambda: OUTAGES.value > seen, timeout=30, what="the worker to see it")
        finally:
            allow(True)

    allow(False)
    threading.Thread(target=allow_once_seen, daemon=True).start()
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(pg_backend_pid())")
