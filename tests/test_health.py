"""``manage.py jobs health``: a liveness probe for the replicas on this host."""

from __future__ import annotations

import json
import socket
from datetime import UTC, datetime, timedelta

import pytest
from django.core.management import CommandError, call_command

from django_jobs import store
from django_jobs.testing import FakeClock, use_clock

pytestmark = pytest.mark.django_db


def beat(
    replica_id: str,
    *,
    age: timedelta,
    state: str = "running",
    host: str | None = None,
    threads: dict[str, str] | None = None,
):
    now = datetime.now(UTC)
    store.heartbeat(
        replica_id,
        host=host or socket.gethostname(),
        pid=1234,
        started_at=now - age,
        now=now - age,
        state=state,
        concurrency=2,
        running=1,
        threads=threads,
    )


def test_healthy_when_every_replica_on_this_host_heartbeated_recently(capsys) -> None:
    beat("r1", age=timedelta(seconds=1))
    beat("elsewhere", age=timedelta(hours=1), host="another-host")
    call_command("jobs", "health")
    assert (
        capsys.readouterr().out.strip().endswith(f"healthy: 1 replica(s) on {socket.gethostname()}")
    )


def test_unhealthy_when_a_replica_stopped_heartbeating() -> None:
    beat("r1", age=timedelta(seconds=1))
    beat("r2", age=timedelta(minutes=5))
    with pytest.raises(CommandError, match=r"without a recent heartbeat on .*: r2"):
        call_command("jobs", "health")


def test_unhealthy_while_a_replica_reports_a_worker_thread_down(capsys) -> None:
    """A thread restarting after a crash, or dead (the replica is stopping): the heartbeat is
    fresh, but the replica is not whole (worker/supervision.py)."""
    alive = {"lease_keeper": "alive", "completer": "alive", "startup_sync": "stopped"}
    beat("r1", age=timedelta(seconds=1), threads=alive)
    call_command("jobs", "health")
    assert "  threads: completer alive, lease_keeper alive, startup_sync stopped" in (
        capsys.readouterr().out
    )
    beat("r2", age=timedelta(seconds=1), threads={**alive, "lease_keeper": "restarting"})
    with pytest.raises(
        CommandError, match=r"with a worker thread down on .*: r2 \(lease_keeper restarting\)"
    ):
        call_command("jobs", "health")


def test_unhealthy_when_no_replica_runs_here() -> None:
    beat("r1", age=timedelta(minutes=5), state="stopped")
    with pytest.raises(CommandError, match="no runworker replica is running on"):
        call_command("jobs", "health")


def test_max_age_and_json(capsys) -> None:
    beat("r1", age=timedelta(seconds=40))
    call_command("jobs", "health", "--max-age", "60", "--json")
    report = json.loads(capsys.readouterr().out.split("\nhealthy")[0])
    assert report["healthy"] is True
    assert [(r["id"], r["stale"], r["running"]) for r in report["replicas"]] == [("r1", False, 1)]


def test_heartbeat_ages_are_measured_on_the_injected_clock(capsys) -> None:
    t0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
    store.heartbeat(
        "r1",
        host=socket.gethostname(),
        pid=1234,
        started_at=t0,
        now=t0,
        state="running",
        concurrency=2,
        running=1,
    )
    with use_clock(FakeClock(t0 + timedelta(seconds=5))):
        call_command("jobs", "health", "--max-age", "10")
    healthy = f"healthy: 1 replica(s) on {socket.gethostname()}"
    assert capsys.readouterr().out.strip().endswith(healthy)
    with use_clock(FakeClock(t0 + timedelta(seconds=11))), pytest.raises(CommandError):
        call_command("jobs", "health", "--max-age", "10")
