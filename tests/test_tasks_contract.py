"""The Tasks framework's contract through ``JobsBackend`` where Django's own tests/tasks suite
found it broken (issue #36, items 1-8): tracebacks, ``SystemExit``, ``task_finished``, JSON
normalisation, priorities, the framework's exception types for our limits, and aliases added
at run time. Inline runs on the test's clock, on Django 6 and on Django 5.2 with the backport.
"""

from __future__ import annotations

import dataclasses
import logging
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.conf import settings
from django.test import override_settings
from structlog.testing import capture_logs

from django_jobs import safe_error
from django_jobs import tasks as backend_module
from django_jobs.clock import use_clock
from django_jobs.exceptions import JobsError, WorkerLost
from django_jobs.models import Attempt, Occurrence
from django_jobs.registry import registry
from django_jobs.safe_error import TRACEBACK_MAX_CHARS
from django_jobs.tasks import TaskLimitExceeded, job_name
from django_jobs.testing import FakeClock, run_due
from django_jobs.validation import ARGS_MAX_BYTES, RESULT_MAX_BYTES
from tests.workerapp.tasks import task

from .storeutil import claim

TaskResultStatus = backend_module.TaskResultStatus

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def _inner_failure() -> None:
    raise RuntimeError("could not connect: password=hunter2")


@task()
def fails_deep() -> None:
    _inner_failure()


@task()
def fails_long() -> None:
    raise ValueError("x" * 40_000 + " the end")


# A private key's body and a value on the line after its name: secrets that span lines.
KEY_BODY = [
    "MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gun",
    "VTLw7onLRnrq0/IzW7yWR7QkrmBL7jTKEn5u+qKhbwKfBstIs+bMY2Zkp18gnTxK",
    "LxoS2tFczGkPLPgizskuemMghRniWaoLcyehkd3qqGElvW/VDL5AaWTg0nLVkjRo",
]
PEM = "\n".join(["-----BEGIN RSA PRIVATE KEY-----", *KEY_BODY, "-----END RSA PRIVATE KEY-----"])
MULTI_LINE_SECRETS = "could not sign:\n" + PEM + "\npassword =\n  hunter2secret"


@task()
def fails_with_a_key() -> None:
    raise ValueError(MULTI_LINE_SECRETS)


@task()
def fails_with_a_key_at_length(padding: int) -> None:
    # The key, then enough lines that its BEGIN line falls out of any bounded window.
    raise ValueError(PEM.replace(KEY_BODY[0], "\n".join([KEY_BODY[0]] * padding)))


@task()
def fails_huge() -> None:
    raise ValueError("\n".join(f"line {n} of a huge message" for n in range(200_000)))


@task()
def exits_by_exit() -> None:
    exit(1)


@task()
def raises_system_exit() -> None:
    raise SystemExit("This Task failed due to SystemExit")


@task()
def raises_keyboard_interrupt() -> None:
    raise KeyboardInterrupt("This Task failed due to KeyboardInterrupt")


@task()
def returns_tuple() -> tuple[int, int]:
    return (1, 2)


@task()
def returns_object() -> object:
    return object()


@task()
def enqueues_too_much() -> None:
    echo.enqueue("z" * ARGS_MAX_BYTES)  # TaskLimitExceeded, raised by the task's own code


@task()
def returns_int_keys() -> dict[int, str]:
    return {1: "one"}


@task()
def returns_too_much() -> str:
    return "y" * (RESULT_MAX_BYTES + 1)


# What each of these tasks returns cannot be kept; each run is counted (its side effect).
UNKEPT_RUNS: list[str] = []


def _nested(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth):
        value = [value]
    return value


UNKEPT = {
    "too_much": ("y" * (RESULT_MAX_BYTES + 1), f"at most {RESULT_MAX_BYTES} bytes"),
    "nan": ({"ratio": float("nan")}, "must be a finite number"),
    "nul": ("a\x00b", "NUL"),
    "deep": (_nested(40), "levels deep"),
}


@task()
def returns_unkept(which: str) -> Any:
    UNKEPT_RUNS.append(which)
    return UNKEPT[which][0]


@task()
def echo(*args: Any, **kwargs: Any) -> list[Any]:
    return [list(args), kwargs]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


def drain(clock: FakeClock) -> None:
    with use_clock(clock):
        run_due(clock)


def run(task_: Any, clock: FakeClock, *args: Any, **kwargs: Any) -> Any:
    with use_clock(clock):
        result = task_.enqueue(*args, **kwargs)
    drain(clock)
    result.refresh()
    return result


