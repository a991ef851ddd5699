"""Fixtures of the contract suite: the test's clock for everything, ``TASKS`` on
``JobsBackend`` (as Django's tests set it on their backends) and ``drain``, our worker's
inline passes until nothing more is due."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.conf import settings as django_settings

from django_jobs.clock import use_clock
from django_jobs.registry import registry
from django_jobs.tasks import job_name
from django_jobs.testing import FakeClock, run_due

BACKEND = "django_jobs.tasks.JobsBackend"
# The most inline passes one ``drain`` makes: far more than a task's attempts need.
MAX_PASSES = 20


def jobs_backend(**params: Any) -> dict[str, Any]:
    """A ``TASKS`` entry for ``JobsBackend`` with the suite's ``OPTIONS`` (tests/settings.py:
    three attempts, no backoff), and ``params`` (``QUEUES``)."""
    return {"BACKEND": BACKEND, "OPTIONS": django_settings.TASKS["default"]["OPTIONS"], **params}


@pytest.fixture(autouse=True)
def on_the_clock(clock: FakeClock) -> Iterator[FakeClock]:
    """Enqueue and run on the test's clock: a task is due at the instant it was enqueued."""
    with use_clock(clock):
        yield clock


@pytest.fixture
def tasks_setting(settings: Any) -> Iterator[Callable[[dict[str, Any]], None]]:
    """Set ``TASKS`` for one test (the framework drops its backends on the change). An alias
    the test adds has its job unregistered afterwards, should the backend register one."""
    before = set(registry.names())
    aliases: set[str] = set()

    def set_tasks(tasks: dict[str, Any]) -> None:
        aliases.update(tasks)
        settings.TASKS = tasks

    yield set_tasks
    for alias in aliases:
        if job_name(alias) in registry.names() and job_name(alias) not in before:
            registry.unregister(job_name(alias))


@pytest.fixture
def drain(clock: FakeClock, django_capture_on_commit_callbacks: Any) -> Callable[[], int]:
    """Run our worker's inline passes at the clock's instant until one claims nothing (a retry
    without backoff is due at once); returns how many occurrences they ran. The passes run in
    the test's transaction, so what the worker does once an end is committed (``task_finished``)
    is done as the passes end (docs/worker.md's testing recipe)."""

    def drain() -> int:
        ran = 0
        for _ in range(MAX_PASSES):
            with django_capture_on_commit_callbacks(execute=True):
                claimed = run_due(clock).claimed
            if not claimed:
                return ran
            ran += claimed
        raise AssertionError(f"work still due after {MAX_PASSES} passes")

    return drain
