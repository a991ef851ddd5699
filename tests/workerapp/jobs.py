"""Handlers for the process tests. Each dispatches ``effects.record`` or waits on purpose."""

from __future__ import annotations

import os
import time
from pathlib import Path

from django_jobs import PermanentFailure, Run, job

from . import effects


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


@job("proc.effect")
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


@job("proc.cooperative")
def cooperative(run: Run) -> None:
    """Works until cancelled (shutdown or timeout), checking cancellation as it goes."""
    _touch(f"started-{run.occurrence_key}")
    _wait_for("never", run, limit=600)


@job("proc.stubborn")
def stubborn(run: Run) -> None:
    """Ignores cancellation entirely."""
    _touch(f"started-{run.occurrence_key}")
    _wait_for("never", None, limit=600)


@job("proc.fails")
def fails(run: Run) -> None:
    raise RuntimeError(f"attempt {run.attempt} failed")


@job("proc.refuses")
def refuses(run: Run) -> None:
    raise PermanentFailure("cannot ever work")
