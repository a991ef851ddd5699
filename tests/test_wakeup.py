"""An idle worker sleeps until due work or a NOTIFY from another replica, not on a short poll."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection

from django_jobs import every, store
from django_jobs.services import upsert_schedule
from django_jobs.store.replicas import QUERIES
from django_jobs.worker.wakeup import Wakeup, conninfo_from_django

from .concurrency import on_own_connection, wait_until
from .factories import T0, ScheduleFactory, declaration
from .storeutil import claim, plan

pytestmark = pytest.mark.django_db(transaction=True)

STORM_DRAINS = 25


def test_a_notify_from_another_connection_wakes_a_sleeping_worker() -> None:
    wakeup = Wakeup(conninfo_from_django())
    try:
        assert wakeup.wait(0.01) == "timeout"  # listening now
        notifier = threading.Timer(0.2, on_own_connection(lambda: store.notify("plan")))
        notifier.start()
        assert wakeup.wait(60) == "notify"  # long before the 60-second deadline
        notifier.join()
    finally:
        wakeup.close()


def test_a_notify_sent_after_listen_and_before_the_first_wait_is_not_missed() -> None:
    """``Worker.serve`` listens before its first look for work: work committed (and
    notified) after that look, before the loop first sleeps, still wakes it."""
    wakeup = Wakeup(conninfo_from_django())
    try:
        assert wakeup.listen()
        on_own_connection(lambda: store.notify("plan"))()
        assert wakeup.wait(60) == "notify"
    finally:
        wakeup.close()


def test_a_poke_wakes_it_at_once() -> None:
    wakeup = Wakeup(None)
    wakeup.poke()
    assert wakeup.wait(60) == "poke"


def test_without_a_listening_connection_it_sleeps_until_the_deadline() -> None:
    assert Wakeup(None).wait(0.05) == "timeout"


def test_next_wakeup_is_the_earliest_due_schedule_or_occurrence() -> None:
    ScheduleFactory.create(next_due_at=T0 + timedelta(hours=1))
    other = ScheduleFactory.create(next_due_at=None)
    assert store.next_wakeup(now=T0) == T0 + timedelta(hours=1)
    plan(other, T0 + timedelta(minutes=5), now=T0)
    assert store.next_wakeup(now=T0) == T0 + timedelta(minutes=5)
    (lease,) = claim("w", T0 + timedelta(minutes=5))
    # While it runs, its lease expiry is when it would next need a worker.
    assert store.next_wakeup(now=T0) == lease.expires_at


def test_next_wakeup_of_named_queues_is_the_earliest_due_of_those_queues() -> None:
    for queue, minutes in (("mail", 7), ("reports", 3), ("default", 1)):
        record = ScheduleFactory.create(queue=queue, next_due_at=None)
        plan(record, T0 + timedelta(minutes=minutes), now=T0)
    assert store.next_wakeup(now=T0, queues=["mail"]) == T0 + timedelta(minutes=7)
    assert store.next_wakeup(now=T0, queues=["mail", "reports"]) == T0 + timedelta(minutes=3)
    assert store.next_wakeup(now=T0, queues=["idle"]) is None
    assert store.next_wakeup(now=T0) == T0 + timedelta(minutes=1)  # every queue


def test_the_wakeup_of_one_queue_walks_its_own_range_past_an_older_backlog() -> None:
    """50,000 claimable rows of another queue, all due before the served queue's one: the
    lookup reads one range of django_jobs_occurrence_qdue, not the due-at index filtered by
    queue (bench/perf ``queues``: 9 million rows read at 10 million)."""
    backlog = ScheduleFactory.create(queue="bulk", next_due_at=None)
    mine = ScheduleFactory.create(queue="mail", next_due_at=None)
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO django_jobs_occurrence (id, schedule_id, tenant, scheduled_at, state,"
            " skip_reason, trigger, due_at, lease_owner, fencing_token, attempts, failures,"
            " last_error_type, last_error_message, queue)"
            " SELECT gen_random_uuid(), %s, '', %s - make_interval(secs => g), 'scheduled',"
            " '', 'schedule', %s - make_interval(secs => g), '', 0, 0, 0, '', '', 'bulk'"
            " FROM generate_series(1, 50000) g",
            [backlog.pk, T0, T0],
        )
        cursor.execute("ANALYZE django_jobs_occurrence")
    plan(mine, T0 + timedelta(minutes=1), now=T0)
    params: dict[str, Any] = {"excluded": [], "jobs": None, "ahead": timedelta(0)}
    params["queues"] = ["mail"]
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (ANALYZE, FORMAT TEXT) " + QUERIES["next_wakeup"], params)
        explained = "\n".join(row[0] for row in cursor.fetchall())
    assert "Index Scan using django_jobs_occurrence_qdue" in explained, explained
    assert "Rows Removed by Filter" not in explained, explained
    assert store.next_wakeup(now=T0, queues=["mail"]) == T0 + timedelta(minutes=1)


def test_a_runtime_schedule_change_wakes_serving_replicas() -> None:
    """A busy replica plans only when a schedule may have come due: a schedule created or
    changed at run time notifies, so it is planned at once rather than at the next poll."""
    wakeup = Wakeup(conninfo_from_django())
    try:
        assert wakeup.wait(0.01) == "timeout"  # listening now
        pings = declaration("acme.pings", tenant="acme", timing=every(timedelta(minutes=5)))
        alice = User.objects.create_superuser("alice")
        upsert_schedule(pings, actor=alice, reason="acme pings", now=T0)
        assert wakeup.wait(60) == "notify"
    finally:
        wakeup.close()


def test_a_poke_after_a_storm_of_pokes_still_wakes_the_loop() -> None:
    """Pokes coalesce (one pipe write until the loop takes it). Regression: the flag was
    cleared before the pipe was drained, so a poke written during the drain left it set over
    an empty pipe and every later poke was skipped: the loop slept to its deadline."""
    wakeup = Wakeup(None)
    seen_final = threading.Event()
    final = threading.Event()
    stop_storm = threading.Event()
    drains: list[None] = []  # one entry per wake-up of the loop

    def loop() -> None:
        while not seen_final.is_set():
            wakeup.wait(60)
            drains.append(None)
            if final.is_set():
                seen_final.set()

    def storm() -> None:
        while not stop_storm.is_set():
            wakeup.poke()

    waiter = threading.Thread(target=loop, daemon=True)
    pokers = [threading.Thread(target=storm, daemon=True) for _ in range(4)]
    waiter.start()
    for poker in pokers:
        poker.start()
    try:
        # Each drain during the storm is one chance for the race: give it some two dozen.
        wait_until(lambda: len(drains) >= STORM_DRAINS, what="the loop to drain during the storm")
    finally:
        stop_storm.set()
    for poker in pokers:
        poker.join()
    final.set()
    wakeup.poke()
    assert seen_final.wait(5), "the last poke was lost: the loop sleeps to its deadline"
