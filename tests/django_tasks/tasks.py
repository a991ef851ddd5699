# Adapted from Django 6.1.3, tests/tasks/tasks.py.
# Copyright (c) Django Software Foundation and individual contributors (BSD-3-Clause: see
# LICENSE.django in this folder). Changes: the framework comes through framework.py (Django 6
# or the django_tasks backport); Django's hang and sleep_for, which wait out real time, are
# left out (no test here waits for time to pass); echo, int_keyed_result and
# too_large_result are ours, for what the worker keeps of a return value.
"""The ``@task`` functions of the contract suite, run by django_jobs' worker: inline, and in
``runworker`` processes, which import this module by the path ``JobsBackend`` recorded."""

from typing import Any

from .framework import TaskContext, task


@task()
def noop_task(*args: Any, **kwargs: Any) -> None:
    return None


@task
def noop_task_from_bare_decorator(*args: Any, **kwargs: Any) -> None:
    return None


@task()
async def noop_task_async(*args: Any, **kwargs: Any) -> None:
    return None


@task()
def calculate_meaning_of_life() -> int:
    return 42


@task()
def failing_task_value_error() -> None:
    raise ValueError("This Task failed due to ValueError")


@task()
def failing_task_system_exit() -> None:
    raise SystemExit("This Task failed due to SystemExit")


@task()
def failing_task_keyboard_interrupt() -> None:
    raise KeyboardInterrupt("This Task failed due to KeyboardInterrupt")


@task()
def complex_exception() -> None:
    raise ValueError(ValueError("This task failed"))


@task()
def complex_return_value() -> Any:
    # Return something which isn't JSON serializable nor picklable.
    return lambda: True


@task()
def exit_task() -> None:
    exit(1)


@task(takes_context=True)
def get_task_id(context: Any) -> str:
    return str(context.task_result.id)


@task(takes_context=True)
def test_context(context: Any, attempt: int) -> None:
    assert isinstance(context, TaskContext)
    assert context.attempt == attempt


@task()
def echo(value: Any) -> Any:
    """Returns its argument: what the worker keeps of a return value."""
    return value


@task()
def int_keyed_result() -> dict[int, str]:
    """A mapping with an int key, which Django's normalize_json keeps as it is."""
    return {1: "one"}


@task()
def too_large_result() -> str:
    """A string longer than the 64 KiB the worker keeps of a result."""
    return "x" * 70_000


@task()
def returns_tuple() -> tuple[int, int]:
    """A tuple, which the framework makes a list (normalize_json)."""
    return (1, 2)
