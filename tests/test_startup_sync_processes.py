"""A replica's start-up sync runs beside serving: real ``runworker`` processes.

The straggler and deploy stall of issue 15 came from replicas that synced every declaration
before their first claim, one after another, holding the rows they compared. Here a replica
serves due work while its sync cannot even start, and replicas started together run one sync.
"""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest

from django_jobs.models import Schedule, SyncState

from .concurrency import wait_until
from .processes import database_url
from .test_processes import due_schedule, state_of

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.processes]

MANY = {"JOBS_TEST_DECLARE": "many", "JOBS_TEST_DECLARED": "2000"}


@pytest.fixture
def sync_in_progress() -> Iterator[psycopg.Connection]:
    """Another session holding the sync lock, as a replica busy with a long sync does."""
    with psycopg.connect(database_url(), autocommit=True) as held:
        held.execute("SELECT pg_advisory_lock(hashtext('django_jobs.sync'))")
        yield held


def test_a_replica_serves_due_work_while_its_start_up_sync_waits(start, sync_in_progress) -> None:
    schedule = due_schedule("proc.effect", 5)
    replica = start("r1", env=MANY)
    wait_until(lambda: state_of(schedule)["completed"] == 5, timeout=60, what="5 completions")
    # Its sync has not run: the 2,000 declarations are not written yet.
    assert replica.logged("sync.done") == 0
    assert not Schedule.objects.filter(key__startswith="proc.many.").exists()

    sync_in_progress.execute("SELECT pg_advisory_unlock(hashtext('django_jobs.sync'))")
    replica.wait_logged("sync.done", timeout=120)
    assert Schedule.objects.filter(key__startswith="proc.many.").count() == 2000
    assert SyncState.objects.get().synced_by == "r1"


def test_replicas_started_together_run_one_sync_between_them(start) -> None:
    replicas = [start(f"r{n}", env=MANY) for n in range(3)]
    for replica in replicas:
        replica.wait_logged("sync.done", timeout=120)
    reports = [e["report"] for r in replicas for e in r.events() if e.get("event") == "sync.done"]
    assert sum(report.startswith("2000 created") for report in reports) == 1, reports
    assert sum(report.startswith("skipped") for report in reports) == 2, reports
