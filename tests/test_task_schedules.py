"""Schedules that run a ``@task`` (issue #36, item 10): ``schedule(key, task=..., args=[...],
kwargs={...}, timing=...)``, checked when declared, run through the Tasks handler under the
schedule's own policies, each run's result read back with ``get_result``. The last test runs a
Berlin-zoned one across the 2027 spring gap in a real ``runworker``.
"""

from __future__ import annotations

import functools
import importlib
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.test import override_settings
from django.urls import reverse

from django_jobs import cron, every, schedule
from django_jobs import tasks as backend_module
from django_jobs.clock import use_clock
from django_jobs.declarations import InvalidSchedule
from django_jobs.exceptions import JobsError
from django_jobs.models import Occurrence, OccurrenceState, Origin, Schedule
from django_jobs.services.operator import run_now
from django_jobs.tasks import job_name
from django_jobs.testing import FakeClock, ScheduledJobs, run_due
from django_jobs.validation import ARGS_MAX_BYTES
from tests.workerapp import tasks
from tests.workerapp.management.commands.runworker_fileclock import CLOCK_FILE
from tests.workerapp.schedules import TASK_BERLIN_KEY

from .concurrency import wait_until
from .processes import FileClock, log_tail

TaskResultStatus = backend_module.TaskResultStatus

BERLIN = cron(
    "30 2 * * *",
    zone="Europe/Berlin",
    skipped="shift",
    repeated="first",
    reason="the nightly report is built at 02:30 for readers in Berlin",
)
# 2027-03-28 02:00 CET is 03:00 CEST: 02:30 does not exist that night, "shift" runs at 03:00.
START = datetime(2027, 3, 26, 12, 0, tzinfo=UTC)
RUNS = [
    datetime(2027, 3, 27, 1, 30, tzinfo=UTC),  # 02:30 CET
    datetime(2027, 3, 28, 1, 0, tzinfo=UTC),  # 03:00 CEST, the gap shifted
    datetime(2027, 3, 29, 0, 30, tzinfo=UTC),  # 02:30 CEST
]
AFTER = datetime(2027, 3, 30, 0, 30, tzinfo=UTC)

POLICIES: dict[str, Any] = {
    "max_delay": timedelta(hours=6),
    "timeout": timedelta(minutes=15),
    "retention": timedelta(days=30),
    "operating_owner": "tests",
    "record_owner": "tests@example.com",
    "status": "active",
}


def declare(key: str = "reports.nightly", **fields: Any) -> Any:
    given = {"task": tasks.nightly_report, "timing": BERLIN, **POLICIES, **fields}
    return schedule(key, register=False, **given)


def refused(field: str, match: str, **fields: Any) -> None:
    with pytest.raises(InvalidSchedule, match=match) as caught:
        declare(**fields)
    assert (caught.value.key, caught.value.field) == ("reports.nightly", field)


def expected(instant: datetime) -> dict[str, Any]:
    return {"label": "berlin", "pages": 3, "for": instant.isoformat(), "attempt": 1}


# Checked when declared: the schedule's key and the field.


def test_a_task_schedule_names_the_aliases_job_and_keeps_the_tasks_arguments() -> None:
    declaration = declare(args=("berlin",), kwargs={"pages": 3})
    assert declaration.job == job_name("default")
    assert declaration.args == {
        "task": "tests.workerapp.tasks.nightly_report",
        "backend": "default",
        "args": ["berlin"],
        "kwargs": {"pages": 3},
        "queue": "default",
        "priority": 0,
    }


QUEUED = {**settings.TASKS["default"], "QUEUES": ["default", "reports", "bulk"]}


@override_settings(TASKS={**settings.TASKS, "default": QUEUED})
def test_a_task_schedule_is_on_the_tasks_queue_unless_queue_is_given() -> None:
    reports = tasks.nightly_report.using(queue_name="reports")
    declaration = declare(task=reports, args=["x"])
    assert declaration.queue == "reports"  # not "default"
    assert declaration.args["queue"] == "reports"
    assert declare(args=["x"]).queue == "default"  # a task on no queue of its own
    # The schedule's queue= routes it, and the task it runs is on that queue too.
    bulk = declare(task=reports, args=["x"], queue="bulk")
    assert (bulk.queue, bulk.args["queue"]) == ("bulk", "bulk")
    # A queue the alias's QUEUES does not list is refused, as the framework refuses it.
    refused("queue", "nightly", task=reports, args=["x"], queue="nightly")


