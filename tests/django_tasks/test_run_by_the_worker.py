# Adapted from Django 6.1.3, tests/tasks/test_immediate_backend.py.
# Copyright (c) Django Software Foundation and individual contributors (BSD-3-Clause: see
# LICENSE.django in this folder). Changes: pytest functions on JobsBackend instead of the
# ImmediateBackend; a task runs when our worker's inline passes run it (``drain``), not inside
# enqueue, and its result is read with get_result; a failing task is retried up to the alias's
# MAX_ATTEMPTS (3, no backoff) before it is FAILED, so the assertions on its errors and log
# lines read the last attempt's; Django's test_catches_exception is split by behaviour (status,
# traceback, log line) and by exception; the transaction test is in test_enqueued.py (where it
# is the dummy backend's); Django's test_validate_on_enqueue and test_validate_on_aenqueue,
# the same tests as the dummy backend's, run there. Tests marked "Ours" state the framework's
# contract that ImmediateBackend's code keeps and Django's tests do not check.
"""A task run by our worker: its result, errors, tracebacks, log lines and signals."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from asgiref.sync import async_to_sync

from django_jobs.tasks import JobsBackend, task_finished

from . import tasks as test_tasks
from .conftest import jobs_backend
from .framework import (
    LOGGER,
    TaskResultStatus,
    default_task_backend,
    task_backends,
)

pytestmark = pytest.mark.django_db

TASKS = [test_tasks.noop_task, test_tasks.noop_task_async]
ATTEMPTS = 3  # MAX_ATTEMPTS of the suite's alias (tests/settings.py)


@pytest.fixture(autouse=True)
def backends(tasks_setting) -> None:
    tasks_setting({"default": jobs_backend(QUEUES=[])})


@pytest.fixture
def run(drain) -> Callable[..., Any]:
    """Enqueue ``task`` with the arguments, let our worker run it, return its result."""

    def run(task: Any, *args: Any, **kwargs: Any) -> Any:
        result = task.enqueue(*args, **kwargs)
        drain()
        return task.get_result(result.id)

    return run


@pytest.fixture
def finished() -> Iterator[list[Any]]:
    """The results ``task_finished`` carried, as they were when it was sent."""
    sent: list[Any] = []

    def receiver(sender: Any, task_result: Any, **kwargs: Any) -> None:
        value = task_result._return_value
        sent.append((task_result.status, value, list(task_result.errors)))

    task_finished.connect(receiver)
    yield sent
    task_finished.disconnect(receiver)


def logged(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == LOGGER]


def test_using_correct_backend(settings) -> None:
    assert default_task_backend == task_backends["default"]
    assert isinstance(task_backends["default"], JobsBackend)
    assert default_task_backend.alias == "default"
    assert default_task_backend.options == settings.TASKS["default"]["OPTIONS"]


def assert_ran_once(result: Any, task: Any, args: list[Any], kwargs: dict[str, Any]) -> None:
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.is_finished is True
    assert result.started_at is not None
    assert result.last_attempted_at is not None
    assert result.finished_at is not None
    assert result.started_at >= result.enqueued_at
    assert result.finished_at >= result.started_at
    assert result.return_value is None
    assert result.task == task
    assert result.args == args
    assert result.kwargs == kwargs
    assert result.attempts == 1


@pytest.mark.parametrize("task", TASKS, ids=lambda t: t.name)
def test_enqueue_task(task: Any, run) -> None:
    assert_ran_once(run(task, 1, two=3), task, [1], {"two": 3})


@pytest.mark.parametrize("task", TASKS, ids=lambda t: t.name)
def test_enqueue_task_async(task: Any, drain) -> None:
    result = async_to_sync(task.aenqueue)()
    drain()
    assert_ran_once(async_to_sync(task.aget_result)(result.id), task, [], {})


FAILING = [
    (test_tasks.failing_task_value_error, ValueError, "This Task failed due to ValueError"),
    (test_tasks.failing_task_system_exit, SystemExit, "This Task failed due to SystemExit"),
]
FAILING_IDS = ["ValueError", "SystemExit"]


@pytest.mark.parametrize(("task", "exception", "message"), FAILING, ids=FAILING_IDS)
def test_catches_exception(task: Any, exception: type, message: str, run) -> None:
    result = run(task)

    assert result.status == TaskResultStatus.FAILED
    with pytest.raises(ValueError, match="Task failed"):
        result.return_value  # noqa: B018
    assert result.is_finished is True
    assert result.started_at is not None
    assert result.last_attempted_at is not None
    assert result.finished_at is not None
    assert result.started_at >= result.enqueued_at
    assert result.finished_at >= result.started_at
    assert {e.exception_class for e in result.errors} == {exception}
    assert result.task == task
    assert result.args == []
    assert result.kwargs == {}


@pytest.mark.parametrize(("task", "exception", "message"), FAILING, ids=FAILING_IDS)
def test_catches_exception_traceback(task: Any, exception: type, message: str, run) -> None:
    """Django's test_catches_exception: the error's traceback ends with the exception."""
    traceback = run(task).errors[-1].traceback
    assert traceback.startswith("Traceback (most recent call last):"), traceback
    assert traceback.endswith(f"{exception.__name__}: {message}\n"), traceback


@pytest.mark.parametrize(("task", "exception", "message"), FAILING, ids=FAILING_IDS)
def test_catches_exception_logs(task: Any, exception: type, message: str, run, caplog) -> None:
    """Django's test_catches_exception: one ERROR line, once the task has failed, with the
    exception."""
    with caplog.at_level(logging.DEBUG, logger=LOGGER):
        result = run(task)

    errors = [r for r in logged(caplog) if r.levelno >= logging.ERROR]
    assert len(errors) == 1
    assert "state=FAILED" in errors[0].getMessage()
    assert result.id in errors[0].getMessage()


def test_a_failing_task_is_retried_up_to_its_last_attempt(run) -> None:
    """Ours: where the ImmediateBackend runs a task once, our worker retries it (the alias's
    MAX_ATTEMPTS); each attempt's error is kept."""
    result = run(test_tasks.failing_task_value_error)
    assert result.attempts == ATTEMPTS
    assert len(result.errors) == ATTEMPTS
    assert len(result.worker_ids) == ATTEMPTS


