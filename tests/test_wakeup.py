"""An idle worker sleeps until due work or a NOTIFY from another replica, not on a short poll."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.contrib.auth.models import User

from django_jobs import every, store
from django_jobs.services import upsert_schedule
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
