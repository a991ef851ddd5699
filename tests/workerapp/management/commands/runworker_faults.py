"""``manage.py runworker_faults``: ``runworker`` with one kind of its own store statements made to
fail. TEST-ONLY.

``JOBS_TEST_FAULT=<statement>:<error>:<times>`` (``times``: a count, or ``always``) makes the
worker's next ``times`` calls of that statement fail before they run:

- statements: ``renew`` (the lease keeper), ``claim``, ``heartbeat``, ``plan`` (the loop),
  ``complete`` (the completer), ``retention`` (the retention thread);
- errors: ``outage`` (the call's own backend is terminated: PostgreSQL's own 57P01 on the
  connection, as a restart or a cut network gives), ``database`` (a real statement the server
  refuses: division by zero, 22012, an error that is not an outage), ``python`` (a
  ``RuntimeError``: a bug), ``hang`` (the statement waits on the server, ``pg_sleep``, for
  ``JOBS_TEST_HANG_SECONDS`` (default 120): a store call that does not return, as a lock
  wait gives).

Every error comes from the real server or the real interpreter; nothing about the store is
faked. Never use it outside the test suite.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any

from django.core.management.base import CommandError
from django.db import connection

from django_jobs import store
from django_jobs.management.commands.runworker import Command as RunWorker

FAULT = "JOBS_TEST_FAULT"

# Which store function each statement kind is (the first one the worker calls for it).
STATEMENTS = {
    "renew": "renew",
    "claim": "claim_runs",
    "heartbeat": "heartbeat",
    "plan": "read_plan_batch",
    "complete": "complete",
    "retention": "try_retention_lock",
}
ERRORS = ("outage", "database", "python", "hang")
HANG = "JOBS_TEST_HANG_SECONDS"


def fail(error: str, statement: str) -> None:
    """Raise the error of kind ``error`` from the real server or interpreter."""
    if error == "python":
        raise RuntimeError(f"fault injected by the test into {statement}")
    sql = {
        "outage": "SELECT pg_terminate_backend(pg_backend_pid())",
        "hang": f"SELECT pg_sleep({float(os.environ.get(HANG, '120'))})",
    }.get(error, "SELECT 1 / 0")
    with connection.cursor() as cursor:
        cursor.execute(sql)


def install(spec: str) -> None:
    statement, error, times = spec.split(":")
    if statement not in STATEMENTS or error not in ERRORS:
        raise CommandError(f"{FAULT}={spec!r}: <{'|'.join(STATEMENTS)}>:<{'|'.join(ERRORS)}>:<n>")
    left = [-1 if times == "always" else int(times)]
    lock = threading.Lock()
    name = STATEMENTS[statement]
    real: Callable[..., Any] = getattr(store, name)

    def faulty(*args: Any, **kwargs: Any) -> Any:
        with lock:
            armed = left[0] != 0
            if left[0] > 0:
                left[0] -= 1
        if armed:
            fail(error, statement)
        return real(*args, **kwargs)

    setattr(store, name, faulty)


class Command(RunWorker):
    help = "runworker with one kind of its store statements failing (tests only)."

    def handle(self, *args: Any, **options: Any) -> None:
        if spec := os.environ.get(FAULT):
            install(spec)
        super().handle(*args, **options)