def test_a_task_schedule_has_the_tasks_priority_unless_priority_is_given() -> None:
    """The priority claims order it by is the one the stored task says, as with the queue:
    the task's own (not the record defaults'), else priority=; a bad one refused."""
    urgent = tasks.nightly_report.using(priority=10)
    with override_settings(DJANGO_JOBS={"DEFAULTS": {"priority": -5}}):
        declaration = declare(task=urgent, args=["x"])
    assert (declaration.priority, declaration.args["priority"]) == (10, 10)
    lowered = declare(task=urgent, args=["x"], priority=-3)
    assert (lowered.priority, lowered.args["priority"]) == (-3, -3)
    refused("priority", "priority", task=urgent, args=["x"], priority=1000)


@pytest.mark.django_db
@override_settings(TASKS={**settings.TASKS, "default": QUEUED})
def test_a_task_schedules_occurrences_are_on_its_queue_and_its_result_says_so() -> None:
    reports = tasks.nightly_report.using(queue_name="reports")
    declaration = declare(task=reports, args=["berlin"], kwargs={"pages": 3})
    jobs = ScheduledJobs(START, declarations=[declaration])
    jobs.sync()
    jobs.run_until(RUNS[0] + timedelta(minutes=1))
    occurrence = Occurrence.objects.get(schedule__key=declaration.key, scheduled_at=RUNS[0])
    assert occurrence.queue == "reports"
    result = reports.get_result(str(occurrence.pk))
    assert result.task.queue_name == "reports"
    assert result.status == TaskResultStatus.SUCCESSFUL


def test_what_is_not_a_task_of_a_jobs_backend_alias_is_refused() -> None:
    refused("task", "decorated with Django's @task", task=tasks.nightly_report.func)
    dummy = f"{backend_module.FRAMEWORK}.backends.dummy.DummyBackend"
    with override_settings(TASKS={**settings.TASKS, "dummy": {"BACKEND": dummy}}):
        framework_task = importlib.import_module(backend_module.FRAMEWORK).task
        elsewhere = framework_task(backend="dummy")(tasks.add.func)
        refused("task", "backend 'dummy'.*not django_jobs.tasks.JobsBackend", task=elsewhere)


def test_arguments_that_do_not_fit_are_refused_naming_the_field() -> None:
    refused("args", "a list, got dict", args={"label": "x"})
    refused("kwargs", "Unsupported type", args=["x"], kwargs={"pages": object()})
    refused("args", r"nightly_report\(context, label, \*, pages", args=[])
    refused("kwargs", "unexpected keyword argument 'colour'", args=["x"], kwargs={"colour": 1})
    refused("args", f"at most {ARGS_MAX_BYTES} bytes", args=["x" * ARGS_MAX_BYTES])


def test_job_and_task_are_one_or_the_other() -> None:
    refused("task", "not both", job="proc.effect")
    with pytest.raises(InvalidSchedule, match=r"job=\.\.\.") as caught:
        schedule("reports.nothing", timing=BERLIN, register=False, **POLICIES)
    assert caught.value.field == "job"
    with pytest.raises(InvalidSchedule, match="only a task= schedule") as caught:
        schedule("reports.job", job="proc.effect", kwargs={"a": 1}, timing=BERLIN, **POLICIES)
    assert caught.value.field == "kwargs"


# Run: each instant runs the task, its result the framework's.


@pytest.mark.django_db
def test_a_declared_task_runs_at_each_instant_across_the_gap_and_get_result_reads_it(
    admin_client,
) -> None:
    declaration = declare(args=["berlin"], kwargs={"pages": 3})
    jobs = ScheduledJobs(START, declarations=[declaration])
    jobs.sync()
    jobs.run_until(RUNS[-1] + timedelta(hours=1))

    record = Schedule.objects.get(key="reports.nightly")
    assert (record.origin, record.job) == (Origin.CODE, job_name("default"))
    occurrences = list(Occurrence.objects.filter(schedule=record).order_by("scheduled_at"))
    assert [(o.scheduled_at, o.state) for o in occurrences] == [
        (instant, OccurrenceState.COMPLETED) for instant in RUNS
    ]
    backend = tasks.nightly_report.get_backend()
    for occurrence, instant in zip(occurrences, RUNS, strict=True):
        result = tasks.nightly_report.get_result(str(occurrence.pk))
        assert (result.status, result.return_value) == (
            TaskResultStatus.SUCCESSFUL,
            expected(instant),
        )
        assert (result.args, result.kwargs) == (["berlin"], {"pages": 3})
        assert backend.get_result(str(occurrence.pk)).return_value == expected(instant)
    page = admin_client.get(
        reverse("admin:django_jobs_occurrence_change", args=[occurrences[1].pk])
    )
    assert page.status_code == 200
    assert RUNS[1].isoformat() in page.content.decode()  # its result, on its page