# Item 1: a real traceback, redacted as one text, bounded.


def test_a_failed_attempts_error_holds_its_traceback_redacted(clock) -> None:
    result = run(fails_deep, clock)
    assert result.status == TaskResultStatus.FAILED
    traceback = result.errors[0].traceback
    assert traceback.startswith("Traceback (most recent call last):\n")
    assert "in fails_deep" in traceback
    assert "in _inner_failure" in traceback  # the frame that raised
    # The source line and the message both hold the secret: both are redacted.
    assert 'raise RuntimeError("could not connect: password=[redacted]")' in traceback
    assert traceback.endswith("RuntimeError: could not connect: password=[redacted]\n")
    assert "hunter2" not in traceback
    assert result.errors[0].exception_class is RuntimeError


def test_a_traceback_is_bounded_keeping_its_end(clock) -> None:
    traceback = run(fails_long, clock).errors[0].traceback
    assert len(traceback) <= TRACEBACK_MAX_CHARS
    assert traceback.startswith("[truncated]")
    assert traceback.endswith(" the end\n")


def _secret_pieces() -> list[str]:
    return [*KEY_BODY, "hunter2secret", "-----END RSA PRIVATE KEY-----"]


def test_secrets_that_span_lines_are_hidden_in_a_stored_traceback_and_its_logs(clock) -> None:
    with capture_logs() as logs:
        result = run(fails_with_a_key, clock)
    assert result.status == TaskResultStatus.FAILED
    occurrence = Occurrence.objects.get(pk=result.id)
    stored = [
        *Attempt.objects.filter(occurrence=occurrence).values_list("error_message", flat=True),
        occurrence.last_error_message,
        *(error.traceback for error in result.errors),
        *(str(entry) for entry in logs),
    ]
    assert len(stored) >= 3 + 3 + 3  # three attempts, the occurrence, three errors, the logs
    assert "in fails_with_a_key" in result.errors[-1].traceback  # still a traceback
    assert "[redacted]" in result.errors[-1].traceback
    for text in stored:
        for piece in _secret_pieces():
            assert piece not in text, (piece, text)


def test_a_key_whose_begin_line_is_cut_off_a_long_traceback_is_hidden(clock) -> None:
    # 2,000 lines of 64 characters: far more than any window read, so the BEGIN line is
    # cut off with the start of the traceback; its body's last lines and END are kept.
    result = run(fails_with_a_key_at_length, clock, 2_000)
    traceback = result.errors[-1].traceback
    assert traceback.startswith("[truncated]")
    assert traceback.endswith("[redacted]\n")
    for piece in _secret_pieces():
        assert piece not in traceback


def test_a_huge_traceback_is_cut_before_it_is_redacted(clock, monkeypatch) -> None:
    redacted: list[int] = []
    found = safe_error._found

    def counted(text: str, patterns: tuple[str, ...]) -> Any:
        redacted.append(len(text))
        return found(text, patterns)

    monkeypatch.setattr(safe_error, "_found", counted)
    traceback = run(fails_huge, clock).errors[-1].traceback
    assert traceback.endswith("line 199999 of a huge message\n")
    assert len(traceback) <= TRACEBACK_MAX_CHARS
    # Each of the 3 attempts redacts its type, its message's first 64 KiB and one window of
    # the traceback's end (under 128 KiB); never the 5 MB message's 200,000 lines one by one.
    assert redacted
    assert max(redacted) <= 128 * 1024
    assert len(redacted) <= 20
    assert sum(redacted) <= 3 * (64 + 128) * 1024


# Item 2: SystemExit, exit() and KeyboardInterrupt fail the task at once.


@pytest.mark.parametrize(
    ("task_", "exception", "ending"),
    [
        (exits_by_exit, SystemExit, "SystemExit: 1\n"),
        (raises_system_exit, SystemExit, "SystemExit: This Task failed due to SystemExit\n"),
        (
            raises_keyboard_interrupt,
            KeyboardInterrupt,
            "KeyboardInterrupt: This Task failed due to KeyboardInterrupt\n",
        ),
    ],
)
def test_a_task_that_exits_is_failed_at_once_with_an_importable_class(
    clock, task_, exception, ending
) -> None:
    result = run(task_, clock)
    assert result.status == TaskResultStatus.FAILED
    assert result.attempts == 1  # never retried (MAX_ATTEMPTS is 3)
    assert [e.exception_class for e in result.errors] == [exception]
    assert result.errors[0].traceback.endswith(ending)
    assert run(echo, clock, 1).return_value == [[1], {}]  # the worker goes on


