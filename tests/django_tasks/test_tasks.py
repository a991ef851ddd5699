# Adapted from Django 6.1.3, tests/tasks/test_tasks.py.
# Copyright (c) Django Software Foundation and individual contributors (BSD-3-Clause: see
# LICENSE.django in this folder). Changes: pytest functions on JobsBackend instead of a
# SimpleTestCase on the dummy and immediate backends; the "immediate" alias is a second
# JobsBackend alias without QUEUES; results are read with get_result and the enqueued tasks are
# run by our worker (``drain``); the framework comes through framework.py.
"""The framework's ``Task`` API (decorator, ``using``, ``enqueue``, ``get_result``, pickling,
``TaskError``) with ``JobsBackend`` as the backend."""

from __future__ import annotations

import dataclasses
import pickle
import re
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.utils.module_loading import import_string

from django_jobs.models import Occurrence
from django_jobs.tasks import JobsBackend

from . import tasks as test_tasks
from .conftest import jobs_backend
from .framework import (
    DEFAULT_TASK_QUEUE_NAME,
    DJANGO_6,
    TASK_MAX_PRIORITY,
    TASK_MIN_PRIORITY,
    InvalidTask,
    InvalidTaskBackend,
    Task,
    TaskResultDoesNotExist,
    TaskResultMismatch,
    TaskResultStatus,
    default_task_backend,
    task,
    task_backends,
)

pytestmark = pytest.mark.django_db

DJANGO_6_ONLY = "the django_tasks backport (Django 5.2) has no such API: Django 6 added it"


@pytest.fixture(autouse=True)
def backends(tasks_setting) -> None:
    tasks_setting(
        {
            "default": jobs_backend(QUEUES=["default", "queue_1"]),
            "immediate": jobs_backend(QUEUES=[]),
            "missing": {"BACKEND": "does.not.exist"},
        }
    )


def test_using_correct_backend() -> None:
    assert default_task_backend == task_backends["default"]
    assert isinstance(task_backends["default"], JobsBackend)


def test_task_decorator() -> None:
    assert isinstance(test_tasks.noop_task, Task)
    assert isinstance(test_tasks.noop_task_async, Task)
    assert isinstance(test_tasks.noop_task_from_bare_decorator, Task)


def test_enqueue_task(drain) -> None:
    result = test_tasks.noop_task.enqueue()

    assert result.status == TaskResultStatus.READY
    assert result.task == test_tasks.noop_task
    assert result.args == []
    assert result.kwargs == {}
    assert test_tasks.noop_task.get_result(result.id) == result

    drain()
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL


def test_enqueue_task_async(drain) -> None:
    result = async_to_sync(test_tasks.noop_task.aenqueue)()

    assert result.status == TaskResultStatus.READY
    assert result.task == test_tasks.noop_task
    assert result.args == []
    assert result.kwargs == {}
    assert test_tasks.noop_task.get_result(result.id) == result

    drain()
    async_to_sync(result.arefresh)()
    assert result.status == TaskResultStatus.SUCCESSFUL


def test_enqueue_with_invalid_argument(clock) -> None:
    with pytest.raises(TypeError, match=re.escape("Unsupported type")):
        test_tasks.noop_task.enqueue(clock.now())
    assert not Occurrence.objects.exists()


def test_aenqueue_with_invalid_argument(clock) -> None:
    with pytest.raises(TypeError, match=re.escape("Unsupported type")):
        async_to_sync(test_tasks.noop_task.aenqueue)(clock.now())
    assert not Occurrence.objects.exists()


def test_using_priority() -> None:
    assert test_tasks.noop_task.priority == 0
    assert test_tasks.noop_task.using(priority=1).priority == 1
    assert test_tasks.noop_task.priority == 0


def test_using_queue_name() -> None:
    assert test_tasks.noop_task.queue_name == DEFAULT_TASK_QUEUE_NAME
    assert test_tasks.noop_task.using(queue_name="queue_1").queue_name == "queue_1"
    assert test_tasks.noop_task.queue_name == DEFAULT_TASK_QUEUE_NAME


