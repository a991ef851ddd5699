"""Declared only when a process test asks for it (its worker has its own database)."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta

from django_jobs import Misfire, Overlap, Retry, after, at, every, schedule

# One name, or several separated by commas ("tick,outage_reader").
DECLARED = set(os.environ.get("JOBS_TEST_DECLARE", "").split(","))

if "tick" in DECLARED:
    schedule(
        "proc.tick",
        job="proc.effect",
        timing=every(timedelta(seconds=1)),
        max_delay=timedelta(seconds=3),
        misfire=Misfire.SKIP,
        overlap=Overlap.ALLOW,
        timeout=timedelta(seconds=30),
        retention=timedelta(days=1),
        operating_owner="tests",
        record_owner="tests@example.com",
        status="active",
    )

if "outage_reader" in DECLARED:
    # One run, due as soon as the worker syncs it, with a single attempt: an outage that
    # counted as a failure would kill it.
    schedule(
        "proc.outage_reader",
        job="proc.outage_reader",
        timing=after(timedelta(0)),
        retry=Retry(max_attempts=1),
        timeout=timedelta(minutes=10),
        retention=timedelta(days=1),
        operating_owner="tests",
        record_owner="tests@example.com",
        status="active",
    )

# A deploy that lands after three one-offs' instants (tests/test_late_one_off_processes.py):
# the worker (runworker_fileclock) syncs them with its clock at LATE_DEPLOY. Each has
# max_delay 1 h: the first is within it, the other two past it, one replayed, one skipped.
LATE_DEPLOY = datetime(2027, 5, 1, 12, 0, tzinfo=UTC)
LATE_ONE_OFFS = {
    "proc.late.within": (LATE_DEPLOY - timedelta(minutes=30), Misfire.REPLAY_ONCE),
    "proc.late.replayed": (LATE_DEPLOY - timedelta(hours=2), Misfire.REPLAY_ONCE),
    "proc.late.skipped": (LATE_DEPLOY - timedelta(hours=2), Misfire.SKIP),
}

if "late_one_offs" in DECLARED:
    for key, (instant, misfire) in LATE_ONE_OFFS.items():
        schedule(
            key,
            job="proc.effect",
            timing=at(instant),
            max_delay=timedelta(hours=1),
            misfire=misfire,
            timeout=timedelta(seconds=30),
            retention=timedelta(days=1),
            operating_owner="tests",
            record_owner="tests@example.com",
            status="active",
        )

if os.environ.get("JOBS_TEST_DECLARE") == "many":
    # A project's worth of declarations (JOBS_TEST_DECLARED of them): the replica's start-up
    # sync of them runs beside serving.
    for n in range(int(os.environ.get("JOBS_TEST_DECLARED", "1000"))):
        schedule(
            f"proc.many.{n:05d}",
            job="proc.effect",
            timing=every(timedelta(days=1)),
            timeout=timedelta(seconds=30),
            retention=timedelta(days=1),
            operating_owner="tests",
            record_owner="tests@example.com",
            status="active",
        )

if "stubborn_timeout" in DECLARED:
    # One run that ignores cancellation, with a short timeout and a long lease: only the
    # timeout (and its grace) can end it.
    schedule(
        "proc.stubborn_timeout",
        job="proc.stubborn_beat",
        timing=after(timedelta(0)),
        retry=Retry(max_attempts=1),
        timeout=timedelta(seconds=5),
        retention=timedelta(days=1),
        operating_owner="tests",
        record_owner="tests@example.com",
        status="active",
    )

# A @task run by a declared schedule at 02:30 in Berlin, across the 2027 spring gap
# (tests/test_task_schedules.py): on 2027-03-28 02:30 does not exist and "shift" runs it at
# 03:00 CEST.
TASK_BERLIN_KEY = "proc.task.berlin"

if "task_berlin" in DECLARED:
    from django_jobs import cron

    from .tasks import nightly_report

    schedule(
        TASK_BERLIN_KEY,
        task=nightly_report,
        args=["berlin"],
        kwargs={"pages": 3},
        timing=cron(
            "30 2 * * *",
            zone="Europe/Berlin",
            skipped="shift",
            repeated="first",
            reason="the nightly report is built at 02:30 for readers in Berlin",
        ),
        max_delay=timedelta(hours=6),
        overlap=Overlap.ALLOW,
        timeout=timedelta(minutes=15),
        retention=timedelta(days=30),
        operating_owner="tests",
        record_owner="tests@example.com",
        status="active",
    )
