"""The test application's commands that use the database session itself.

What the misbehaving-job handlers dispatch: a read that a store outage breaks, session state
left behind on the run thread's connection, and a look at what a later run finds there.
"""

from __future__ import annotations

from typing import Any

from django.db import connection
from psycopg import sql

# Session state a careless handler leaves on its connection: each survives its transaction.
LEAKS = (
    "SET myapp.leak = 'x'",
    "SET TIME ZONE 'Asia/Kathmandu'",
    "SET application_name = 'leaked'",
    "CREATE TEMP TABLE leak_tmp (x int)",
    "SELECT pg_advisory_lock(4242)",
    "LISTEN leak_channel",
    "PREPARE leak_stmt AS SELECT 1",
)

# What a later run on the same connection would inherit, one query each.
OBSERVATIONS = {
    "setting": "SELECT current_setting('myapp.leak', true)",
    "temp_table": "SELECT to_regclass('pg_temp.leak_tmp') IS NOT NULL",
    "advisory_locks": (
        "SELECT count(*) FROM pg_locks WHERE pid = pg_backend_pid() AND locktype = 'advisory'"
    ),
    "channels": "SELECT coalesce(array_agg(c ORDER BY c), '{}') FROM pg_listening_channels() c",
    "prepared_statements": "SELECT count(*) FROM pg_prepared_statements",
    "application_name": "SELECT current_setting('application_name')",
    "time_zone": "SELECT current_setting('TimeZone')",
    "current_user": "SELECT current_user::text",
    "session_user": "SELECT session_user::text",
}


def ping() -> None:
    """One round trip to the database on this thread's connection."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")


def leak_session_state(role: str | None) -> None:
    """Leave every kind of session state on this thread's connection; last, switch to
    ``role`` (when given) so the session no longer runs as the user it logged in as."""
    with connection.cursor() as cursor:
        for statement in LEAKS:
            cursor.execute(statement)
        if role:
            cursor.execute(sql.SQL("SET ROLE {}").format(sql.Identifier(role)))


def session_state() -> dict[str, Any]:
    """What this thread's connection carries, as ``OBSERVATIONS`` names it."""
    seen = {}
    with connection.cursor() as cursor:
        for name, query in OBSERVATIONS.items():
            cursor.execute(query)
            seen[name] = cursor.fetchone()[0]
    return seen


def end_own_session() -> None:
    """Terminate this connection's own backend, as a query that crashes its backend or trips a
    session-killing timeout does (``proc.query_of_death``)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(pg_backend_pid())")
