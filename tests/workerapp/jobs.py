"""Handlers for the process tests. Each dispatches ``effects.record`` or waits on purpose."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import sys
import time
from pathlib import Path

from asgiref.sync import sync_to_async

from django_jobs import PermanentFailure, Retry, Run, job
from django_jobs.registry import Departure

from . import effects, probes

# Handlers that fail, hang, crash or probe the worker on purpose dispatch no command: their
# exception record (check I029 lists them).
HARNESS = Departure(
    reason="a test-harness handler that misbehaves or probes the worker on purpose",
    review_by=dt.date(2027, 12, 31),
)


def _signal_dir() -> Path:
    return Path(os.environ.get("JOBS_TEST_SIGNALS", "/nonexistent"))


def _touch(name: str) -> None:
    (_signal_dir() / name).touch()


def _wait_for(name: str, run: Run | None, limit: float = 120.0) -> None:
    """Block until the test creates signal file ``name`` (cancellation-aware when ``run``)."""
    deadline = time.monotonic() + limit
    while not (_signal_dir() / name).exists() and time.monotonic() < deadline:
        if run is not None:
            run.raise_if_cancelled()
        time.sleep(0.05)


@job("proc.effect", runtime=True)  # the console's browser tests schedule it at run time
def effect(run: Run) -> None:
    with run.atomic():
        effects.record(run.occurrence_key, token=run.fencing_token)


@job("proc.first_attempt_hangs")
def first_attempt_hangs(run: Run) -> None:
    """Attempt 1 says it started, then waits for 'go' before writing; later attempts write."""
    if run.attempt == 1:
        _touch(f"started-{run.occurrence_key}")
        _wait_for("go", None)
    with run.atomic():
        effects.record(run.occurrence_key, token=run.fencing_token)


@job("proc.cooperative", departure=HARNESS)
def cooperative(run: Run) -> None:
    """Works until cancelled (shutdown or timeout), checking cancellation as it goes."""
    _touch(f"started-{run.occurrence_key}")
    _wait_for("never", run, limit=600)


@job("proc.stubborn", departure=HARNESS)
def stubborn(run: Run) -> None:
    """Ignores cancellation entirely."""
    _touch(f"started-{run.occurrence_key}")
    _wait_for("never", None, limit=600)


@job("proc.fails", departure=HARNESS)
def fails(run: Run) -> None:
    raise RuntimeError(f"attempt {run.attempt} failed")


@job("proc.refuses", departure=HARNESS)
def refuses(run: Run) -> None:
    raise PermanentFailure("cannot ever work")


def _record_effect(run: Run) -> None:
    """The sync part of a coroutine handler: its write and the completion, on the run thread."""
    with run.atomic():
        effects.record(run.occurrence_key, token=run.fencing_token)


@job("proc.async_effect")
async def async_effect(run: Run) -> None:
    await asyncio.sleep(0)  # a real suspension: the body runs on the event loop
    await sync_to_async(_record_effect)(run)


@job("proc.async_fails", departure=HARNESS)
async def async_fails(run: Run) -> None:
    await asyncio.sleep(0)
    raise RuntimeError(f"async attempt {run.attempt} failed")


@job("proc.async_sleeps", departure=HARNESS)
async def async_sleeps(run: Run) -> None:
    """Awaits forever; notes (a signal file) that the worker's cancellation reached it."""
    _touch(f"started-{run.occurrence_key}")
    try:
        await asyncio.sleep(600)
    except asyncio.CancelledError:
        _touch(f"cancelled-{run.occurrence_key}")
        raise


def _append(name: str, line: str) -> None:
    with (_signal_dir() / name).open("a") as file:
        file.write(f"{line}\n")


@job("proc.crasher", departure=HARNESS)
def crasher(run: Run) -> None:
    """Takes its whole process down mid-run, as a segfault or the OOM killer would."""
    _touch(f"crash-{run.occurrence_key}-{run.attempt}")
    os._exit(1)


@job("proc.stubborn_beat", departure=HARNESS)
def stubborn_beat(run: Run) -> None:
    """Notes ``<replica> <monotonic time>`` in ``beats`` every 0.2 s and never looks at
    cancellation: a beat after its lease was lost is work done beside the new owner.
    (``time.monotonic`` is system-wide on Linux: the test compares it across processes.)"""
    replica = os.environ["JOBS_TEST_REPLICA"]
    deadline = time.monotonic() + 600  # forever, for a test
    while time.monotonic() < deadline:
        _append("beats", f"{replica} {time.monotonic()}")
        time.sleep(0.2)


