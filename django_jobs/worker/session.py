"""The run thread's database session around a run: checked before, cleaned after.

Before a run, the thread's connection is checked (``keep_or_close_connection``). While the
handler runs, ``SessionUse`` watches the statements it sends on the store's connection. After
it, a transaction the handler left open is rolled back (``drop_leaked_transaction``), and a
session the handler used is reset (``reset_session``), so no session state crosses runs.
Whether the store's connection broke during the run (``store_unreachable``) decides whether a
handler's error is the store's outage or the job's own failure.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import psycopg
from django.db import DEFAULT_DB_ALIAS, connection, connections
from psycopg.sql import SQL, Literal

from .outage import OUTAGES, is_store_outage
from .wakeup import conninfo_from_django

# The outage count (``OUTAGES.value``) each run thread last saw.
_seen = threading.local()


class SessionUse:
    """An execute wrapper on the store's connection: whether the handler sent anything on it
    (its session then needs a reset), which server it was on, and whether a statement failed
    because the connection broke (terminated, reset, the server gone): that may be the store's
    outage, not the job's (``store_answers`` decides)."""

    used = False
    broke = False
    server: tuple[str, int] | None = None  # host and port of the run's connection

    def __call__(self, execute: Callable[..., Any], *args: Any) -> Any:
        if not self.used:
            self.used = True
            self.server = _server(args[-1].get("connection"))
        try:
            return execute(*args)
        except Exception as exc:
            self.broke = self.broke or is_store_outage(exc)
            raise


def _server(wrapper: Any) -> tuple[str, int] | None:
    """The host and port a Django connection is connected to, if it is."""
    try:
        info = wrapper.connection.info
        return info.host, info.port
    except Exception:  # not connected yet, or already broken: any server will do
        return None


def keep_or_close_connection() -> None:
    """Check this run thread's connection between runs: closed if a run left it broken (an
    error made it unusable, or autocommit was left off) or if a thread of the replica met a
    store outage since this thread last looked (``outage.OUTAGES``: after a failover an idle
    connection may lead to a dead server or one that no longer takes writes), kept for the
    next run otherwise: one comparison, no round trip.

    Run threads belong to the worker, so ``CONN_MAX_AGE`` (a setting for request handling,
    which defaults to closing after every request) does not apply to them: reconnecting for
    every run cost a connection and a ``set_config`` per occurrence.
    """
    connection.close_at = None
    outages = OUTAGES.value
    if getattr(_seen, "outages", 0) != outages:
        _seen.outages = outages
        connection.close()
        return
    connection.close_if_unusable_or_obsolete()


# What ``DISCARD ALL`` does, statement by statement: ``DISCARD ALL`` itself cannot share a
# round trip with the session setup that must follow it (it refuses to run in the implicit
# transaction of a multi-statement query); these can.
_DISCARD = (
    "CLOSE ALL; SET SESSION AUTHORIZATION DEFAULT; RESET ALL; DEALLOCATE ALL; UNLISTEN *; "
    "SELECT pg_advisory_unlock_all(); DISCARD PLANS; DISCARD TEMP; DISCARD SEQUENCES"
)


def reset_session() -> None:
    """Give the next run a clean session: drop what a handler left on the connection
    (settings, role, temporary tables, prepared statements, cursors, advisory locks, LISTEN
    registrations), then apply Django's own session setup again (time zone, role), in one
    round trip. A connection that cannot be reset is closed: the next run opens a fresh one."""
    if connection.connection is None:
        return
    statements = [SQL(_DISCARD), SQL("SET TIME ZONE {}").format(Literal(connection.timezone_name))]
    if role := connection.settings_dict["OPTIONS"].get("assume_role"):
        statements.append(SQL("SET ROLE {}").format(Literal(role)))
    try:
        # Never prepared (with ``prepare_threshold`` set, psycopg would prepare it, and
        # several statements cannot be one prepared statement): the simple query protocol.
        with connection.cursor() as cursor:
            text = SQL("; ").join(statements).as_string(connection.connection)
            cursor.cursor.execute(text, prepare=False)
    except Exception:  # any failure here: the next run starts on a fresh connection
        connection.close()


def drop_leaked_transaction() -> bool:
    """If the handler returned inside a transaction it opened, roll it back and give this
    thread a fresh connection, so the outcome write does not join (and die with) it."""
    if not connection.in_atomic_block:
        return False
    connection.close()  # the server rolls the open transaction back
    del connections[DEFAULT_DB_ALIAS]  # the wrapper's atomic state is beyond repair
    return True


def store_unreachable(session: SessionUse) -> bool:
    """Whether the store's connection on this thread broke during the handler: a statement
    on it failed for that reason (even if Django has reconnected since, as ``run.atomic()``'s
    exit does), or an error went through it and it is gone or no longer answers (a connect
    that failed). An outage-looking error from another server the handler talks to (a second
    database, a partner's PostgreSQL) while the store answers is the job's own failure."""
    if session.broke:
        return True
    if not connection.errors_occurred:
        return False
    return connection.connection is None or not connection.is_usable()


# Seconds a probe of the store waits to connect (``store_answers``): a server that is up answers
# in milliseconds; one that is gone refuses at once or not at all.
PROBE_CONNECT_SECONDS = 3


def store_answers(server: tuple[str, int] | None = None) -> bool:
    """Whether the store answers this replica right now and takes writes, asked on a
    connection of its own (not the run's, which the handler may have broken itself): one
    connect (``target_session_attrs=read-write``) and ``SELECT 1``. ``server``: the host and
    port the run was on, so that a failover's new primary answering on another host does not
    pass for the server that went away.

    A handler whose own statement ended its session (``pg_terminate_backend`` of itself, a
    query that crashes its backend, a session-killing timeout) sees the same errors as an
    outage; only the store's answer tells them apart.
    """
    params = {
        **conninfo_from_django(),
        "connect_timeout": PROBE_CONNECT_SECONDS,
        "target_session_attrs": "read-write",
    }
    if server is not None:
        params.pop("hostaddr", None)
        params["host"], params["port"] = server
    try:
        with psycopg.connect(**params, autocommit=True) as probe:
            probe.execute("SELECT 1")
    except psycopg.Error:
        return False
    return True


__all__ = [
    "SessionUse",
    "drop_leaked_transaction",
    "keep_or_close_connection",
    "reset_session",
    "store_answers",
    "store_unreachable",
]
