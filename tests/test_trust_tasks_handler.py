"""Issue #33, finding 1: the Tasks backend's handler runs only its alias's own enqueued
work, and never imports a path read from an occurrence's arguments.

Rows are written here the ways an attacker got them before the fix (a run-time schedule of
the tasks' job, written behind today's service checks; work enqueued under the job by
application code with a path of its choosing): the handler refuses each, dead at once, and
the module the path names is never imported.
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime

import pytest

from django_jobs.models import Occurrence
from django_jobs.services.enqueue import enqueue
from django_jobs.tasks import job_name
from django_jobs.testing import FakeClock, run_due, use_clock
from tests.workerapp import tasks

from .factories import ScheduleFactory
from .storeutil import plan

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
TRAP = "tests.workerapp.import_trap"
REFUSED = "django_jobs.tasks.TaskRefused"  # dead at once: a PermanentFailure


@pytest.fixture(autouse=True)
def trap_not_imported() -> None:
    sys.modules.pop(TRAP, None)


def drain(clock: FakeClock) -> None:
    with use_clock(clock):
        run_due(clock)


def test_a_run_time_schedule_of_the_tasks_job_is_refused_and_imports_nothing() -> None:
    hostile = ScheduleFactory.create(
        tenant="acme",
        key="acme.hostile",
        job=job_name("default"),
        args={"task": f"{TRAP}.boom", "backend": "default", "args": [], "kwargs": {}},
        max_attempts=3,
    )
    (occurrence_id,) = plan(hostile, T0, now=T0)
    drain(FakeClock(T0))
    occurrence = Occurrence.objects.get(pk=occurrence_id)
    assert TRAP not in sys.modules
    assert (occurrence.state, occurrence.last_error_type) == (
        "dead",
        "django_jobs.tasks.TaskRefused",
    )
    assert "not enqueued work of a Tasks backend alias" in occurrence.last_error_message
    assert occurrence.attempts == 1  # refused for good, not retried


def test_enqueued_work_naming_a_path_that_is_no_task_is_refused_without_importing_it() -> None:
    with use_clock(FakeClock(T0)):
        done = enqueue(
            job_name("default"),
            args={"task": f"{TRAP}.boom", "backend": "default", "args": [], "kwargs": {}},
        )
    drain(FakeClock(T0))
    occurrence = done.occurrence()
    assert TRAP not in sys.modules
    assert (occurrence.state, occurrence.last_error_type) == (
        "dead",
        "django_jobs.tasks.TaskRefused",
    )
    assert f"'{TRAP}.boom' is not a task this process defined" in occurrence.last_error_message


def test_a_path_to_a_callable_that_is_not_a_task_is_refused() -> None:
    """``os.system`` is imported already: found, but not a Task, so it is never called."""
    with use_clock(FakeClock(T0)):
        done = enqueue(
            job_name("default"),
            args={"task": "os.system", "backend": "default", "args": ["true"], "kwargs": {}},
        )
    drain(FakeClock(T0))
    occurrence = done.occurrence()
    assert (occurrence.state, occurrence.last_error_type) == (
        "dead",
        "django_jobs.tasks.TaskRefused",
    )
    assert occurrence.result is None


def test_work_naming_another_backend_than_its_jobs_alias_is_refused() -> None:
    with use_clock(FakeClock(T0)):
        done = enqueue(
            job_name("default"),
            args={"task": "tests.workerapp.tasks.add", "backend": "other", "args": [1, 2]},
        )
    drain(FakeClock(T0))
    occurrence = done.occurrence()
    assert (occurrence.state, occurrence.last_error_type) == (
        "dead",
        "django_jobs.tasks.TaskRefused",
    )
    assert "names backend 'other'" in occurrence.last_error_message


def test_a_real_task_still_runs() -> None:
    with use_clock(FakeClock(T0)):
        result = tasks.add.enqueue(2, 3)
    drain(FakeClock(T0))
    result.refresh()
    assert result.return_value == 5
