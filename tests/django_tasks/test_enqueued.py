# Adapted from Django 6.1.3, tests/tasks/test_dummy_backend.py.
# Copyright (c) Django Software Foundation and individual contributors (BSD-3-Clause: see
# LICENSE.django in this folder). Changes: pytest functions on JobsBackend instead of the
# DummyBackend; what the dummy backend keeps in memory (``results``) is read with get_result;
# refreshing reads what our worker did rather than a result changed by hand; the transaction
# test says what JobsBackend promises instead (the task exists only if the caller commits).
"""A task once enqueued and before our worker runs it: its result, the log line, validation
at enqueue, and the caller's transaction."""

from __future__ import annotations

import logging
import re
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.db import connections, transaction

from django_jobs.models import Occurrence
from django_jobs.tasks import JobsBackend

from ..concurrency import on_own_connection, run_together
from . import tasks as test_tasks
from .conftest import jobs_backend
from .framework import (
    LOGGER,
    InvalidTask,
    TaskResultDoesNotExist,
    TaskResultStatus,
    default_task_backend,
    task_backends,
)

pytestmark = pytest.mark.django_db

TASKS = [test_tasks.noop_task, test_tasks.noop_task_async]


@pytest.fixture(autouse=True)
def backends(tasks_setting) -> None:
    tasks_setting({"default": jobs_backend(QUEUES=[])})


def test_using_correct_backend(settings) -> None:
    assert default_task_backend == task_backends["default"]
    assert isinstance(task_backends["default"], JobsBackend)
    assert default_task_backend.alias == "default"
    assert default_task_backend.options == settings.TASKS["default"]["OPTIONS"]


@pytest.mark.parametrize("task", TASKS, ids=lambda t: t.name)
def test_enqueue_task(task: Any) -> None:
    result = task.enqueue(1, two=3)

    assert result.status == TaskResultStatus.READY
    assert result.is_finished is False
    assert result.started_at is None
    assert result.last_attempted_at is None
    assert result.finished_at is None
    with pytest.raises(ValueError, match="Task has not finished yet"):
        result.return_value  # noqa: B018
    assert result.task == task
    assert result.args == [1]
    assert result.kwargs == {"two": 3}
    assert result.attempts == 0

    assert task.get_result(result.id) == result


@pytest.mark.parametrize("task", TASKS, ids=lambda t: t.name)
def test_enqueue_task_async(task: Any) -> None:
    result = async_to_sync(task.aenqueue)()

    assert result.status == TaskResultStatus.READY
    assert result.is_finished is False
    assert result.started_at is None
    assert result.last_attempted_at is None
    assert result.finished_at is None
    with pytest.raises(ValueError, match="Task has not finished yet"):
        result.return_value  # noqa: B018
    assert result.task == task
    assert result.args == []
    assert result.kwargs == {}
    assert result.attempts == 0

    assert async_to_sync(task.aget_result)(result.id) == result


def test_get_result() -> None:
    result = default_task_backend.enqueue(test_tasks.noop_task, (), {})

    new_result = default_task_backend.get_result(result.id)

    assert result == new_result


def test_get_result_async() -> None:
    result = async_to_sync(default_task_backend.aenqueue)(test_tasks.noop_task, (), {})

    new_result = async_to_sync(default_task_backend.aget_result)(result.id)

    assert result == new_result


def test_refresh_result(drain) -> None:
    result = default_task_backend.enqueue(test_tasks.calculate_meaning_of_life, (), {})
    drain()

    assert result.status == TaskResultStatus.READY
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == 42


def test_refresh_result_async(drain) -> None:
    result = async_to_sync(default_task_backend.aenqueue)(
        test_tasks.calculate_meaning_of_life, (), {}
    )
    drain()

    assert result.status == TaskResultStatus.READY
    async_to_sync(result.arefresh)()
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == 42


def test_get_missing_result() -> None:
    with pytest.raises(TaskResultDoesNotExist):
        default_task_backend.get_result("123")

    with pytest.raises(TaskResultDoesNotExist):
        async_to_sync(default_task_backend.aget_result)("123")


def test_enqueue_logs(caplog) -> None:
    with caplog.at_level(logging.DEBUG, logger=LOGGER):
        result = test_tasks.noop_task.enqueue()

    logged = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert len(logged) == 1
    assert "enqueued" in logged[0]
    assert result.id in logged[0]


def test_errors() -> None:
    result = test_tasks.noop_task.enqueue()
    assert result.errors == []


def test_validate_disallowed_async_task(monkeypatch) -> None:
    monkeypatch.setattr(JobsBackend, "supports_async_task", False)
    # "async Tasks." on Django 6, "async tasks." in the backport.
    with pytest.raises(InvalidTask, match=r"(?i)Backend does not support async Tasks\."):
        default_task_backend.validate_task(test_tasks.noop_task_async)


def test_check() -> None:
    errors = list(default_task_backend.check())
    assert len(errors) == 0, errors


def test_takes_context() -> None:
    result = test_tasks.get_task_id.enqueue()
    assert result.status == TaskResultStatus.READY


@pytest.mark.skip(
    reason="dummy backend internals: DummyBackend.clear() empties its in-memory results; "
    "JobsBackend has no clear(), its results are occurrences that retention purges"
)
def test_clear() -> None:
    result = test_tasks.noop_task.enqueue()

    default_task_backend.get_result(result.id)

    default_task_backend.clear()

    with pytest.raises(TaskResultDoesNotExist, match=result.id):
        default_task_backend.get_result(result.id)


def test_validate_on_enqueue(tasks_setting) -> None:
    task_with_custom_queue_name = test_tasks.noop_task.using(queue_name="unknown_queue")

    tasks_setting({"default": jobs_backend(QUEUES=["queue-1"])})
    with pytest.raises(
        InvalidTask, match=re.escape("Queue 'unknown_queue' is not valid for backend")
    ):
        task_with_custom_queue_name.enqueue()
    assert not Occurrence.objects.exists()


def test_validate_on_aenqueue(tasks_setting) -> None:
    task_with_custom_queue_name = test_tasks.noop_task.using(queue_name="unknown_queue")

    tasks_setting({"default": jobs_backend(QUEUES=["queue-1"])})
    with pytest.raises(
        InvalidTask, match=re.escape("Queue 'unknown_queue' is not valid for backend")
    ):
        async_to_sync(task_with_custom_queue_name.aenqueue)()
    assert not Occurrence.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_waits_until_transaction_commit(drain) -> None:
    """Django's test_doesnt_wait_until_transaction_commit_by_default, for JobsBackend: the
    task is written in the caller's transaction, so the caller reads it at once, and anyone
    else (a worker among them) only once it commits."""

    def seen_elsewhere(result_id: str) -> bool:
        read = on_own_connection(lambda: Occurrence.objects.filter(pk=result_id).exists())
        return run_together(read)[0]

    with transaction.atomic():
        result = test_tasks.noop_task.enqueue()

        assert result.enqueued_at is not None
        assert default_task_backend.get_result(result.id).status == TaskResultStatus.READY
        assert not seen_elsewhere(result.id)

    assert seen_elsewhere(result.id)
    drain()
    assert default_task_backend.get_result(result.id).status == TaskResultStatus.SUCCESSFUL
    connections.close_all()
