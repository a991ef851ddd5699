"""Django's Tasks framework through ``django_jobs.tasks.JobsBackend`` (issue #18, item 5).

The same tests run on Django 6 (``django.tasks``) and on Django 5.2 with the django-tasks
backport: tests/workerapp/tasks.py imports whichever the framework is. In-process tests run
the worker inline on the test's clock; the last test kills a real replica mid-task.
"""

from __future__ import annotations

import importlib
import signal
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from asgiref.sync import async_to_sync
from django.db import transaction

from django_jobs import tasks as backend_module
from django_jobs.clock import use_clock
from django_jobs.models import Attempt, AttemptOutcome, Occurrence, OccurrenceState, Schedule
from django_jobs.registry import registry
from django_jobs.services.enqueue import policy_key
from django_jobs.tasks import JobsBackend, job_name
from django_jobs.testing import FakeClock, run_due
from tests.workerapp import tasks
from tests.workerapp.models import Effect

from .concurrency import wait_until
from .storeutil import claim_one_at_a_time

# Django 6's framework or the backport, whichever django_jobs.tasks found.
TaskResultStatus = backend_module.TaskResultStatus
TaskResultDoesNotExist = backend_module.TaskResultDoesNotExist

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


def drain(clock: FakeClock, passes: int = 1) -> None:
    with use_clock(clock):
        for _ in range(passes):
            run_due(clock)


def test_the_backend_says_what_it_supports() -> None:
    backend = tasks.add.get_backend()
    assert isinstance(backend, JobsBackend)
    assert backend.supports_defer
    assert backend.supports_priority
    assert backend.supports_get_result
    assert backend.supports_async_task
    assert job_name("default") in registry.names()  # registered at start-up from TASKS


def test_an_enqueued_task_runs_and_its_result_has_status_and_return_value(clock) -> None:
    with use_clock(clock):
        result = tasks.add.enqueue(2, 3)
    assert result.status == TaskResultStatus.READY
    assert result.enqueued_at == T0
    assert result.args == [2, 3]
    drain(clock)

    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == 5
    assert result.is_finished
    assert result.attempts == 1
    assert result.started_at == T0
    assert result.finished_at == T0
    assert result.errors == []
    fetched = tasks.add.get_result(result.id)
    assert (fetched.status, fetched.return_value, fetched.args) == (
        TaskResultStatus.SUCCESSFUL,
        5,
        [2, 3],
    )


def test_the_result_is_kept_on_the_occurrence_of_the_aliases_job(clock) -> None:
    with use_clock(clock):
        result = tasks.add.enqueue(1, 1)
    drain(clock)
    occurrence = Occurrence.objects.get(pk=result.id)
    assert occurrence.schedule.key == policy_key(job_name("default"))
    assert occurrence.result == 2
    assert occurrence.args["task"] == "tests.workerapp.tasks.add"
    record = Schedule.objects.get(pk=occurrence.schedule_id)
    assert (record.max_attempts, record.record_owner) == (3, "team-tests")


def test_a_failing_task_is_retried_and_its_errors_are_reported_after_the_last_attempt(
    clock,
) -> None:
    with use_clock(clock):
        result = tasks.always_fails.enqueue()
    drain(clock, passes=3)
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert result.attempts == 3
    assert len(result.errors) == 3
    assert {e.exception_class for e in result.errors} == {RuntimeError}
    assert all("this task always fails" in e.traceback for e in result.errors)
    with pytest.raises(ValueError, match="Task failed"):
        result.return_value  # noqa: B018


def test_a_task_that_takes_context_sees_its_attempt_and_succeeds_on_a_retry(clock) -> None:
    with use_clock(clock):
        result = tasks.flaky.enqueue(fail_until=2)
    drain(clock)  # no backoff here: the retry runs in the same pass
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == {"attempt": 2}
    assert result.attempts == 2
    (error,) = result.errors  # the first attempt's
    assert error.exception_class is ValueError
    assert "attempt 1 failed on purpose" in error.traceback


def test_higher_priority_tasks_run_first(clock) -> None:
    with use_clock(clock):
        low = tasks.noted.using(priority=-10).enqueue("low")
        default = tasks.noted.enqueue("default")
        high = tasks.noted.using(priority=50).enqueue("high")
    claim_one_at_a_time(clock, 3)
    assert list(Effect.objects.order_by("id").values_list("occurrence_key", flat=True)) == [
        "high",
        "default",
        "low",
    ]
    for result in (low, default, high):
        result.refresh()
        assert result.status == TaskResultStatus.SUCCESSFUL


def test_run_after_defers_the_task(clock) -> None:
    with use_clock(clock):
        result = tasks.add.using(run_after=T0 + timedelta(minutes=10)).enqueue(4, 4)
    drain(clock)
    result.refresh()
    assert result.status == TaskResultStatus.READY
    clock.advance(timedelta(minutes=10))
    drain(clock)
    result.refresh()
    assert (result.status, result.return_value) == (TaskResultStatus.SUCCESSFUL, 8)


def test_an_async_task_runs_and_aenqueue_and_aget_result_work(clock) -> None:
    with use_clock(clock):
        result = async_to_sync(tasks.async_double.aenqueue)(21)
    drain(clock)
    fetched = async_to_sync(tasks.async_double.aget_result)(result.id)
    assert (fetched.status, fetched.return_value) == (TaskResultStatus.SUCCESSFUL, 42)


