"""The run context a job handler receives."""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

from asgiref.sync import async_to_sync, sync_to_async
from django.db import transaction

from ..clock import Clock
from ..exceptions import Cancelled, JobsError, LeaseLost

if TYPE_CHECKING:
    from ..store import Lease

T = TypeVar("T")


class Run:
    """What a handler knows about the occurrence it runs, and how it cooperates with the worker.

    ``occurrence_key`` is the occurrence identity: the same for every retry and every replay
    of this planned run, and the idempotency key of the command the handler dispatches.
    """

    def __init__(
        self,
        lease: Lease,
        *,
        clock: Clock,
        deadline: datetime,
        cancel: threading.Event | None = None,
    ) -> None:
        self._lease = lease
        self._clock = clock
        self.deadline = deadline
        self._cancel = cancel or threading.Event()
        self._completed = False

    @property
    def occurrence_key(self) -> str:
        return str(self._lease.occurrence_id)

    @property
    def scheduled_at(self) -> datetime:
        return self._lease.scheduled_at

    @property
    def args(self) -> dict[str, Any]:
        """What this run is for: the schedule's arguments when the occurrence was planned (a
        later change of them does not reach it), or those an operator's run-now gave. The
        same for every retry and replay. The worker never logs them."""
        return self._lease.args

    @property
    def attempt(self) -> int:
        return self._lease.attempt

    @property
    def fencing_token(self) -> int:
        return self._lease.token

    @property
    def tenant(self) -> str:
        return self._lease.tenant

    @property
    def trigger(self) -> str:
        return self._lease.trigger

    @property
    def cancelled(self) -> bool:
        return self._cancel.is_set()

    @property
    def completed(self) -> bool:
        """Whether ``atomic()`` already committed the completion."""
        return self._completed

    def raise_if_cancelled(self) -> None:
        if self._cancel.is_set():
            raise Cancelled(f"run of occurrence {self.occurrence_key} was cancelled")

    @contextmanager
    def atomic(self) -> Iterator[None]:
        """One transaction holding the handler's writes and the fenced completion.

        Steps:
        1. open a transaction and lock the occurrence, checking this run's fencing token;
           a stale token raises ``LeaseLost`` before the handler's block runs;
        2. run the handler's block;
        3. mark the occurrence completed in the same transaction, and commit.
        Either the block's writes and the completion commit together, or neither does.
        """
        # Imported here: ``Run`` is a public name of the package, importable before apps load.
        from .. import store

        if self._completed:
            raise JobsError("run.atomic() completes the occurrence: use it once per run")
        with transaction.atomic():
            if not store.hold(self._lease):
                raise LeaseLost(
                    f"occurrence {self.occurrence_key} is no longer held with token "
                    f"{self.fencing_token}; another replica owns it"
                )
            yield
            store.complete([self._lease], now=self._clock.now())
        self._completed = True

    def once(self, step: str, action: Callable[[], T]) -> T | None:
        """Run ``action`` unless step ``step`` of this occurrence already happened.

        For effects outside the database (an e-mail, a call to a partner): a duplicate
        execution of the occurrence (after a crash, a lost lease, a replay) skips steps that
        already happened. The step is recorded after ``action`` returns, fenced by this run's
        token; a crash between the two repeats the step once, so ``action`` should still pass
        ``occurrence_key`` on as its idempotency key. Returns ``action``'s result, or ``None``
        when the step was skipped.
        """
        from .. import store

        if store.step_done(self._lease.occurrence_id, step):
            return None
        self.raise_if_cancelled()
        result = action()
        recorded = store.record_step(self._lease, step, now=self._clock.now())
        if not recorded and not store.step_done(self._lease.occurrence_id, step):
            raise LeaseLost(
                f"occurrence {self.occurrence_key} is no longer held with token "
                f"{self.fencing_token}: step {step!r} was not recorded"
            )
        return result

    async def atomic_async(self, block: Callable[[], T]) -> T:
        """``atomic()`` for a coroutine handler: ``await run.atomic_async(block)``.

        ``block``, a plain function, runs inside ``atomic()`` on the run thread (through
        ``sync_to_async``), whose connection the worker manages: its writes and the fenced
        completion commit together, as in a sync handler. (Django refuses ORM calls made in
        the event loop itself.) Returns ``block``'s result.
        """

        def in_atomic() -> T:
            with self.atomic():
                return block()

        return await sync_to_async(in_atomic)()

    async def once_async(self, step: str, action: Callable[[], Awaitable[T]]) -> T | None:
        """``once()`` for a coroutine handler whose ``action`` is a coroutine function:
        ``await run.once_async("notify-partner", lambda: notify(run.occurrence_key))``.

        The step's bookkeeping runs on the run thread (through ``sync_to_async``) and
        ``action`` back on the handler's event loop; cancelling the handler's task cancels
        ``action`` too, and the step is then not recorded.
        """

        async def act() -> T:
            return await action()

        return await sync_to_async(self.once)(step, async_to_sync(act))
