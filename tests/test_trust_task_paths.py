"""Issue #33, finding 1: the Tasks handler imports only the task paths ``JobsBackend.enqueue``
recorded (``TaskPath``), never a path read from an occurrence's arguments alone.

A task may live in any module (Django's Tasks framework allows it), one the worker never
imports on its own included (tests/workerapp/background.py): it runs, on a real replica,
because enqueuing it through the backend recorded its path. A path nobody recorded, written
into an occurrence's arguments behind the service layer, is refused and its module never
imported (tests/workerapp/import_trap.py); so is a recorded path whose object is no Task of
the alias any more.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from datetime import UTC, datetime

import pytest
from django.db import transaction

from django_jobs.models import Occurrence, OccurrenceState, TaskPath
from django_jobs.testing import FakeClock, run_due, use_clock
from tests.workerapp import background, tasks

from .concurrency import wait_until
from .processes import Replica

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
BACKGROUND = "tests.workerapp.background"
TRAP = "tests.workerapp.import_trap"
REFUSED = "django_jobs.tasks.TaskRefused"  # dead at once: a PermanentFailure


@pytest.fixture(autouse=True)
def trap_not_imported() -> Iterator[None]:
    sys.modules.pop(TRAP, None)
    yield
    sys.modules.pop(TRAP, None)


def drain(clock: FakeClock) -> None:
    with use_clock(clock):
        run_due(clock)


def refused(occurrence_id: str) -> Occurrence:
    occurrence = Occurrence.objects.get(pk=occurrence_id)
    assert (occurrence.state, occurrence.last_error_type) == ("dead", REFUSED)
    assert occurrence.attempts == 1  # refused for good, not retried
    return occurrence


def test_enqueuing_through_the_backend_records_the_tasks_path_once() -> None:
    with use_clock(FakeClock(T0)):
        background.double.enqueue(1)
        background.double.enqueue(2)
    assert list(TaskPath.objects.values_list("alias", "path", "recorded_at")) == [
        ("default", f"{BACKGROUND}.double", T0)
    ]


def test_a_rolled_back_enqueue_records_no_path() -> None:
    with use_clock(FakeClock(T0)), transaction.atomic():
        background.double.enqueue(1)
        assert TaskPath.objects.exists()  # written in the caller's transaction
        transaction.set_rollback(True)
    assert not TaskPath.objects.exists()


def test_a_task_in_a_module_the_worker_never_imported_runs_once_recorded() -> None:
    """The review's reproduction: the module dropped from ``sys.modules``, as in a worker
    that never imported it."""
    with use_clock(FakeClock(T0)):
        result = background.double.enqueue(21)
    sys.modules.pop(BACKGROUND)
    try:
        drain(FakeClock(T0))
        assert BACKGROUND in sys.modules  # imported by the handler: its path was recorded
    finally:
        sys.modules[BACKGROUND] = background
    result.refresh()
    assert result.return_value == 42


@pytest.mark.django_db(transaction=True)
@pytest.mark.processes
def test_a_task_in_a_module_the_worker_never_imports_runs_on_a_real_replica(
    start: Callable[..., Replica],
) -> None:
    result = background.double.enqueue(21)
    replica = start("a")
    wait_until(
        lambda: (
            Occurrence.objects.filter(pk=result.id)
            .exclude(state__in=[OccurrenceState.SCHEDULED, OccurrenceState.PROCESSING])
            .exists()
        ),
        timeout=60,
        what=lambda: f"the replica to end the task: {replica.log_path.read_text()[-2000:]}",
    )
    occurrence = Occurrence.objects.get(pk=result.id)
    assert (occurrence.state, occurrence.last_error_type) == ("completed", "")
    result.refresh()
    assert result.return_value == 42
    replica.stop()


def test_a_path_never_recorded_written_into_arguments_is_refused_and_never_imported() -> None:
    """Work the backend enqueued, its path rewritten behind the service layer: the handler
    reads a path nothing recorded, so it imports nothing."""
    with use_clock(FakeClock(T0)):
        result = tasks.add.enqueue(2, 3)
    occurrence = Occurrence.objects.get(pk=result.id)
    Occurrence.objects.filter(pk=result.id).update(
        args={**occurrence.args, "task": f"{TRAP}.boom", "args": []}
    )
    drain(FakeClock(T0))
    assert TRAP not in sys.modules
    message = refused(result.id).last_error_message
    assert f"'{TRAP}.boom' is not a task this process defined or JobsBackend.enqueue" in message


def test_a_path_recorded_for_another_alias_is_never_imported_for_this_one() -> None:
    TaskPath.objects.create(alias="other", path=f"{TRAP}.boom", recorded_at=T0)
    with use_clock(FakeClock(T0)):
        result = tasks.add.enqueue(2, 3)
    Occurrence.objects.filter(pk=result.id).update(
        args={**Occurrence.objects.get(pk=result.id).args, "task": f"{TRAP}.boom", "args": []}
    )
    drain(FakeClock(T0))
    assert TRAP not in sys.modules
    refused(result.id)


def test_a_recorded_path_whose_object_is_no_task_any_more_is_refused_and_never_called() -> None:
    """Recorded when it was a task, since changed into a plain function (``boom`` raises
    AssertionError if called): imported, found to be no Task, refused."""
    TaskPath.objects.create(alias="default", path=f"{TRAP}.boom", recorded_at=T0)
    with use_clock(FakeClock(T0)):
        result = tasks.add.enqueue(2, 3)
    Occurrence.objects.filter(pk=result.id).update(
        args={**Occurrence.objects.get(pk=result.id).args, "task": f"{TRAP}.boom", "args": []}
    )
    drain(FakeClock(T0))
    assert TRAP in sys.modules  # recorded, so imported; but its object is no Task
    occurrence = refused(result.id)
    assert occurrence.result is None


def test_a_recorded_path_whose_module_is_gone_is_refused() -> None:
    TaskPath.objects.create(alias="default", path="tests.workerapp.gone.double", recorded_at=T0)
    with use_clock(FakeClock(T0)):
        result = tasks.add.enqueue(2, 3)
    Occurrence.objects.filter(pk=result.id).update(
        args={
            **Occurrence.objects.get(pk=result.id).args,
            "task": "tests.workerapp.gone.double",
        }
    )
    drain(FakeClock(T0))
    assert "'tests.workerapp.gone.double' is not a task" in refused(result.id).last_error_message
