"""Task functions of Django's Tasks framework, run through ``django_jobs.tasks.JobsBackend``
(tests/test_tasks_backend.py). The framework is Django's own on Django 6, the backport on
Django 5.2."""

from __future__ import annotations

import importlib
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from django_jobs.tasks import FRAMEWORK, TaskContext

from . import effects

_task: Any = importlib.import_module(FRAMEWORK).task


def task(**options: Any) -> Callable[[Callable[..., Any]], Any]:
    """The framework's ``@task(...)`` (Django 6's or the backport's)."""
    decorate: Callable[[Callable[..., Any]], Any] = _task(**options)
    return decorate


@task()
def add(a: int, b: int) -> int:
    return a + b


@task(priority=10)
def urgent(label: str) -> str:
    return label


@task()
def noted(label: str, order: list[str] | None = None) -> str:
    """Records its label as an effect (the tests read the order runs happened in)."""
    effects.record(label, token=0)
    return label


@task(takes_context=True)
def flaky(context: TaskContext, fail_until: int) -> dict[str, int]:
    """Fails its first ``fail_until - 1`` attempts; returns the attempt it succeeded on."""
    if context.attempt < fail_until:
        raise ValueError(f"attempt {context.attempt} failed on purpose")
    return {"attempt": context.attempt}


@task()
def always_fails() -> None:
    raise RuntimeError("this task always fails")


@task()
async def async_double(n: int) -> int:
    return n * 2


@task()
def effect_after_start(name: str) -> str:
    """Says it started (a signal file), waits for 'go' (or a later attempt), then records its
    effect once per run: the SIGKILL test kills the replica running it in between."""
    signals = Path(os.environ.get("JOBS_TEST_SIGNALS", "/nonexistent"))
    (signals / f"started-{name}-{os.getpid()}").touch()
    deadline = time.monotonic() + 120
    while not (signals / "go").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    effects.record(name, token=0)
    return name


@task(takes_context=True)
def nightly_report(context: TaskContext, label: str, *, pages: int = 1) -> dict[str, Any]:
    """Run by a declared schedule (tests/test_task_schedules.py): says which instant it ran
    for (a scheduled task's ``enqueued_at`` is its occurrence's instant) and on which attempt."""
    return {
        "label": label,
        "pages": pages,
        "for": context.task_result.enqueued_at.isoformat(),
        "attempt": context.attempt,
    }
