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


def test_the_text_says_instants_to_the_second_and_durations_in_words(capsys) -> None:
    """``heartbeat 2026-12-07 06:16:09 UTC (236 ms ago, ok)``, never an ISO instant with
    microseconds or ``lag 120.236s``; ``--json`` keeps ISO 8601 and seconds."""
    t0 = datetime(2026, 12, 7, 6, 16, 9, 123456, tzinfo=UTC)
    store.heartbeat(
        "r1",
        host=socket.gethostname(),
        pid=1234,
        started_at=t0 - timedelta(hours=1),
        now=t0,
        state="running",
        concurrency=2,
        running=1,
    )
    store.record_retention(
        replica="r1",
        started_at=t0 - timedelta(minutes=2),
        finished_at=t0 - timedelta(seconds=90),
        deleted=120,
        retired=0,
        removed=0,
        seconds=2.0,
        caught_up=False,  # never caught up: behind since this pass started
    )
    with use_clock(FakeClock(t0 + timedelta(milliseconds=236))):
        call_command("jobs", "health")
        lines = capsys.readouterr().out.splitlines()
        call_command("jobs", "health", "--json")
        report = json.loads(capsys.readouterr().out.split("\nhealthy")[0])
    assert lines[0] == "r1: running, heartbeat 2026-12-07 06:16:09 UTC (236 ms ago, ok)"
    assert lines[1] == (
        "retention: last pass 2026-12-07 06:14:39 UTC (1 min 30 s ago) by r1, deleted 120 "
        "(60.0/s), lag 2 min"
    )
    assert report["replicas"][0]["heartbeat_at"] == "2026-12-07T06:16:09.123456+00:00"
    assert report["retention"]["lag_seconds"] == 120.236