def test_a_task_on_another_queue_runs(drain) -> None:
    """Ours: the queue Django's test_using_queue_name sets, enqueued and run."""
    result = test_tasks.calculate_meaning_of_life.using(queue_name="queue_1").enqueue()
    drain()
    result.refresh()
    assert (result.status, result.return_value) == (TaskResultStatus.SUCCESSFUL, 42)
    assert result.task.queue_name == "queue_1"


def test_using_run_after(clock) -> None:
    now = clock.now()

    assert test_tasks.noop_task.run_after is None
    assert test_tasks.noop_task.using(run_after=now).run_after == now
    assert test_tasks.noop_task.run_after is None


def test_a_task_runs_no_earlier_than_its_run_after(clock, drain) -> None:
    """Ours: the run_after Django's test_using_run_after sets, kept by the worker."""
    later = clock.now() + timedelta(minutes=5)
    result = test_tasks.calculate_meaning_of_life.using(run_after=later).enqueue()
    assert drain() == 0
    result.refresh()
    assert result.status == TaskResultStatus.READY
    assert result.task.run_after == later

    clock.set(later)
    assert drain() == 1
    result.refresh()
    assert (result.status, result.return_value) == (TaskResultStatus.SUCCESSFUL, 42)
    assert result.started_at == later


def test_using_unknown_backend() -> None:
    assert test_tasks.noop_task.backend == "default"

    with pytest.raises(
        InvalidTaskBackend, match=re.escape("The connection 'unknown' doesn't exist.")
    ):
        test_tasks.noop_task.using(backend="unknown")


def test_using_missing_backend() -> None:
    assert test_tasks.noop_task.backend == "default"

    with pytest.raises(
        InvalidTaskBackend,
        match=re.escape("Could not find backend 'does.not.exist': No module named 'does'"),
    ):
        test_tasks.noop_task.using(backend="missing")


def test_using_creates_new_instance() -> None:
    new_task = test_tasks.noop_task.using()

    assert new_task == test_tasks.noop_task
    assert new_task is not test_tasks.noop_task


def test_chained_using(clock) -> None:
    now = clock.now()

    run_after_task = test_tasks.noop_task.using(run_after=now)
    assert run_after_task.run_after == now

    priority_task = run_after_task.using(priority=10)
    assert priority_task.priority == 10
    assert priority_task.run_after == now

    assert run_after_task.priority == 0


def test_refresh_result() -> None:
    result = async_to_sync(test_tasks.noop_task.aenqueue)()

    original_result = dataclasses.asdict(result)

    result.refresh()

    assert dataclasses.asdict(result) == original_result

    async_to_sync(result.arefresh)()

    assert dataclasses.asdict(result) == original_result


def test_naive_datetime() -> None:
    with pytest.raises(InvalidTask, match=re.escape("run_after must be an aware datetime.")):
        test_tasks.noop_task.using(run_after=datetime(2026, 3, 1, 12))  # noqa: DTZ001


def test_invalid_priority() -> None:
    message = (
        f"priority must be a whole number between {TASK_MIN_PRIORITY} and {TASK_MAX_PRIORITY}."
    )
    with pytest.raises(InvalidTask, match=re.escape(message)):
        test_tasks.noop_task.using(priority=-101)

    with pytest.raises(InvalidTask, match=re.escape(message)):
        test_tasks.noop_task.using(priority=101)

    with pytest.raises(InvalidTask, match=re.escape(message)):
        test_tasks.noop_task.using(priority=3.1)

    test_tasks.noop_task.using(priority=100)
    test_tasks.noop_task.using(priority=-100)
    test_tasks.noop_task.using(priority=0)


@pytest.mark.parametrize("priority", [100, -100, 0])
def test_a_task_of_each_valid_priority_runs(priority, drain) -> None:
    """Ours: the bounds test_invalid_priority accepts, enqueued and run."""
    result = test_tasks.calculate_meaning_of_life.using(priority=priority).enqueue()
    drain()
    result.refresh()
    assert (result.status, result.task.priority) == (TaskResultStatus.SUCCESSFUL, priority)


