"""Planning and claiming from several real connections at once."""

from __future__ import annotations

import contextlib
import threading
from datetime import timedelta

import pytest
from django.db import connection, transaction

from django_jobs import store
from django_jobs.models import Attempt, Occurrence, Schedule

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
    tokens = list(Occurrence.objects.values_list("fencing_token", flat=True))
    assert len(set(tokens)) == 300, "one sequence: no two claims share a token"
    # Each attempt is on its occurrence row (a history row is written when it ends).
    assert Occurrence.objects.filter(state="processing", attempts=1).count() == 300
    assert not Attempt.objects.exists()


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
    recorded = Occurrence.objects.get(pk=occurrence_id).attempts_so_far()
    assert [a.fencing_token for a in recorded] == tokens


GATE_LOCK = 4242  # the advisory lock the gate below waits on


@contextlib.contextmanager
def gated_schedule_reads():
    """Sessions under role ``jobs_gated`` wait on advisory lock ``GATE_LOCK`` whenever they read
    a schedule row (a row-level security policy calls the gate): a test can hold a claim
    between the moment its statement took its snapshot and the moment it reads the schedule.
    The test's own sessions (superuser) are never gated."""
    setup = [
        "CREATE ROLE jobs_gated NOLOGIN",
        "GRANT ALL ON ALL TABLES IN SCHEMA public TO jobs_gated",
        "GRANT ALL ON ALL SEQUENCES IN SCHEMA public TO jobs_gated",
        "CREATE FUNCTION jobs_test_gate() RETURNS boolean LANGUAGE plpgsql AS $$ BEGIN"
        f" PERFORM pg_advisory_lock_shared({GATE_LOCK});"
        f" PERFORM pg_advisory_unlock_shared({GATE_LOCK}); RETURN true; END $$",
        f"ALTER TABLE {Schedule._meta.db_table} ENABLE ROW LEVEL SECURITY",
        f"CREATE POLICY gate ON {Schedule._meta.db_table} USING (jobs_test_gate())",
    ]
    teardown = [
        f"DROP POLICY IF EXISTS gate ON {Schedule._meta.db_table}",
        f"ALTER TABLE {Schedule._meta.db_table} DISABLE ROW LEVEL SECURITY",
        "DROP FUNCTION IF EXISTS jobs_test_gate()",
        "DROP OWNED BY jobs_gated",
        "DROP ROLE IF EXISTS jobs_gated",
    ]
    with connection.cursor() as cursor:
        for statement in setup:
            cursor.execute(statement)
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            for statement in teardown:
                cursor.execute(statement)


def test_a_claim_committed_after_another_claims_snapshot_keeps_it_off_a_queue_schedule() -> None:
    """Overlap ``queue``: replica B's claim takes its snapshot, then waits before it reads the
    schedule; replica A claims the schedule's first occurrence and commits; B goes on. B must
    not start the second occurrence while the first is processing, although in B's snapshot
    the first was still only scheduled."""
    schedule = ScheduleFactory.create(overlap="queue", max_delay=timedelta(hours=1))
    plan(schedule, T0, T0 + timedelta(minutes=1), now=T0)
    now = T0 + timedelta(minutes=2)
    results: dict[str, list] = {}

    def gated_claim() -> None:
        with connection.cursor() as cursor:
            cursor.execute("SET ROLE jobs_gated")
        results["B"] = claim("B", now, limit=1)

    with gated_schedule_reads():
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_lock(%s)", [GATE_LOCK])
        b = threading.Thread(target=on_own_connection(gated_claim))
        try:
            b.start()
            wait_until(lambda: backends_waiting_on_locks() == 1, what="B's claim to wait")
            results["A"] = on_own_connection(lambda: claim("A", now, limit=1))()
        finally:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_unlock(%s)", [GATE_LOCK])
            b.join(timeout=60)

    assert len(results["A"]) == 1
    assert results["B"] == []
    assert Occurrence.objects.filter(schedule=schedule, state="processing").count() == 1
