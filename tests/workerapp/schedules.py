"""Declared only when a process test asks for it (its worker has its own database)."""

from __future__ import annotations

import os
from datetime import timedelta

from django_jobs import Misfire, Overlap, every, schedule

if os.environ.get("JOBS_TEST_DECLARE") == "tick":
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