@pytest.mark.parametrize("task", [test_tasks.failing_task_system_exit, test_tasks.exit_task])
def test_a_task_that_exits_fails_at_once(task: Any, run) -> None:
    """Ours: SystemExit (raised, or exit()) is no error to retry; the task is FAILED after its
    first attempt, as ImmediateBackend has it."""
    result = run(task)
    assert result.status == TaskResultStatus.FAILED
    assert result.attempts == 1
    assert [e.exception_class for e in result.errors] == [SystemExit]


def test_throws_keyboard_interrupt(run) -> None:
    """Django's test: ImmediateBackend lets KeyboardInterrupt reach the caller of enqueue, who
    pressed Ctrl-C. Our task runs in a worker, where no caller is there to stop: enqueue does
    not raise, the worker records the task's failure and keeps running."""
    result = run(test_tasks.failing_task_keyboard_interrupt)
    assert result.status == TaskResultStatus.FAILED
    assert {e.exception_class for e in result.errors} == {KeyboardInterrupt}
    assert run(test_tasks.calculate_meaning_of_life).return_value == 42


def test_complex_exception(run) -> None:
    result = run(test_tasks.complex_exception)

    assert result.status == TaskResultStatus.FAILED
    with pytest.raises(ValueError, match="Task failed"):
        result.return_value  # noqa: B018
    assert result.started_at is not None
    assert result.last_attempted_at is not None
    assert result.finished_at is not None
    assert result.started_at >= result.enqueued_at
    assert result.finished_at >= result.started_at

    assert result._return_value is None
    assert result.errors[0].exception_class is ValueError

    assert result.task == test_tasks.complex_exception
    assert result.args == []
    assert result.kwargs == {}


def test_complex_exception_traceback(run) -> None:
    """Django's test_complex_exception: the traceback shows the raising line."""
    result = run(test_tasks.complex_exception)
    assert 'ValueError(ValueError("This task failed"))' in result.errors[0].traceback


def test_complex_return_value(run) -> None:
    result = run(test_tasks.complex_return_value)

    assert result.status == TaskResultStatus.FAILED
    assert result.started_at is not None
    assert result.last_attempted_at is not None
    assert result.finished_at is not None
    assert result.started_at >= result.enqueued_at
    assert result.finished_at >= result.started_at
    assert result._return_value is None
    assert result.errors[0].exception_class is TypeError
    assert "Unsupported type" in result.errors[0].traceback


