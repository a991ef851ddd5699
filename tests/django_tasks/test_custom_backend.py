# Adapted from Django 6.1.3, tests/tasks/test_custom_backend.py.
# Copyright (c) Django Software Foundation and individual contributors (BSD-3-Clause: see
# LICENSE.django in this folder). Changes: pytest functions; the custom backend is JobsBackend
# (its OPTIONS are its policies) and the custom Task class is set on a subclass of it; the
# tests of a backend without priority or without enqueue are about other backends (skipped,
# each saying why); test_a_custom_task_runs is ours.
"""The framework's extension points (``OPTIONS``, ``supports_*``, ``task_class``) on
JobsBackend."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from django_jobs.models import Occurrence
from django_jobs.tasks import JobsBackend

from . import tasks as test_tasks
from .conftest import jobs_backend
from .framework import (
    InvalidTask,
    Task,
    TaskResultStatus,
    default_task_backend,
    task,
    task_backends,
)

pytestmark = pytest.mark.django_db


@dataclass(frozen=True, slots=True, kw_only=True)
class CustomTask(Task):  # type: ignore[misc]
    foo: int = 3
    bar: int = 300


class CustomTaskBackend(JobsBackend):
    task_class = CustomTask


CUSTOM_TASK_BACKEND = f"{CustomTaskBackend.__module__}.{CustomTaskBackend.__qualname__}"


def test_using_correct_backend(tasks_setting, settings) -> None:
    tasks_setting({"default": jobs_backend()})
    assert default_task_backend == task_backends["default"]
    assert isinstance(task_backends["default"], JobsBackend)
    assert default_task_backend.alias == "default"
    assert default_task_backend.options == settings.TASKS["default"]["OPTIONS"]


def test_enqueue_async_task_on_non_async_backend(tasks_setting, monkeypatch) -> None:
    tasks_setting({"default": jobs_backend()})
    monkeypatch.setattr(JobsBackend, "supports_async_task", False)
    # "async Tasks." on Django 6, "async tasks." in the backport.
    with pytest.raises(InvalidTask, match=r"(?i)Backend does not support async Tasks\."):
        default_task_backend.validate_task(test_tasks.noop_task_async)


@pytest.mark.skip(
    reason="custom backend internals: a backend without supports_priority; JobsBackend "
    "supports priority (test_tasks.py's priority tests)"
)
def test_backend_does_not_support_priority() -> None:
    raise AssertionError("not run")


def test_options(tasks_setting, drain) -> None:
    """Django's test: the backend reads its OPTIONS. JobsBackend's are its tasks' policies:
    the alias's MAX_ATTEMPTS bounds a failing task's attempts."""
    tasks_setting({"default": jobs_backend()})
    options = default_task_backend.options
    result = test_tasks.failing_task_value_error.enqueue()
    drain()
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert result.attempts == options["MAX_ATTEMPTS"]
    assert Occurrence.objects.get(pk=result.id).schedule.max_attempts == options["MAX_ATTEMPTS"]


@pytest.mark.skip(
    reason="custom backend internals: an abstract backend class without enqueue cannot be "
    "made; JobsBackend implements enqueue"
)
def test_no_enqueue() -> None:
    raise AssertionError("not run")


@pytest.fixture
def custom_task_backend(tasks_setting) -> None:
    tasks_setting(
        {"default": {**jobs_backend(QUEUES=["default", "high"]), "BACKEND": CUSTOM_TASK_BACKEND}}
    )


@pytest.mark.usefixtures("custom_task_backend")
def test_custom_task_default_values() -> None:
    my_task = task()(test_tasks.noop_task.func)

    assert isinstance(my_task, CustomTask)
    assert my_task.foo == 3
    assert my_task.bar == 300


@pytest.mark.usefixtures("custom_task_backend")
def test_custom_task_with_custom_values() -> None:
    my_task = task(foo=5, bar=600)(test_tasks.noop_task.func)

    assert isinstance(my_task, CustomTask)
    assert my_task.foo == 5
    assert my_task.bar == 600


@pytest.mark.usefixtures("custom_task_backend")
def test_custom_task_with_standard_and_custom_values() -> None:
    my_task = task(priority=10, queue_name="high", foo=10, bar=1000)(test_tasks.noop_task.func)

    assert isinstance(my_task, CustomTask)
    assert my_task.priority == 10
    assert my_task.queue_name == "high"
    assert my_task.foo == 10
    assert my_task.bar == 1000
    assert not my_task.takes_context
    assert my_task.run_after is None


@pytest.mark.usefixtures("custom_task_backend")
def test_custom_task_invalid_kwarg() -> None:
    with pytest.raises(TypeError):
        task(unknown_param=123)(test_tasks.noop_task.func)


@pytest.mark.usefixtures("custom_task_backend")
def test_a_task_of_a_jobs_backend_subclass_runs(drain) -> None:
    """Ours: a subclass of JobsBackend (here for its task_class) is still JobsBackend; a task
    enqueued on it is run by our worker."""
    result = test_tasks.calculate_meaning_of_life.enqueue()
    drain()
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL, result.errors
    assert result.return_value == 42
