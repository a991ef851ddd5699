"""Calling a job handler: a plain function directly, a coroutine function to completion on an
event loop of its own; and refusing a result that is work not yet done.

A coroutine handler runs through ``asgiref.sync.async_to_sync``: its event loop runs in a
helper thread while the run thread waits and serves the handler's
``sync_to_async(thread_sensitive=True)`` calls. So what the handler runs that way (the ORM,
``run.atomic()``, ``run.once()``) uses the run thread's connection and transaction: the ones
the worker checks before and after the run, and that the fenced completion is written on.

Either kind runs in a copy of the run thread's context (``contextvars``): what a handler binds
there (structlog's context above all) stays in its own run and never reaches the lines the
worker logs about the outcome. ``async_to_sync`` copies a coroutine's context changes back into
the context it was called from: that is the copy, not the worker's.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING

from asgiref.sync import async_to_sync, iscoroutinefunction

from ..exceptions import Cancelled, JobsError
from ..parameters import Parameters

if TYPE_CHECKING:
    from ..registry import Handler
    from .run import Run

# How often a coroutine handler's task is checked for the worker's cancellation (seconds).
CANCEL_POLL_SECONDS = 0.05


def call_handler(
    func: Handler, run: Run, *, name: str, parameters: Parameters | None = None
) -> object:
    """Run ``func``, the handler of job ``name``, to completion in this (the run's) thread and
    in a copy of its context; what it returned.

    Raises ``JobsError`` when the handler hands back unfinished work (a coroutine, a
    generator, an iterator ...): returning is what marks an occurrence completed, so work the
    handler has not done must not return as if it had.
    """
    called = parameters or Parameters()
    result = contextvars.copy_context().run(_call, func, run, name, called)
    _refuse_unfinished(result, name)
    return result


def _call(func: Handler, run: Run, name: str, parameters: Parameters) -> object:
    """The handler's call (inside the copied context); returns what the handler returned."""
    if iscoroutinefunction(func):
        try:
            # A new loop for every run (force_new_loop): never the loop of an earlier run,
            # which asgiref remembers in the run thread once a sync_to_async call ran there.
            result = async_to_sync(_run_task, force_new_loop=True)(func, run, name, parameters)
        except Cancelled:
            # The task may be cancelled at the await of a sync_to_async call whose
            # run.atomic() went on to commit on this thread: the occurrence is completed.
            # (Read here, not in the loop: this thread has finished that call by now.)
            if not run.completed:
                raise
            return None
        return result
    return parameters.call(func, run)


async def _run_task(func: Handler, run: Run, name: str, parameters: Parameters) -> object:
    """Run the handler's coroutine as a task, cancelled when the worker cancels the run.

    Steps:
    1. start the coroutine as a task on this (new) event loop;
    2. wait for it, looking at ``run.cancelled`` every ``CANCEL_POLL_SECONDS``; when the
       worker cancels the run (timeout, lost lease, shutdown), cancel the task and wait for
       it to unwind;
    3. a task ended by that cancellation raises ``Cancelled``, as a sync handler that reacts
       to cancellation does.
    """
    awaitable = parameters.call(func, run)
    if not inspect.isawaitable(awaitable):
        raise JobsError(
            f"job {name!r} is marked as a coroutine function but returned "
            f"{type(awaitable).__name__}, not an awaitable; declare it with async def"
        )
    task = asyncio.ensure_future(awaitable)
    while not task.done():
        await asyncio.wait({task}, timeout=CANCEL_POLL_SECONDS)
        if run.cancelled and not task.done():
            task.cancel()
            break
    try:
        return await task
    except asyncio.CancelledError:
        if not task.cancelled():
            raise  # this coroutine itself was cancelled: the loop is going away
        if not run.cancelled:
            raise JobsError(
                f"job {name!r} raised asyncio.CancelledError though the worker did not cancel "
                "it; let the handler return or raise an error of its own"
            ) from None
        raise Cancelled(
            f"job {name!r} was cancelled at an await (timeout, lost lease or shutdown); run "
            f"of occurrence {run.occurrence_key} stopped there"
        ) from None


def _refuse_unfinished(result: object, name: str) -> None:
    """Raise ``JobsError`` if ``result`` is work not yet done; close a coroutine or generator
    first, so that it never runs (and Python does not warn that it was never awaited)."""
    if inspect.iscoroutine(result):
        result.close()
        raise JobsError(
            f"job {name!r} returned a coroutine: declare the handler with async def so the "
            "worker awaits it"
        )
    if inspect.isawaitable(result):
        raise JobsError(
            f"job {name!r} returned an awaitable ({type(result).__name__}) it did not wait "
            "for: declare the handler with async def and await it there"
        )
    if inspect.isgenerator(result):
        result.close()
        raise JobsError(
            f"job {name!r} returned a generator; handlers must run to completion, not yield"
        )
    if inspect.isasyncgen(result):
        # Never started, so there is nothing to close.
        raise JobsError(
            f"job {name!r} returned an async generator; handlers must run to completion, not yield"
        )
    if isinstance(result, Iterator | AsyncIterator):
        raise JobsError(
            f"job {name!r} returned an iterator ({type(result).__name__}), work not done yet: "
            "consume it in the handler (for example with list()) and return nothing"
        )