def test_complex_return_value_logs(run, caplog) -> None:
    """Django's test_complex_return_value: the failure is logged as an error, and the task is
    never reported SUCCESSFUL."""
    with caplog.at_level(logging.DEBUG, logger=LOGGER):
        run(test_tasks.complex_return_value)
    messages = [r.getMessage() for r in logged(caplog)]
    assert not [m for m in messages if "state=SUCCESSFUL" in m], messages
    assert [r for r in logged(caplog) if r.levelno >= logging.ERROR], messages


def test_result(run) -> None:
    result = run(test_tasks.calculate_meaning_of_life)

    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == 42


def test_result_async(drain) -> None:
    result = async_to_sync(default_task_backend.aenqueue)(
        test_tasks.calculate_meaning_of_life, [], {}
    )
    drain()
    result = async_to_sync(default_task_backend.aget_result)(result.id)

    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == 42


@pytest.mark.skip(
    reason="immediate backend internals: ImmediateBackend cannot retrieve results "
    "(supports_get_result False); JobsBackend can: test_enqueued.py's test_get_result"
)
def test_cannot_get_result() -> None:
    with pytest.raises(NotImplementedError):
        default_task_backend.get_result("123")


@pytest.mark.skip(
    reason="immediate backend internals: ImmediateBackend cannot refresh results; JobsBackend "
    "can: test_enqueued.py's test_refresh_result"
)
def test_cannot_refresh_result() -> None:
    result = default_task_backend.enqueue(test_tasks.calculate_meaning_of_life, (), {})
    with pytest.raises(NotImplementedError):
        result.refresh()


@pytest.mark.skip(
    reason="immediate backend internals: ImmediateBackend refuses run_after (supports_defer "
    "False); JobsBackend defers: test_tasks.py's test_a_task_runs_no_earlier_than_its_run_after"
)
def test_cannot_pass_run_after() -> None:
    raise AssertionError("not run")


def test_enqueue_logs(run, caplog) -> None:
    with caplog.at_level(logging.DEBUG, logger=LOGGER):
        result = run(test_tasks.noop_task)

    messages = [r.getMessage() for r in logged(caplog)]
    assert len(messages) == 3, messages

    assert "enqueued" in messages[0]
    assert result.id in messages[0]

    assert "state=RUNNING" in messages[1]
    assert result.id in messages[1]

    assert "state=SUCCESSFUL" in messages[2]
    assert result.id in messages[2]


def test_failed_logs(run, caplog) -> None:
    """Django's test, with one RUNNING line for each attempt before the FAILED one."""
    with caplog.at_level(logging.DEBUG, logger=LOGGER):
        result = run(test_tasks.failing_task_value_error)

    messages = [r.getMessage() for r in logged(caplog)]
    assert len(messages) == 2 + ATTEMPTS, messages
    for message in messages[1:-1]:
        assert "state=RUNNING" in message
        assert result.id in message

    assert "state=FAILED" in messages[-1]
    assert result.id in messages[-1]


def test_successful_task_no_none_in_logs(run, caplog) -> None:
    with caplog.at_level(logging.DEBUG, logger=LOGGER):
        result = run(test_tasks.noop_task)

    assert result.status == TaskResultStatus.SUCCESSFUL

    for record in logged(caplog):
        assert "None" not in record.getMessage()


def test_takes_context(run) -> None:
    result = run(test_tasks.get_task_id)

    assert result.return_value == result.id


def test_context(run) -> None:
    result = run(test_tasks.test_context, 1)
    assert result.status == TaskResultStatus.SUCCESSFUL


# --- Ours: the signals as ImmediateBackend sends them ---------------------------------------


def test_task_finished_carries_the_successful_result(run, finished) -> None:
    run(test_tasks.calculate_meaning_of_life)
    assert finished == [(TaskResultStatus.SUCCESSFUL, 42, [])]


def test_task_finished_carries_the_normalised_return_value(run, finished) -> None:
    result = run(test_tasks.returns_tuple)
    assert result.return_value == [1, 2]
    assert finished == [(TaskResultStatus.SUCCESSFUL, [1, 2], [])]


def test_task_finished_is_sent_once_for_a_failed_task(run, finished) -> None:
    run(test_tasks.failing_task_value_error)
    assert len(finished) == 1
    status, value, errors = finished[0]
    assert (status, value) == (TaskResultStatus.FAILED, None)
    assert errors
    assert errors[-1].exception_class is ValueError