def test_a_task_enqueued_in_a_transaction_that_rolls_back_never_exists(clock) -> None:
    with use_clock(clock), pytest.raises(RuntimeError), transaction.atomic():  # noqa: PT012
        result = tasks.add.enqueue(1, 2)
        raise RuntimeError("the caller failed")
    drain(clock)
    with pytest.raises(TaskResultDoesNotExist):
        tasks.add.get_result(result.id)


def test_an_unknown_result_id_does_not_exist() -> None:
    with pytest.raises(TaskResultDoesNotExist):
        tasks.add.get_result("not-a-uuid")
    with pytest.raises(TaskResultDoesNotExist):
        tasks.add.get_result("6f1c3f0e-5d7b-5b8e-9a51-3f2d1f6c9a10")


def test_bad_options_are_refused_naming_the_alias_and_the_key() -> None:
    from django_jobs.exceptions import ConfigurationError
    from django_jobs.tasks import TaskOptions

    with pytest.raises(ConfigurationError, match=r"TASKS\['fast'\]\['OPTIONS'\]: unknown"):
        TaskOptions.parse("fast", {"RETRIES": 2})
    with pytest.raises(ConfigurationError, match=r"\['MAX_ATTEMPTS'\]: a number of 0 or more"):
        TaskOptions.parse("fast", {"MAX_ATTEMPTS": "3"})
    assert TaskOptions.parse("fast", {"MAX_ATTEMPTS": 5}).policies.retry.max_attempts == 5


# --- A real replica killed mid-task -----------------------------------------------------


@pytest.mark.django_db(transaction=True)
@pytest.mark.processes
def test_a_task_whose_replica_is_sigkilled_mid_run_still_completes_once_fenced(
    start, tmp_path: Path
) -> None:
    result = tasks.effect_after_start.enqueue("kill-me")
    a = start("a")
    wait_until(
        lambda: any(p.name.startswith("started-kill-me") for p in tmp_path.iterdir()),
        timeout=60,
        what="replica a to start the task",
    )
    a.signal(signal.SIGKILL)
    a.wait_exit()
    b = start("b")
    wait_until(
        lambda: len([p for p in tmp_path.iterdir() if p.name.startswith("started-kill-me")]) == 2,
        timeout=60,
        what="replica b to take the task over once a's lease expired",
    )
    (tmp_path / "go").touch()
    wait_until(
        lambda: Occurrence.objects.filter(pk=result.id, state=OccurrenceState.COMPLETED).exists(),
        timeout=60,
        what="the task to complete on b",
    )
    assert Counter(Effect.objects.values_list("occurrence_key", flat=True)) == {"kill-me": 1}
    attempts = list(Attempt.objects.filter(occurrence_id=result.id).order_by("number"))
    assert [x.replica for x in attempts] == ["a", "b"]
    assert attempts[1].fencing_token > attempts[0].fencing_token
    assert attempts[0].outcome == AttemptOutcome.LEASE_LOST
    assert attempts[1].outcome == AttemptOutcome.SUCCEEDED
    result.refresh()
    assert (result.status, result.return_value, result.worker_ids) == (
        TaskResultStatus.SUCCESSFUL,
        "kill-me",
        ["a", "b"],
    )
    b.stop()


# --- The framework's own expectations of a backend ------------------------------------------


def test_a_result_before_its_run_is_not_finished_and_has_no_return_value(clock) -> None:
    with use_clock(clock):
        result = tasks.add.enqueue(a=1, b=(2,))  # keyword arguments, a tuple made a list
    assert result.kwargs == {"a": 1, "b": [2]}
    assert not result.is_finished
    assert result.attempts == 0
    with pytest.raises(ValueError, match="Task has not finished yet"):
        result.return_value  # noqa: B018
    fetched = tasks.add.get_result(result.id)
    assert (fetched.status, fetched.started_at, fetched.finished_at) == (
        TaskResultStatus.READY,
        None,
        None,
    )
    assert fetched.kwargs == {"a": 1, "b": [2]}


def test_arefresh_reads_the_result_again(clock) -> None:
    with use_clock(clock):
        result = tasks.add.enqueue(20, 22)
    drain(clock)
    async_to_sync(result.arefresh)()
    assert (result.status, result.return_value) == (TaskResultStatus.SUCCESSFUL, 42)


def test_the_backend_refuses_what_the_framework_says_is_invalid(clock) -> None:
    # Django 6 names it InvalidTask, the backport InvalidTaskError.
    framework = importlib.import_module(f"{backend_module.FRAMEWORK}.exceptions")
    invalid = getattr(framework, "InvalidTask", None) or framework.InvalidTaskError
    with use_clock(clock):
        with pytest.raises(invalid, match="Queue 'nowhere' is not valid"):
            tasks.add.using(queue_name="nowhere").enqueue(1, 2)
        with pytest.raises(invalid, match="run_after must be an aware"):
            tasks.add.using(run_after=datetime(2030, 1, 1)).enqueue(1, 2)  # noqa: DTZ001
        with pytest.raises(invalid, match="priority must be a whole"):
            tasks.add.using(priority=101).enqueue(1, 2)
    assert not Occurrence.objects.exists()


def test_arguments_json_cannot_hold_are_refused_naming_the_job(clock) -> None:
    from django_jobs.exceptions import JobsError

    with use_clock(clock), pytest.raises(JobsError, match=r"task 'tests\.workerapp\.tasks\.add'"):
        tasks.add.enqueue(object(), 1)
    with use_clock(clock), pytest.raises(TypeError, match="a task's arguments must be JSON"):
        tasks.add.enqueue(1, b={"when": object()})
    assert not Occurrence.objects.exists()
