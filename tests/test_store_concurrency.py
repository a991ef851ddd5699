"""Planning and claiming from several real connections at once."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import transaction

from django_jobs import store
from django_jobs.models import Attempt, Occurrence

from .concurrency import backends_waiting_on_locks, on_own_connection, run_together, wait_until
from .factories import T0, ScheduleFactory
from .storeutil import LEASE, claim, plan, planned

pytestmark = pytest.mark.django_db(transaction=True)


def test_concurrent_planning_of_one_instant_leaves_one_row() -> None:
    schedule = ScheduleFactory.create()
    first_inserted = threading.Event()
    may_commit = threading.Event()

    def first() -> list:
        with transaction.atomic():
            ids = plan(schedule, T0, now=T0)
            first_inserted.set()
            may_commit.wait(timeout=30)
        return ids

    def second() -> list:
        first_inserted.wait(timeout=30)
        return plan(schedule, T0, now=T0)  # blocks on the first's uncommitted row

    results: dict[str, list] = {}
    threads = [
        threading.Thread(target=lambda: results.__setitem__("first", on_own_connection(first)())),
        threading.Thread(target=lambda: results.__setitem__("second", on_own_connection(second)())),
    ]
    for thread in threads:
        thread.start()
    # Both inserts are in flight at once: the second waits on the first's row lock.
    wait_until(lambda: backends_waiting_on_locks() >= 1, what="the second planner to block")
    may_commit.set()
    for thread in threads:
        thread.join(timeout=60)

    assert Occurrence.objects.filter(schedule=schedule).count() == 1
    assert sorted(len(ids) for ids in results.values()) == [0, 1]


def test_planning_the_same_batch_from_three_connections_leaves_one_row_each() -> None:
    schedule = ScheduleFactory.create()
    instants = [T0 + timedelta(minutes=i) for i in range(200)]
    results = run_together(*[lambda: store.plan(planned(schedule, *instants), now=T0)] * 3)
    assert Occurrence.objects.filter(schedule=schedule).count() == 200
    assert sum(len(ids) for ids in results) == 200
    assert len({i for ids in results for i in ids}) == 200


def test_concurrent_claimers_never_hold_the_same_occurrence() -> None:
    schedules = ScheduleFactory.create_batch(3)
    for schedule in schedules:
        plan(schedule, *[T0 + timedelta(seconds=i) for i in range(100)], now=T0)
    now = T0 + timedelta(minutes=5)

    def drain(owner: str):
        def run() -> list:
            taken = []
            while batch := claim(owner, now, limit=7):
                taken.extend(batch)
            return taken

        return run

    results = run_together(drain("a"), drain("b"), drain("c"))
    held = [lease.occurrence_id for leases in results for lease in leases]
    assert len(held) == 300
    assert len(set(held)) == 300, "an occurrence was claimed by two workers at once"
    assert all(results), "every claimer should have taken part"
    assert set(Occurrence.objects.values_list("fencing_token", flat=True)) == {1}
    assert Attempt.objects.count() == 300


def test_fencing_token_strictly_increases_across_claims_by_racing_workers() -> None:
    schedule = ScheduleFactory.create(max_attempts=10)  # eight lost attempts stay under it
    (occurrence_id,) = plan(schedule, T0, now=T0)
    now = T0
    tokens: list[int] = []
    for round_ in range(8):
        now = now + LEASE + timedelta(seconds=1)  # the previous lease has expired
        results = run_together(*[lambda o=o, n=now: claim(f"w{o}", n) for o in range(3)])
        winners = [lease for leases in results for lease in leases]
        assert len(winners) == 1, f"round {round_}: {len(winners)} workers hold the occurrence"
        tokens.append(winners[0].token)
    assert tokens == sorted(set(tokens))
    assert tokens == list(range(1, 9))
    recorded = list(
        Attempt.objects.filter(occurrence_id=occurrence_id)
        .order_by("number")
        .values_list("fencing_token", flat=True)
    )
    assert recorded == tokens