@pytest.mark.django_db
def test_a_misfire_skip_sends_task_finished_failed_for_a_run_that_never_started(
    django_capture_on_commit_callbacks,
) -> None:
    seen: list[Any] = []

    def receive(sender: Any, task_result: Any, **kwargs: Any) -> None:
        seen.append(task_result)

    declaration = declare(args=["berlin"], kwargs={"pages": 3})  # max_delay 6 hours
    ScheduledJobs(START, declarations=[declaration]).sync()
    backend_module.task_finished.connect(receive)
    try:
        late = FakeClock(RUNS[0] + timedelta(hours=7))  # the worker was down past max_delay
        with django_capture_on_commit_callbacks(execute=True), use_clock(late):
            run_due(late)
    finally:
        backend_module.task_finished.disconnect(receive)
    occurrence = Occurrence.objects.get(schedule__key="reports.nightly")
    assert (occurrence.scheduled_at, occurrence.state) == (RUNS[0], OccurrenceState.SKIPPED)
    assert [(r.id, r.status, r.errors, r.attempts) for r in seen] == [
        (str(occurrence.pk), TaskResultStatus.FAILED, [], 0)
    ]


@pytest.mark.django_db
def test_a_task_schedule_fails_under_its_own_retry_policy() -> None:
    from django_jobs import Retry

    declaration = declare(
        task=tasks.always_fails, args=[], timing=every(timedelta(hours=1)), retry=Retry(1)
    )
    jobs = ScheduledJobs(START, declarations=[declaration])
    jobs.sync()
    jobs.run_until(START + timedelta(minutes=30))
    occurrence = Occurrence.objects.get(schedule__key="reports.nightly")
    result = tasks.always_fails.get_result(str(occurrence.pk))
    assert result.status == TaskResultStatus.FAILED  # one attempt: the schedule's, not 3
    assert [e.exception_class for e in result.errors] == [RuntimeError]


@pytest.mark.django_db
def test_an_operators_run_now_with_arguments_cannot_name_a_task(admin_user) -> None:
    declaration = declare(args=["berlin"])
    jobs = ScheduledJobs(START, declarations=[declaration])
    jobs.sync()
    record = Schedule.objects.get(key="reports.nightly")
    with pytest.raises(JobsError, match="never offered at run time"):
        run_now(
            record,
            actor=admin_user,
            reason="try another task",
            now=START,
            args={"task": "tests.workerapp.tasks.add", "backend": "default", "args": [1, 2]},
        )


# A real runworker, its clock a file this test moves.


def settled(replica: Any, instant: datetime, following: datetime) -> bool:
    if not replica.alive:
        raise AssertionError(f"exited with {replica.process.returncode}: {log_tail(replica)}")
    record = Schedule.objects.filter(key=TASK_BERLIN_KEY).first()
    if record is None or record.next_due_at != following:
        return False
    return Occurrence.objects.filter(
        schedule=record, scheduled_at=instant, state=OccurrenceState.COMPLETED
    ).exists()


def waiting_for(replica: Any, instant: datetime) -> str:
    return f"the run at {instant}: {log_tail(replica)}"


@pytest.mark.processes
@pytest.mark.django_db(transaction=True)
def test_a_real_worker_runs_a_declared_task_across_the_berlin_gap(start, tmp_path: Path) -> None:
    clock = FileClock(tmp_path / "clock", START)
    replica = start(
        "berlin",
        env={CLOCK_FILE: str(clock.path), "JOBS_TEST_DECLARE": "task_berlin"},
        command="runworker_fileclock",
    )
    replica.wait_logged("sync.done", timeout=120)
    for instant, following in zip(RUNS, [*RUNS[1:], AFTER], strict=True):
        clock.set(instant)
        wait_until(
            functools.partial(settled, replica, instant, following),
            timeout=60,
            what=functools.partial(waiting_for, replica, instant),
        )
    occurrences = list(
        Occurrence.objects.filter(schedule__key=TASK_BERLIN_KEY).order_by("scheduled_at")
    )
    assert [o.scheduled_at for o in occurrences] == RUNS
    for occurrence, instant in zip(occurrences, RUNS, strict=True):
        result = tasks.nightly_report.get_result(str(occurrence.pk))
        assert (result.status, result.return_value, result.worker_ids) == (
            TaskResultStatus.SUCCESSFUL,
            expected(instant),
            ["berlin"],
        )