def test_a_task_whose_workers_were_lost_fails_with_an_importable_worker_lost(clock) -> None:
    with use_clock(clock):
        result = echo.enqueue()
    now = T0
    while Occurrence.objects.get(pk=result.id).state != "dead":
        claim("lost-replica", now, lease_for=timedelta(seconds=1))  # and never finish
        now += timedelta(seconds=2)
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert result.errors[-1].exception_class is WorkerLost
    assert "ended without an outcome" in result.errors[-1].traceback


# Items 3 and 4: task_finished once the outcome is stored, equal to what get_result returns.


@pytest.fixture
def finished() -> Any:
    seen: list[Any] = []

    def receive(sender: Any, task_result: Any, **kwargs: Any) -> None:
        seen.append(task_result)

    backend_module.task_finished.connect(receive)
    yield seen
    backend_module.task_finished.disconnect(receive)


def test_a_failed_task_sends_task_finished_failed_and_logs_it(
    clock, finished, caplog, django_capture_on_commit_callbacks
) -> None:
    caplog.set_level(logging.INFO, logger=backend_module.FRAMEWORK.replace(".", "_"))
    caplog.set_level(logging.INFO, logger="django.tasks")
    with django_capture_on_commit_callbacks(execute=True):
        result = run(fails_deep, clock)
    assert [r.status for r in finished] == [TaskResultStatus.FAILED]  # once, at the last attempt
    assert finished[0].id == result.id
    assert finished[0].errors == result.errors
    failed_lines = [
        r for r in caplog.records if r.levelno == logging.ERROR and "state=FAILED" in r.getMessage()
    ]
    assert failed_lines, [r.getMessage() for r in caplog.records]


