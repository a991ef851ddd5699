# Adapted from Django 6.1.3, tests/tasks/test_immediate_backend.py (a representative subset).
# Copyright (c) Django Software Foundation and individual contributors (BSD-3-Clause: see
# LICENSE.django in this folder). Changes: the tasks are run by real ``runworker --once``
# processes against the test database (tests/processes.py) instead of inside enqueue; the
# transaction test is the dummy backend's (tests/tasks/test_dummy_backend.py), for a worker
# in another process.
"""Django's contract with the tasks run by real ``runworker --once`` replicas: the task
module is imported by the worker from the path JobsBackend recorded, results and errors are
read back with get_result."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.db import transaction

from ..processes import Replica, log_tail
from . import tasks as test_tasks
from .framework import TaskResultStatus

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.processes]

ATTEMPTS = 3  # MAX_ATTEMPTS of the replicas' alias (tests/settings.py, worker_settings.py)


@pytest.fixture
def run_once(start) -> Callable[[str], Replica]:
    """Run a ``runworker --once`` replica until it exits; it must exit 0."""

    def run_once(name: str) -> Replica:
        replica: Replica = start(name, once=True)
        code = replica.wait_exit(timeout=120)
        assert code == 0, log_tail(replica)
        return replica

    return run_once


def result_of(task: Any, result: Any) -> Any:
    return task.get_result(result.id)


def test_tasks_run_in_a_replica_and_their_results_are_read_back(run_once) -> None:
    """Django's test_enqueue_task, test_result and test_takes_context."""
    meaning = test_tasks.calculate_meaning_of_life.enqueue()
    noop_async = test_tasks.noop_task_async.enqueue(1, two=3)
    context = test_tasks.get_task_id.enqueue()

    replica = run_once("a")

    result = result_of(test_tasks.calculate_meaning_of_life, meaning)
    assert (result.status, result.return_value) == (TaskResultStatus.SUCCESSFUL, 42), log_tail(
        replica
    )
    assert result.worker_ids == ["a"]
    assert result.attempts == 1
    assert result.started_at >= result.enqueued_at
    assert result.finished_at >= result.started_at

    result = result_of(test_tasks.noop_task_async, noop_async)
    assert (result.status, result.return_value) == (TaskResultStatus.SUCCESSFUL, None)
    assert (result.args, result.kwargs) == ([1], {"two": 3})

    result = result_of(test_tasks.get_task_id, context)
    assert (result.status, result.return_value) == (TaskResultStatus.SUCCESSFUL, context.id)


def test_failing_tasks_are_failed_and_the_replica_runs_on(run_once) -> None:
    """Django's test_catches_exception, test_complex_return_value and
    test_throws_keyboard_interrupt: each task fails after its last attempt, with its error, and
    the replica exits 0."""
    failing = {
        test_tasks.failing_task_value_error: ValueError,
        test_tasks.complex_return_value: TypeError,
        test_tasks.failing_task_keyboard_interrupt: KeyboardInterrupt,
        test_tasks.failing_task_system_exit: SystemExit,
        test_tasks.exit_task: SystemExit,
    }
    enqueued = {task: task.enqueue() for task in failing}
    after = test_tasks.calculate_meaning_of_life.enqueue()

    replica = run_once("a")

    for task, exception in failing.items():
        result = result_of(task, enqueued[task])
        assert result.status == TaskResultStatus.FAILED, (task.name, log_tail(replica))
        assert result.errors, task.name
        assert {e.exception_class for e in result.errors} == {exception}, task.name
        with pytest.raises(ValueError, match="Task failed"):
            result.return_value  # noqa: B018
    assert (
        "Unsupported type"
        in result_of(test_tasks.complex_return_value, enqueued[test_tasks.complex_return_value])
        .errors[-1]
        .traceback
    )
    value_error = result_of(
        test_tasks.failing_task_value_error, enqueued[test_tasks.failing_task_value_error]
    )
    assert value_error.attempts == ATTEMPTS
    assert result_of(test_tasks.calculate_meaning_of_life, after).return_value == 42


def test_a_task_that_exits_fails_at_once_in_a_replica(run_once) -> None:
    raised = test_tasks.failing_task_system_exit.enqueue()
    exited = test_tasks.exit_task.enqueue()

    run_once("a")

    for task, enqueued in (
        (test_tasks.failing_task_system_exit, raised),
        (test_tasks.exit_task, exited),
    ):
        result = result_of(task, enqueued)
        assert (result.status, result.attempts) == (TaskResultStatus.FAILED, 1), task.name


def test_a_replica_runs_a_task_only_once_its_transaction_commits(run_once) -> None:
    """Django's test_doesnt_wait_until_transaction_commit_by_default, for JobsBackend: a
    replica that runs while the enqueuing transaction is open does not see the task; one that
    runs after the commit runs it."""
    with transaction.atomic():
        result = test_tasks.calculate_meaning_of_life.enqueue()
        run_once("before-commit")

    assert result_of(test_tasks.calculate_meaning_of_life, result).status == (
        TaskResultStatus.READY
    )
    run_once("after-commit")
    finished = result_of(test_tasks.calculate_meaning_of_life, result)
    assert (finished.status, finished.return_value, finished.worker_ids) == (
        TaskResultStatus.SUCCESSFUL,
        42,
        ["after-commit"],
    )
