"""Sleeping until there is work: a deadline, a NOTIFY from another replica, or a local poke.

A dedicated autocommit connection LISTENs on the ``django_jobs`` channel; the store notifies it
when work is planned, released or retried. A self-pipe lets signal handlers and finished runs
wake the loop at once. When the listening connection is lost (a store outage) the loop falls
back to sleeping until its deadline and reconnects on the next wait.
"""

from __future__ import annotations

import contextlib
import os
import select
from typing import Any

import psycopg
import structlog

from ..store import CHANNEL

log = structlog.get_logger("django_jobs.worker")


class Wakeup:
    def __init__(self, conninfo: dict[str, Any] | None) -> None:
        self._conninfo = conninfo
        self._conn: psycopg.Connection[Any] | None = None
        self._read, self._write = os.pipe()
        os.set_blocking(self._read, False)
        os.set_blocking(self._write, False)
        # A poke not yet taken by ``wait``: further pokes need not write again (every
        # finished run pokes; in a burst, thousands a second).
        self._poked = False

    def poke(self) -> None:
        """Wake the waiting loop now. Safe from signal handlers and other threads."""
        if self._poked:
            return
        self._poked = True
        with contextlib.suppress(BlockingIOError):
            os.write(self._write, b"!")

    def listen(self) -> bool:
        """LISTEN now (``wait`` would at its first call): a replica calls it before it first
        looks for work, so a NOTIFY sent after that look is never missed. ``False`` if the
        store is out of reach (``wait`` tries again)."""
        return self._listen() is not None

    def _listen(self) -> psycopg.Connection[Any] | None:
        if self._conn is not None and not self._conn.closed:
            return self._conn
        if self._conninfo is None:
            return None
        try:
            # The URL's own connect_timeout, if it has one (a multi-host URL should: libpq
            # spends it on each host), else 5 s.
            params = {"connect_timeout": 5, **self._conninfo, "autocommit": True}
            self._conn = psycopg.connect(**params)
            self._conn.execute(f"LISTEN {CHANNEL}")
        except psycopg.Error:
            self._conn = None  # an outage: sleep until the deadline instead
        return self._conn

    def wait(self, timeout: float) -> str:
        """Sleep up to ``timeout`` seconds; return why it woke: notify, poke or timeout."""
        conn = self._listen()
        watched = [self._read] + ([conn.fileno()] if conn is not None else [])
        ready, _, _ = select.select(watched, [], [], max(0.0, timeout))
        if self._read in ready:
            with contextlib.suppress(BlockingIOError):
                while os.read(self._read, 512):
                    pass
            # Only after draining: a poke written during the drain would otherwise be read
            # here and leave the flag set over an empty pipe, silencing every later poke. A
            # poke skipped before this line changed its state before poking, and the caller
            # looks at that state next, as it returns from this wake-up.
            self._poked = False
            return "poke"
        if conn is not None and conn.fileno() in ready:
            try:
                list(conn.notifies(timeout=0.0))
            except psycopg.Error:
                self.close()
            return "notify"
        return "timeout"

    def close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(psycopg.Error):
                self._conn.close()
        self._conn = None


def conninfo_from_django() -> dict[str, Any]:
    """Connection parameters of Django's default database, for the listening connection."""
    from django.db import connection

    params = dict(connection.get_connection_params())
    params.pop("cursor_factory", None)
    params.pop("context", None)
    params.pop("prepare_threshold", None)
    params.pop("server_side_binding", None)
    return params
