"""#33 finding 2, "heartbeats never wait on planning", under real ``runworker_faults``
processes (tests/workerapp/management/commands/runworker_faults.py): the heartbeat is written
by a thread of its own (``worker.replica.HeartbeatKeeper``) while the loop shows progress.

- A plan statement that takes 2.5 s on the server (``plan:hang``, ``pg_sleep``): the loop
  waits for it, the heartbeat does not (``HEARTBEAT_SECONDS`` is 1 in tests/worker_settings.py).
  On 8f518d8, and with the loop writing the heartbeat before and after each plan pass, the
  heartbeat waited for the statement: a gap of 2.5 s or more.
- A loop that stops moving (its plan statement hangs for two minutes) stops the heartbeat
  once it is ``STALL_HEARTBEATS`` heartbeats late, so ``jobs health`` fails for a truly stuck
  replica, as it did when the loop wrote the heartbeat itself.
"""

from __future__ import annotations

import itertools
import signal
from datetime import datetime, timedelta

import pytest
from django.core.management import CommandError, call_command
from django.db import connection

from django_jobs import store
from django_jobs.models import Replica

from .concurrency import wait_until
from .factories import ScheduleFactory
from .processes import Replica as Process

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.processes]


def _heartbeat(name: str) -> datetime | None:
    return Replica.objects.filter(pk=name).values_list("heartbeat_at", flat=True).first()


def _unhealthy() -> bool:
    try:
        call_command("jobs", "health", "--max-age", "3")
    except CommandError:
        return True
    return False


def _release(replica: Process) -> None:
    """Kill the replica, and end its statement still sleeping on the server."""
    replica.process.kill()
    replica.wait_exit()
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            " AND query LIKE 'SELECT pg_sleep%%'"
        )


def test_a_slow_plan_statement_does_not_delay_the_heartbeat(start) -> None:
    now = store.database_clock()
    # Due now: the pass after the slow statement plans it, and says so (``plan.pass``).
    ScheduleFactory.create(
        key="tick",
        job="proc.effect",
        created_at=now - timedelta(minutes=2),
        next_due_at=now - timedelta(minutes=1),
    )
    replica = start(
        "slow",
        command="runworker_faults",
        env={"JOBS_TEST_FAULT": "plan:hang:1", "JOBS_TEST_HANG_SECONDS": "2.5"},
    )
    wait_until(lambda: _heartbeat("slow") is not None, what="the first heartbeat")
    began = store.database_clock()
    heartbeats: set[datetime] = set()

    def planned_after_the_hang() -> bool:
        if (beat := _heartbeat("slow")) is not None:
            heartbeats.add(beat)
        return bool(replica.logged("plan.pass") >= 1)

    wait_until(planned_after_the_hang, timeout=30, what="a plan pass after the slow statement")
    ended = store.database_clock()
    beats = sorted(b for b in heartbeats if b >= began)
    gaps = [b - a for a, b in itertools.pairwise([began, *beats, ended])]
    (first_pass,) = [e for e in replica.events() if e["event"] == "plan.pass"][:1]
    print(f"plan pass {first_pass['seconds']:.2f} s; longest heartbeat gap {max(gaps)}")
    assert first_pass["seconds"] >= 2.5  # the loop did wait for the statement
    assert max(gaps) < timedelta(seconds=2)
    assert replica.logged("heartbeat.withheld") == 0
    replica.signal(signal.SIGTERM)
    assert replica.wait_exit() == 0
    assert Replica.objects.get(pk="slow").state == "stopped"


def test_a_stuck_loop_stops_the_heartbeat_and_fails_health(start) -> None:
    replica = start(
        "stuck",
        command="runworker_faults",
        env={"JOBS_TEST_FAULT": "plan:hang:1", "JOBS_TEST_HANG_SECONDS": "120"},
    )
    try:
        replica.wait_logged("heartbeat.withheld", timeout=30)
        last = _heartbeat("stuck")
        assert last is not None
        wait_until(_unhealthy, timeout=30, what="jobs health to fail for the stuck replica")
        assert _heartbeat("stuck") == last  # withheld: not written since
        withheld = next(e for e in replica.events() if e["event"] == "heartbeat.withheld")
        assert withheld["stalled_seconds"] >= 0
        assert replica.alive
    finally:
        _release(replica)  # stuck on the server for two minutes: no drain to wait for
