"""Group commit of starts: the run threads that are about to start runs claimed ahead mark
them started with one statement.

A run claimed ahead of a free thread is not started (its occurrence's ``attempt_started_at``
is NULL) until a thread starts it; from
then on a lapse of its lease is a lost attempt, so the start must be committed before the
handler runs (``store.mark_started``). One commit per start made those commits most of what a
run thread waited on in a burst of short runs. Here the first thread to ask writes the starts
of every thread waiting with it, and of those that asked while it wrote, in one statement; a
thread never starts its handler before its own start is committed. A thread that asks while a
write is under way waits for the next one, which the first of those waiting writes.

Nothing is marked that is not about to start: each thread asks for its own run, just before
running it, as it did alone. A start the write did not record (the lease was taken over
before a thread got to the run, and the replica has not heard yet) is not run at all. A
write that fails fails for every start in it: each thread then gives its run back as it would
have after a failed write of its own (``outage`` for a store out of reach).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from .. import store
from ..clock import Clock


@dataclass(eq=False)
class _Start:
    lease: store.Lease
    written: threading.Event = field(default_factory=threading.Event)
    writes_next: bool = False  # this thread writes the next batch
    error: BaseException | None = None
    recorded: bool = False  # the write recorded this start (its lease was still current)


class Starts:
    """Marks leases started, the starts of threads asking at the same time in one write."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        self._waiting: list[_Start] = []
        self._writing = False  # a thread is writing a batch now

    def mark(self, lease: store.Lease) -> bool:
        """Return once ``lease``'s start is committed: whether it was recorded (False: the
        lease was taken over before its run started, which must then not start). Raise what
        the write raised."""
        mine = _Start(lease)
        with self._lock:
            self._waiting.append(mine)
            if not self._writing:
                self._writing = mine.writes_next = True
        if not mine.writes_next:
            mine.written.wait()
        if mine.writes_next:  # first to ask, or handed the next batch by the last writer
            self._write()
        if mine.error is not None:
            raise mine.error
        return mine.recorded

    def waiting(self) -> int:
        """How many starts wait for a write (not counting those in the write under way)."""
        with self._lock:
            return len(self._waiting)

    def _write(self) -> None:
        with self._lock:
            batch, self._waiting = self._waiting, []
        error: BaseException | None = None
        recorded: frozenset[object] = frozenset()
        try:
            recorded = store.mark_started([s.lease for s in batch], now=self.clock.now())
        except BaseException as exc:  # any error: every waiter is woken and handles it
            error = exc  # as its own write's failure
        with self._lock:
            following = self._waiting[0] if self._waiting else None
            if following is not None:
                following.writes_next = True
            else:
                self._writing = False
        for start in batch:
            start.error = error
            start.recorded = start.lease.occurrence_id in recorded
            start.written.set()
        if following is not None:
            following.written.set()


__all__ = ["Starts"]