def test_a_whole_number_float_priority_runs(drain) -> None:
    """Ours: the framework takes a priority equal to a whole number (``int(p) == p``)."""
    result = test_tasks.calculate_meaning_of_life.using(priority=3.0).enqueue()
    drain()
    result.refresh()
    assert (result.status, result.return_value) == (TaskResultStatus.SUCCESSFUL, 42)


def test_unknown_queue_name() -> None:
    with pytest.raises(InvalidTask, match=re.escape("Queue 'queue-2' is not valid for backend.")):
        test_tasks.noop_task.using(queue_name="queue-2")
    # Validation is bypassed when the backend QUEUES is an empty list.
    assert (
        test_tasks.noop_task.using(queue_name="queue-2", backend="immediate").queue_name
        == "queue-2"
    )


def test_any_queue_of_a_backend_without_queues_runs(drain) -> None:
    """Ours: test_unknown_queue_name's task on the alias without QUEUES, enqueued and run."""
    result = test_tasks.calculate_meaning_of_life.using(
        queue_name="queue-2", backend="immediate"
    ).enqueue()
    drain()
    result.refresh()
    assert (result.status, result.return_value) == (TaskResultStatus.SUCCESSFUL, 42)


def test_call_task() -> None:
    assert test_tasks.calculate_meaning_of_life.call() == 42


def test_call_task_async() -> None:
    assert async_to_sync(test_tasks.calculate_meaning_of_life.acall)() == 42


def test_call_async_task() -> None:
    assert async_to_sync(test_tasks.noop_task_async.acall)() is None


def test_call_async_task_sync() -> None:
    assert test_tasks.noop_task_async.call() is None


def test_get_result(drain) -> None:
    result = default_task_backend.enqueue(test_tasks.noop_task, (), {})

    new_result = test_tasks.noop_task.get_result(result.id)

    assert result == new_result

    drain()
    assert test_tasks.noop_task.get_result(result.id).status == TaskResultStatus.SUCCESSFUL


def test_get_result_async(drain) -> None:
    result = async_to_sync(default_task_backend.aenqueue)(test_tasks.noop_task, (), {})

    new_result = async_to_sync(test_tasks.noop_task.aget_result)(result.id)

    assert result == new_result

    drain()
    finished = async_to_sync(test_tasks.noop_task.aget_result)(result.id)
    assert finished.status == TaskResultStatus.SUCCESSFUL


def test_get_missing_result() -> None:
    with pytest.raises(TaskResultDoesNotExist):
        test_tasks.noop_task.get_result("123")

    with pytest.raises(TaskResultDoesNotExist):
        async_to_sync(test_tasks.noop_task.aget_result)("123")


def test_get_incorrect_result() -> None:
    result = default_task_backend.enqueue(test_tasks.noop_task_async, (), {})
    with pytest.raises(TaskResultMismatch, match=re.escape("Task does not match")):
        test_tasks.noop_task.get_result(result.id)


def test_get_incorrect_result_async() -> None:
    result = async_to_sync(default_task_backend.aenqueue)(test_tasks.noop_task_async, (), {})
    with pytest.raises(TaskResultMismatch, match=re.escape("Task does not match")):
        async_to_sync(test_tasks.noop_task.aget_result)(result.id)


def test_invalid_function() -> None:
    def local_function() -> None:
        return None

    invalid_functions: list[Callable[..., Any]] = [any, local_function]
    for invalid_function in invalid_functions:
        with pytest.raises(
            InvalidTask, match=re.escape("Task function must be defined at a module level.")
        ):
            task()(invalid_function)


def test_get_backend() -> None:
    assert test_tasks.noop_task.backend == "default"
    assert isinstance(test_tasks.noop_task.get_backend(), JobsBackend)

    immediate_task = test_tasks.noop_task.using(backend="immediate")
    assert immediate_task.backend == "immediate"
    assert isinstance(immediate_task.get_backend(), JobsBackend)
    assert immediate_task.get_backend() is not test_tasks.noop_task.get_backend()


