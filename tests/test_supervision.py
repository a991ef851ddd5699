"""Crash-only supervision (``worker/supervision.py``): what a crash of each thread means."""

from __future__ import annotations

import threading

import pytest
from structlog.testing import capture_logs

from django_jobs.models import Occurrence, OccurrenceState
from django_jobs.registry import Registry
from django_jobs.worker.loop import EXIT_THREAD_FAILED, Worker
from django_jobs.worker.supervision import (
    MAX_RESTARTS,
    Role,
    Status,
    SupervisedThread,
    Supervisor,
)

from .concurrency import wait_until
from .factories import T0, ScheduleFactory
from .storeutil import plan


def test_a_thread_is_restarted_at_most_max_restarts_times_then_the_replica_fails() -> None:
    failures: list[Role] = []
    supervisor = Supervisor(on_failure=lambda role, exc: failures.append(role))
    with capture_logs() as logs:
        verdicts = [
            supervisor.crashed(Role.COMPLETER, RuntimeError(f"boom {n}"))
            for n in range(MAX_RESTARTS + 1)
        ]
    assert verdicts == [True] * MAX_RESTARTS + [False]
    assert failures == [Role.COMPLETER]
    assert supervisor.status() == {"completer": "dead"}
    crashed = [e for e in logs if e["event"] == "thread.crashed"]
    assert [(e["role"], e["crashes"], e["restart"]) for e in crashed] == [
        ("completer", n, n <= MAX_RESTARTS) for n in range(1, MAX_RESTARTS + 2)
    ]
    assert crashed[0]["error"] == "boom 0"


class Flaky(SupervisedThread):
    """Crashes with a ``BaseException`` on its first run, then ends as asked."""

    def __init__(self, supervisor: Supervisor) -> None:
        self.stopped = threading.Event()
        super().__init__(Role.RETENTION, supervisor=supervisor, stop_event=self.stopped)
        self.runs = 0

    def body(self) -> None:
        self.runs += 1
        if self.runs == 1:
            raise SystemExit("not even SystemExit ends a supervised thread for good")


def test_a_supervised_thread_runs_its_body_again_after_any_exception() -> None:
    supervisor = Supervisor()
    thread = Flaky(supervisor)
    with capture_logs() as logs:
        thread.start()
        thread.join(timeout=10)
    assert not thread.is_alive()
    assert thread.runs == 2
    assert supervisor.status() == {"retention": "stopped"}
    assert [e["event"] for e in logs] == ["thread.crashed", "thread.restarted"]


@pytest.mark.django_db(transaction=True)
def test_nothing_is_claimed_while_a_guard_of_the_runs_is_not_alive(clock) -> None:
    jobs = Registry()
    jobs.register("tests.guarded", lambda run: None)
    schedule = ScheduleFactory.create(job="tests.guarded")
    (occurrence_id,) = plan(schedule, T0, now=T0)
    clock.set(T0)
    worker = Worker(replica_id="guarded", clock=clock, jobs=jobs, listen=False)
    try:
        worker.supervisor.set(Role.LEASE_KEEPER, Status.RESTARTING)
        assert tuple(worker.step()) == (0, 0)
        assert Occurrence.objects.get(pk=occurrence_id).state == OccurrenceState.SCHEDULED

        worker.supervisor.set(Role.LEASE_KEEPER, Status.ALIVE)
        worker._ensure_keeper()
        assert worker.step().claimed == 1
        wait_until(lambda: not worker.inflight.all(), what="the run to finish")
        assert Occurrence.objects.get(pk=occurrence_id).state == OccurrenceState.COMPLETED
    finally:
        worker.close()


@pytest.mark.django_db(transaction=True)
def test_a_guard_that_dies_stops_the_replica_with_exit_4(clock) -> None:
    worker = Worker(replica_id="failing", clock=clock, jobs=Registry(), listen=False)
    try:
        for n in range(MAX_RESTARTS + 1):
            worker.supervisor.crashed(Role.DEADLINES, RuntimeError(f"boom {n}"))
        assert worker.stopping.is_set()
        assert (worker.exit_code, worker.failed_role) == (EXIT_THREAD_FAILED, Role.DEADLINES)
        assert worker.threads()["deadlines"] == "dead"
    finally:
        worker.close()
