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


def wait_until(condition: Callable[[], bool], *, timeout: float = 30, what: str) -> None:
    """Poll ``condition`` until it holds; fail after ``timeout`` seconds. Never a fixed sleep."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
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