def test_task_finished_carries_the_stored_result_after_it_is_checked(
    clock, finished, django_capture_on_commit_callbacks
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        kept = run(returns_tuple, clock)
        refused = run(returns_object, clock)
    assert kept.return_value == [1, 2]
    assert refused.status == TaskResultStatus.FAILED
    assert "Unsupported type" in refused.errors[0].traceback  # the framework's own error
    by_id = {r.id: r for r in finished}
    assert (by_id[kept.id].status, by_id[kept.id].return_value) == (
        TaskResultStatus.SUCCESSFUL,
        [1, 2],
    )
    # Never reported SUCCESSFUL: the only report is its failure.
    assert [r.status for r in finished if r.id == refused.id] == [TaskResultStatus.FAILED]


# Item 5: JSON as the framework's normalize_json gives it.


def test_a_result_with_non_string_keys_is_kept_as_json_keeps_it(clock) -> None:
    result = run(returns_int_keys, clock)
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == {"1": "one"}


def test_arguments_with_non_string_keys_are_taken_as_json_keeps_them(clock) -> None:
    result = run(echo, clock, {2: "two"}, x={3: (4, 5)})
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == [[{"2": "two"}], {"x": {"3": [4, 5]}}]


# Item 6: priorities the framework accepts.


def test_a_whole_float_priority_is_taken(clock) -> None:
    result = run(echo.using(priority=3.0), clock)
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert Occurrence.objects.get(pk=result.id).priority == 3


# Item 7: our limits raise the framework's exception types, naming the limit.


def test_arguments_over_the_limit_raise_a_value_error_naming_it(clock) -> None:
    with use_clock(clock), pytest.raises(ValueError, match=f"at most {ARGS_MAX_BYTES} bytes") as e:
        echo.enqueue("z" * ARGS_MAX_BYTES)
    assert isinstance(e.value, JobsError)
    assert "tests.test_tasks_contract.echo" in str(e.value)
    assert not Occurrence.objects.exists()


def test_arguments_normalize_json_refuses_raise_its_own_builtin_type(clock) -> None:
    with use_clock(clock):
        with pytest.raises(ValueError, match="Unsupported value"):
            echo.enqueue(b"\xff")  # not UTF-8: the framework raises ValueError
        with pytest.raises(TypeError, match="Unsupported type"):
            echo.enqueue(object())
    assert not Occurrence.objects.exists()


def test_a_result_over_the_limit_fails_the_task_with_a_value_error_naming_it(clock) -> None:
    result = run(returns_too_much, clock)
    assert result.status == TaskResultStatus.FAILED
    error = result.errors[-1]
    assert error.exception_class is TaskLimitExceeded
    assert issubclass(error.exception_class, ValueError)
    assert issubclass(error.exception_class, JobsError)
    assert f"at most {RESULT_MAX_BYTES} bytes" in error.traceback


@pytest.mark.parametrize("which", sorted(UNKEPT))
def test_a_result_that_cannot_be_kept_fails_the_task_at_once(clock, which) -> None:
    UNKEPT_RUNS.clear()
    result = run(returns_unkept, clock, which)
    assert result.status == TaskResultStatus.FAILED
    assert result.attempts == 1  # never retried (MAX_ATTEMPTS is 3): it would fail again
    assert len(UNKEPT_RUNS) == 1  # its side effects happened once
    assert [e.exception_class for e in result.errors] == [TaskLimitExceeded]
    assert UNKEPT[which][1] in result.errors[0].traceback
    assert Occurrence.objects.get(pk=result.id).state == "dead"
    assert run(echo, clock, 1).return_value == [[1], {}]  # the worker goes on


def test_a_result_the_framework_refuses_fails_the_task_at_once(clock) -> None:
    result = run(returns_object, clock)
    assert result.status == TaskResultStatus.FAILED
    assert result.attempts == 1
    assert [e.exception_class for e in result.errors] == [TypeError]  # normalize_json's own


def test_a_task_that_raises_a_limit_error_itself_is_retried(clock) -> None:
    result = run(enqueues_too_much, clock)
    assert result.status == TaskResultStatus.FAILED
    assert result.attempts == 3  # its own failure, retried as any other
    assert {e.exception_class for e in result.errors} == {TaskLimitExceeded}


# What ends a task without task_finished, and what sends it for a run that never started.


def test_a_cancelled_task_reads_back_failed_and_sends_no_task_finished(
    clock, finished, root, django_capture_on_commit_callbacks
) -> None:
    from django_jobs import services

    with use_clock(clock):
        result = echo.enqueue(1)
    with django_capture_on_commit_callbacks(execute=True):
        services.cancel(
            Occurrence.objects.get(pk=result.id), actor=root, reason="not wanted", now=T0
        )
        drain(clock)
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert (result.errors, result.attempts) == ([], 0)
    assert finished == []  # no signal is sent for a cancelled occurrence


# Queue names: Django's QUEUES may list a name django_jobs cannot keep.

ODD_QUEUES = {**settings.TASKS["default"], "QUEUES": ["default", "a:b"]}


@override_settings(TASKS={**settings.TASKS, "default": ODD_QUEUES})
def test_a_queue_name_django_jobs_cannot_keep_is_the_frameworks_invalid_task(clock) -> None:
    invalid = backend_module.InvalidTask
    with pytest.raises(invalid, match=r"'a:b'.*letters, digits and _ \. -"):
        echo.using(queue_name="a:b")  # the framework validates a task as it is made
    with use_clock(clock), pytest.raises(invalid, match="'a:b'"):
        backend_module.JobsBackend(alias="default", params=ODD_QUEUES).enqueue(
            _on_queue(echo, "a:b"), (), {}
        )
    assert not Occurrence.objects.exists()


@override_settings(TASKS={**settings.TASKS, "default": ODD_QUEUES})
def test_a_queue_name_django_jobs_cannot_keep_is_check_e035_naming_the_alias() -> None:
    """Said at start-up (runworker and check refuse it), not only at the first enqueue."""
    from django_jobs.checks import check_settings

    (error,) = [m for m in check_settings() if m.id == "django_jobs.E035"]
    assert error.msg == (
        "TASKS['default']['QUEUES']: a queue name must be 1-100 letters, digits and _ . -, "
        "got 'a:b'"
    )


def _on_queue(task_: Any, queue: str) -> Any:
    """``task_`` on ``queue``, made without the framework's validation (a task made before
    the alias's QUEUES changed, say)."""
    moved = object.__new__(type(task_))
    for field in dataclasses.fields(task_):
        object.__setattr__(moved, field.name, getattr(task_, field.name))
    object.__setattr__(moved, "queue_name", queue)
    return moved


# Item 8: an alias added at run time.


def test_an_alias_added_at_run_time_enqueues_and_runs(clock) -> None:
    extra = {"BACKEND": "django_jobs.tasks.JobsBackend", "OPTIONS": {"MAX_ATTEMPTS": 1}}
    with override_settings(TASKS={**settings.TASKS, "extra": extra}):
        result = run(echo.using(backend="extra"), clock, 7)
        assert result.status == TaskResultStatus.SUCCESSFUL
        assert result.backend == "extra"
        assert result.return_value == [[7], {}]
        assert echo.using(backend="extra").get_result(result.id).return_value == [[7], {}]
    assert job_name("extra") not in registry.names()  # gone with the alias
