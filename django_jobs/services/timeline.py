"""The instant interfaces hand to services: now, on the database's timeline.

Workers align their clocks with PostgreSQL's at start, so every instant they write (leases,
heartbeats, due times) is on the database's timeline. An operator's action is compared with
those instants (``run-now`` plans an occurrence due at its ``now``; ``health`` ages heartbeats;
``replay --at`` refuses an instant after ``now``), so the admin and the ``jobs`` command use
the same timeline: the process clock (``clock.current()``) is aligned with the database before
its first use and again every ``ALIGN_EVERY``, a few round trips each time. An injected clock
(``clock.use_clock``, for tests) is used as it is.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from .. import clock, store

# Host clocks drift and NTP steps them; a long-lived web process measures again this often.
ALIGN_EVERY = timedelta(minutes=10)


def now() -> datetime:
    """The current instant of ``clock.current()``, first aligned with the database clock when
    it is a ``SystemClock`` (the process's, unless one was injected) whose alignment is older
    than ``ALIGN_EVERY``."""
    current = clock.current()
    if isinstance(current, clock.SystemClock) and not current.aligned_within(ALIGN_EVERY):
        current.align(store.database_clock)
    return current.now()
