"""The campaign's handlers. Each commits its effect through ``run.atomic()``; one also calls a
'partner system' through ``run.once()``; some fail on purpose, some run long.

The misbehaving ones (below ``doomed``) do what real handlers do by accident: kill their
process, ignore cancellation, meet a store outage mid-run, leave state on their database
session; one is a coroutine. The poisons (at the end) run only on one-off schedules the
injector declares (``bench/chaos/declare.py``): a query of death, ``sys.exit``,
``KeyboardInterrupt``, and a run that ignores its timeout. docs/reliability.md says what the
campaign checks of each.

Every handler beats (``beats.BEATS``): at its start, while it works, and at its end, so the
runner can tell from the handlers' own evidence when each run was executing.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import sys
import time
import zlib

from asgiref.sync import sync_to_async
from django.db import connection
from django.db.models import DateTimeField, F, Func

from django_jobs import Retry, Run, job
from django_jobs.registry import Departure

from .beats import BEATS
from .models import Effect, OutsideCall, OutsideEffect, SessionView, Sign

REPLICA = os.environ.get("CHAOS_REPLICA", "")

# The campaign's handlers record their effects themselves (the invariants read those rows):
# their Exception record.
CAMPAIGN = Departure(
    reason="a fault-campaign handler: it records its own effects for the invariants to read",
    review_by=dt.date(2027, 12, 31),
)


def _beat(run: Run, job_name: str) -> None:
    """A heartbeat of this run, outside the database (``beats.py``)."""
    BEATS.beat(run.occurrence_key, run.fencing_token, job_name)


def _commit_effect(run: Run, schedule: str) -> None:
    with run.atomic():
        Effect.objects.create(
            schedule=schedule,
            occurrence_key=run.occurrence_key,
            token=run.fencing_token,
            replica=REPLICA,
        )
    _beat(run, f"chaos.{schedule}")


def _spread(run: Run, low: float, high: float) -> float:
    """A duration in [low, high) that depends only on the occurrence: replays repeat it."""
    return low + (zlib.crc32(run.occurrence_key.encode()) % 1000) / 1000 * (high - low)


def _work(run: Run, seconds: float) -> None:
    """Stand-in for real work: busy for ``seconds``, stopping early when cancelled; a beat
    every 0.2 s."""
    deadline = time.monotonic() + seconds
    beat_at = 0.0
    while time.monotonic() < deadline:
        run.raise_if_cancelled()
        if time.monotonic() >= beat_at:
            _beat(run, "chaos.long")
            beat_at = time.monotonic() + 0.2
        time.sleep(0.05)


def _deliver(idempotency_key: str) -> None:
    """The partner: records every call, applies each idempotency key once."""
    OutsideCall.objects.create(idempotency_key=idempotency_key, replica=REPLICA)
    applied, created = OutsideEffect.objects.get_or_create(idempotency_key=idempotency_key)
    if not created:
        OutsideEffect.objects.filter(pk=applied.pk).update(deliveries=F("deliveries") + 1)


# Its enqueued work (bench/chaos/enqueuer.py) may lose attempts to SIGKILLs and crashes of the
# replicas running it: room for them before it would be dead.
@job("chaos.effect", departure=CAMPAIGN, retry=Retry(max_attempts=10, backoff=dt.timedelta(0)))
def effect(run: Run) -> None:
    _beat(run, "chaos.effect")
    _commit_effect(run, "effect")


@job("chaos.outside", departure=CAMPAIGN)
def outside(run: Run) -> None:
    _beat(run, "chaos.outside")
    run.once("notify-partner", lambda: _deliver(f"{run.occurrence_key}:notify-partner"))
    _commit_effect(run, "outside")


@job("chaos.long", departure=CAMPAIGN)
def long(run: Run) -> None:
    _work(run, _spread(run, 2.0, 8.0))
    _commit_effect(run, "long")


@job("chaos.flaky", departure=CAMPAIGN)
def flaky(run: Run) -> None:
    """Fails its first 0, 1 or 2 attempts (by occurrence), then succeeds."""
    _beat(run, "chaos.flaky")
    if run.attempt <= zlib.crc32(run.occurrence_key.encode()) % 3:
        raise RuntimeError(f"flaky: attempt {run.attempt} fails on purpose")
    _commit_effect(run, "flaky")


@job("chaos.doomed", departure=CAMPAIGN)
def doomed(run: Run) -> None:
    _beat(run, "chaos.doomed")
    raise RuntimeError(f"doomed: attempt {run.attempt} always fails")


class ClockTimestamp(Func):
    """PostgreSQL's ``clock_timestamp()``: the instant the row is written."""

    function = "clock_timestamp"
    template = "%(function)s()"
    output_field = DateTimeField()


def _sign(run: Run, job_name: str) -> None:
    """Leave a sign of life, committed at once (the run thread is in autocommit)."""
    Sign.objects.create(
        job=job_name,
        occurrence_key=run.occurrence_key,
        token=run.fencing_token,
        replica=REPLICA,
        at=ClockTimestamp(),
    )


@job("chaos.crasher", departure=CAMPAIGN)
def crasher(run: Run) -> None:
    """Kills its replica on every attempt, after a sign that it started: a crash loop that the
    worker must end by dead-lettering the occurrence once ``max_attempts`` runs are lost."""
    _sign(run, "chaos.crasher")
    _beat(run, "chaos.crasher")
    os._exit(1)


