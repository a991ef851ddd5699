"""Declared only when a process test asks for it (its worker has its own database)."""

from __future__ import annotations

import os
from datetime import timedelta

from django_jobs import Misfire, Overlap, Retry, after, every, schedule

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