@job("proc.outage_reader")
def outage_reader(run: Run) -> None:
    """Attempt 1 reads the database every 0.5 s until a read breaks (the store outage its test
    makes; 120 s at most); a later attempt reads once. Then it commits its effect."""
    _touch(f"reading-{run.attempt}")
    began = time.monotonic()
    probes.ping()
    while run.attempt == 1 and time.monotonic() - began < 120:
        time.sleep(0.5)
        probes.ping()
    with run.atomic():
        effects.record(run.occurrence_key, token=run.fencing_token)


@job("proc.leaker", departure=HARNESS)
def leaker(run: Run) -> None:
    """Leaves session state on its connection (and, given JOBS_TEST_LEAK_ROLE, a role)."""
    probes.leak_session_state(os.environ.get("JOBS_TEST_LEAK_ROLE"))
    _append("sequence", f"leaker {run.occurrence_key}")


@job("proc.leak_reader", departure=HARNESS)
def leak_reader(run: Run) -> None:
    """Notes in ``seen-<occurrence>.json`` the session state its connection carries."""
    seen = probes.session_state()
    (_signal_dir() / f"seen-{run.occurrence_key}.json").write_text(json.dumps(seen))
    _append("sequence", f"reader {run.occurrence_key}")


@job("proc.async_blocks", departure=HARNESS)
async def async_blocks(run: Run) -> None:
    """Blocks its event loop (a sync wait inside the coroutine): its task cannot be cancelled."""
    _touch(f"started-{run.occurrence_key}")
    _wait_for("never", None, limit=600)


@job("proc.stepped", departure=HARNESS)
def stepped(run: Run) -> None:
    """An outside effect through ``run.once`` (a ``Step`` row per occurrence), like the
    example project's accountant digest."""
    run.once("send", lambda: None)


@job("proc.enqueued", retry=Retry(max_attempts=2, backoff=dt.timedelta(0)))
def enqueued(run: Run) -> dict[str, object]:
    """Enqueued by the tests' view (tests/urls.py): records its effect, returns its arguments
    (kept as the occurrence's result)."""
    with run.atomic():
        effects.record(run.occurrence_key, token=run.fencing_token)
    return {"args": run.args, "attempt": run.attempt}


@job("proc.watchful_beat", departure=HARNESS)
def watchful_beat(run: Run) -> None:
    """Notes ``<replica> <monotonic time>`` in ``beats`` every 0.1 s for
    ``JOBS_TEST_RUN_SECONDS`` (12 s), and returns as soon as the worker cancels it: two
    replicas beating at once are two replicas executing one occurrence."""
    replica = os.environ["JOBS_TEST_REPLICA"]
    until = time.monotonic() + float(os.environ.get("JOBS_TEST_RUN_SECONDS", "12"))
    while time.monotonic() < until and not run.cancelled:
        _append("beats", f"{replica} {time.monotonic()}")
        time.sleep(0.1)


@job("proc.exits", departure=HARNESS)
def exits(run: Run) -> None:
    """Calls ``sys.exit`` on every attempt, as a script turned into a job would."""
    _touch(f"exit-{run.occurrence_key}-{run.attempt}")
    sys.exit(1)


@job("proc.interrupted", departure=HARNESS)
def interrupted(run: Run) -> None:
    """Raises ``KeyboardInterrupt`` on every attempt."""
    _touch(f"interrupt-{run.occurrence_key}-{run.attempt}")
    raise KeyboardInterrupt


@job("proc.query_of_death", departure=HARNESS)
def query_of_death(run: Run) -> None:
    """Ends its own database session on every attempt, as a query that crashes its backend or
    trips a session-killing timeout does, while the store itself stays up."""
    _append("query-of-death", f"{run.occurrence_key} {run.attempt}")
    probes.end_own_session()


@job("proc.span", departure=HARNESS)
def span(run: Run) -> None:
    """Notes ``<start> <end>`` (``time.monotonic()``, one clock for every process of the
    machine) in ``spans`` around a wait of ``JOBS_TEST_SPAN_SECONDS`` (0.4 s): how many ran
    at once, measured by the handlers themselves (issue #36's fleet-wide queue limit)."""
    started = time.monotonic()
    time.sleep(float(os.environ.get("JOBS_TEST_SPAN_SECONDS", "0.4")))
    _append("spans", f"{started} {time.monotonic()} {run.occurrence_key}")