@job("chaos.stubborn", departure=CAMPAIGN)
def stubborn(run: Run) -> None:
    """Works 4-8 s without ever looking at ``run.cancelled``, leaving a sign of life every
    0.2 s, then commits its effect.

    It counts iterations rather than watching a clock, so a replica paused (SIGSTOP) in the
    middle goes on working after it resumes, with its lease taken over meanwhile: the worker
    has to cut it off.
    """
    for _ in range(round(_spread(run, 4.0, 8.0) / 0.2)):
        _beat(run, "chaos.stubborn")
        _sign(run, "chaos.stubborn")
        time.sleep(0.2)
    _commit_effect(run, "stubborn")


@job("chaos.reader", departure=CAMPAIGN)
def reader(run: Run) -> None:
    """Reads the database every 0.1 s for 3-6 s, then commits its effect. A PostgreSQL
    restart or a severed connection makes a read raise a connection error mid-run: an
    outage the worker must not charge to the occurrence as a failure."""
    for _ in range(round(_spread(run, 3.0, 6.0) / 0.1)):
        _beat(run, "chaos.reader")
        run.raise_if_cancelled()
        Effect.objects.filter(occurrence_key=run.occurrence_key).exists()
        time.sleep(0.1)
    _commit_effect(run, "reader")


# What a run finds in its session: a setting, a temporary table and advisory locks that only
# an earlier run on the same connection could have left there.
SESSION_VIEW_SQL = """
    SELECT coalesce(current_setting('chaos.leak', true), ''),
           to_regclass('pg_temp.chaos_leak') IS NOT NULL,
           (SELECT count(*) FROM pg_locks
            WHERE locktype = 'advisory' AND pid = pg_backend_pid()),
           pg_backend_pid()
"""


def _record_session(run: Run, job_name: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute(SESSION_VIEW_SQL)
        setting, temp_table, locks, pid = cursor.fetchone()
    SessionView.objects.create(
        job=job_name,
        occurrence_key=run.occurrence_key,
        token=run.fencing_token,
        replica=REPLICA,
        backend_pid=pid,
        setting=setting,
        temp_table=temp_table,
        advisory_locks=locks,
    )


@job(
    "chaos.leaker",
    departure=Departure(
        reason="leaves state on its database session on purpose: the campaign checks that the"
        " worker gives every run a clean session",
        review_by=dt.date(2027, 12, 31),
    ),
)
def leaker(run: Run) -> None:
    """Records what it finds in its session, then leaves state there on purpose: a session
    setting, a temporary table and a session-level advisory lock (a key of its own, tried
    without waiting, so a leak never blocks another run)."""
    _beat(run, "chaos.leaker")
    _record_session(run, "chaos.leaker")
    with connection.cursor() as cursor:
        cursor.execute("SELECT set_config('chaos.leak', %s, false)", [run.occurrence_key])
        cursor.execute("CREATE TEMPORARY TABLE IF NOT EXISTS chaos_leak (occurrence text)")
        cursor.execute("INSERT INTO chaos_leak VALUES (%s)", [run.occurrence_key])
        cursor.execute("SELECT pg_try_advisory_lock(hashtext(%s))", [run.occurrence_key])
    _commit_effect(run, "leaker")


@job("chaos.snooper", departure=CAMPAIGN)
def snooper(run: Run) -> None:
    """Records what it finds in its session (a run after a leaker's, on the same connection,
    would find the leak), then commits its effect."""
    _beat(run, "chaos.snooper")
    _record_session(run, "chaos.snooper")
    _commit_effect(run, "snooper")


@job("chaos.coroutine", departure=CAMPAIGN)
async def coroutine(run: Run) -> None:
    """A coroutine handler: awaited by the worker; its effect goes through ``run.atomic()``
    in the run's thread (``sync_to_async``), like any Django ORM code called from async."""
    _beat(run, "chaos.coroutine")
    await asyncio.sleep(_spread(run, 0.1, 1.0))
    await sync_to_async(_commit_effect)(run, "coroutine")


@job("chaos.plain", departure=CAMPAIGN)
def plain(run: Run) -> None:
    """Writes nothing and returns ``None``: its completion is the worker's completer's group
    write, the fenced completion the other handlers' ``run.atomic()`` does not use."""
    _beat(run, "chaos.plain")


# The poisons: declared as one-off schedules by the injector's ``poison`` and ``hang`` faults
# (``bench/chaos/poisons.py``), never on a timing of the campaign's own.


@job("chaos.deadly", departure=CAMPAIGN)
def deadly(run: Run) -> None:
    """A query of death: its own statement ends its database session. Nothing is wrong with
    the store, and another attempt does the same: the worker must count it as the attempt's
    failure, not as an outage to try again at once, forever."""
    _beat(run, "chaos.deadly")
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(pg_backend_pid())")


@job("chaos.exit", departure=CAMPAIGN)
def exits(run: Run) -> None:
    """``sys.exit(1)`` from a handler (a library that 'exits' on an error): the attempt's
    failure, not the replica's end."""
    _beat(run, "chaos.exit")
    sys.exit(1)


@job("chaos.interrupt", departure=CAMPAIGN)
def interrupt(run: Run) -> None:
    """``KeyboardInterrupt`` from a handler (code that simulates Ctrl-C, or re-raises one it
    caught): the attempt's failure, not the replica's end."""
    _beat(run, "chaos.interrupt")
    raise KeyboardInterrupt


@job("chaos.hang", departure=CAMPAIGN)
def hang(run: Run) -> None:
    """Ignores its (short) timeout: works 20 s, a beat every 0.1 s, never looking at
    ``run.cancelled`` and touching no database, so a store outage does not stop it either.
    The worker must cut it off a grace after the timeout, outage or not."""
    for _ in range(200):
        _beat(run, "chaos.hang")
        time.sleep(0.1)
