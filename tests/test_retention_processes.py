"""Automatic retention in a serving fleet: real ``runworker`` processes, no operator command."""

from __future__ import annotations

import signal
from collections import Counter
from datetime import UTC, timedelta

import pytest

from django_jobs import store
from django_jobs.models import Limit, Occurrence, Schedule, Step
from django_jobs.safe_error import SafeError

from .concurrency import wait_until
from .factories import ScheduleFactory
from .storeutil import claim, plan

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.processes]


def test_a_serving_fleet_deletes_finished_rows_past_retention_and_nothing_else(start) -> None:
    now = store.database_clock().replace(microsecond=0)
    # Unfinished rows far older than their schedule's retention: a run holding its lease, one
    # waiting for its retry, one never started. The schedule is disabled so no replica runs
    # them; retention must leave them alone.
    held = ScheduleFactory.create(job="proc.stepped")
    Limit.objects.create(schedule=held, keep_for=timedelta(seconds=1))
    old = [now - timedelta(days=d) for d in (3, 2, 1)]
    plan(held, *old, now=now)
    processing, waiting = claim(owner="ghost", now=now, lease_for=timedelta(hours=1), limit=2)
    store.fail(waiting, now=now, error=SafeError("E", "later"), retry_at=now + timedelta(days=9))
    Schedule.objects.filter(pk=held.pk).update(enabled=False, disabled_reason="held for test")
    before = Counter(Occurrence.objects.filter(schedule=held).values_list("state", flat=True))
    assert before == {"processing": 1, "failed": 1, "scheduled": 1}

    env = {"JOBS_RETENTION_SECONDS": "0.5"}
    replicas = [start(f"r{n}", env=env) for n in range(2)]
    # The schedule begins once both serve: on loaded cores a replica can take longer than any
    # max_delay to start, and instants missed before would be skipped without rows to delete.
    for replica in replicas:
        replica.wait_logged("worker.started", timeout=120)
    now = store.database_clock().replace(microsecond=0)
    every_second = ScheduleFactory.create(
        job="proc.stepped",
        interval=timedelta(seconds=1),
        anchor=now,
        created_at=now,
        next_due_at=now,
        max_delay=timedelta(hours=1),
    )
    Limit.objects.create(schedule=every_second, keep_for=timedelta(seconds=3))
    store.notify("plan")

    def oldest_rows_gone() -> bool:
        completed = sum(r.logged("occurrence.completed") for r in replicas)
        rows = Occurrence.objects.filter(schedule=every_second)
        first = rows.filter(scheduled_at__lt=now + timedelta(seconds=3))
        return completed >= 8 and not first.exists()

    wait_until(oldest_rows_gone, timeout=60, what="retention to delete the first finished rows")
    passes = [e for r in replicas for e in r.events() if e["event"] == "retention.pass"]
    assert sum(e["deleted"] for e in passes) >= 3
    assert all(e["rows_per_second"] >= 0 for e in passes)
    assert not [e for r in replicas for e in r.events() if e["event"] == "retention.failed"]
    # Every remaining step belongs to a remaining occurrence; the deleted ones took theirs.
    remaining = set(Occurrence.objects.values_list("id", flat=True))
    assert set(Step.objects.values_list("occurrence_id", flat=True)) <= remaining
    assert Step.objects.filter(occurrence__schedule=every_second).exists()

    # Retention keeps up: there comes a moment when no finished row older than keep_for plus
    # one pass interval and one pass is left (waited for: on loaded cores a pass can come late).
    def window_kept() -> bool:
        cutoff = store.database_clock() - timedelta(seconds=3 + 0.5 + 2)
        return not Occurrence.objects.filter(
            schedule=every_second, state="completed", scheduled_at__lt=cutoff
        ).exists()

    wait_until(window_kept, timeout=60, what="retention to keep up with its window")
    after = Counter(Occurrence.objects.filter(schedule=held).values_list("state", flat=True))
    assert after == before
    assert sorted(
        Occurrence.objects.filter(schedule=held).values_list("scheduled_at", flat=True)
    ) == [i.astimezone(UTC) for i in old]
    for replica in replicas:
        replica.signal(signal.SIGTERM)
        assert replica.wait_exit() == 0
    assert Occurrence.objects.get(pk=processing.occurrence_id).lease_owner == "ghost"