def test_name() -> None:
    assert test_tasks.noop_task.name == "noop_task"
    assert test_tasks.noop_task_async.name == "noop_task_async"


def test_module_path() -> None:
    assert test_tasks.noop_task.module_path == "tests.django_tasks.tasks.noop_task"
    assert test_tasks.noop_task_async.module_path == "tests.django_tasks.tasks.noop_task_async"

    assert import_string(test_tasks.noop_task.module_path) is test_tasks.noop_task
    assert import_string(test_tasks.noop_task_async.module_path) is test_tasks.noop_task_async


@pytest.mark.skipif(not DJANGO_6, reason=f"Task.__reduce__: {DJANGO_6_ONLY}")
def test_pickle_task() -> None:
    pickled_task = pickle.dumps(test_tasks.noop_task)
    unpickled_task = pickle.loads(pickled_task)

    assert unpickled_task == test_tasks.noop_task


@pytest.mark.skipif(not DJANGO_6, reason=f"Task._reconstruct: {DJANGO_6_ONLY}")
def test_unpickle_arbitrary_string() -> None:
    kwargs = {"func": "does.not.exist.fake_task"}
    msg = "Expected 'does.not.exist.fake_task' to point to a Task instance."
    with pytest.raises(ValueError, match=re.escape(msg)):
        Task._reconstruct(kwargs)


@pytest.mark.skipif(not DJANGO_6, reason=f"Task._reconstruct: {DJANGO_6_ONLY}")
def test_unpickle_non_task_object() -> None:
    kwargs = {"func": "builtins.any"}
    msg = "Expected 'builtins.any' to point to a Task instance."
    with pytest.raises(ValueError, match=re.escape(msg)):
        Task._reconstruct(kwargs)


@pytest.mark.skipif(not DJANGO_6, reason=f"Task.__reduce__: {DJANGO_6_ONLY}")
def test_pickle_task_result(drain) -> None:
    result = test_tasks.noop_task.enqueue()
    pickled_result = pickle.dumps(result)
    unpickled_result = pickle.loads(pickled_result)

    assert unpickled_result == result

    drain()
    finished = test_tasks.noop_task.get_result(result.id)
    assert pickle.loads(pickle.dumps(finished)) == finished


def test_no_backends(tasks_setting) -> None:
    tasks_setting({})
    with pytest.raises(InvalidTaskBackend):
        test_tasks.noop_task.enqueue()
    assert not Occurrence.objects.exists()


def test_task_error_invalid_exception(drain) -> None:
    result = test_tasks.failing_task_value_error.enqueue()
    drain()
    result.refresh()

    assert result.errors
    assert result.errors[0].exception_class is ValueError
    object.__setattr__(result.errors[0], "exception_class_path", "subprocess.run")

    with pytest.raises(
        ValueError, match=re.escape("'subprocess.run' does not reference a valid exception.")
    ):
        result.errors[0].exception_class  # noqa: B018


def test_task_error_unknown_module(drain) -> None:
    result = test_tasks.failing_task_value_error.enqueue()
    drain()
    result.refresh()

    assert result.errors
    object.__setattr__(result.errors[0], "exception_class_path", "does.not.exist")

    with pytest.raises(ImportError):
        result.errors[0].exception_class  # noqa: B018


def test_takes_context_without_taking_context() -> None:
    with pytest.raises(
        InvalidTask,
        match=re.escape("Task takes context but does not have a first argument of 'context'."),
    ):
        task(takes_context=True)(test_tasks.calculate_meaning_of_life.func)


@pytest.mark.skipif(not DJANGO_6, reason=f"@task(run_after=...) refused: {DJANGO_6_ONLY}")
def test_run_after_in_decorator(clock) -> None:
    msg = "run_after cannot be defined statically with the @task decorator."
    with pytest.raises(TypeError, match=re.escape(msg)):
        task(run_after=clock.now())(test_tasks.calculate_meaning_of_life.func)
