"""Fencing values across a purge and a replay, with real processes: a ``runworker`` completes an
occurrence, ``manage.py jobs purge`` deletes its row, ``manage.py jobs replay KEY --at`` creates
the same identity again, and another ``runworker`` claims it with a token the identity never
had. The store's side of it: ``test_fencing_identity``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from datetime import timedelta

import pytest
from django.contrib.auth.models import User

from django_jobs import store
from django_jobs.models import Attempt, AttemptOutcome, Limit, Occurrence, OccurrenceState, Trigger
from tests.workerapp.models import Effect

from .concurrency import wait_until
from .factories import ScheduleFactory
from .processes import ROOT, Replica, database_url
from .storeutil import plan

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.processes]

# Automatic retention off in the replicas: only the operator's purge deletes the row.
NO_RETENTION = {"JOBS_RETENTION_SECONDS": "0"}


def manage_jobs(*args: str) -> str:
    """``manage.py jobs ARGS`` as a process of its own on the test database; its output."""
    done = subprocess.run(
        [sys.executable, "-W", "ignore", str(ROOT / "manage.py"), "jobs", *args],
        cwd=ROOT,
        env={
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "tests.worker_settings",
            "DATABASE_URL": database_url(),
        },
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, f"jobs {' '.join(args)}: {done.stdout}{done.stderr}"
    return done.stdout


def run_until_completed(replica: Replica, occurrence_id: uuid.UUID) -> None:
    wait_until(
        lambda: Occurrence.objects.filter(
            pk=occurrence_id, state=OccurrenceState.COMPLETED
        ).exists(),
        timeout=60,
        what=f"{replica.name} to complete the occurrence (its log: {replica.log_path})",
    )
    replica.signal(signal.SIGTERM)
    assert replica.wait_exit() == 0


def test_a_purged_and_replayed_occurrence_never_gets_a_token_it_had_before(start) -> None:
    User.objects.create_superuser("root", "root@example.com", "x")
    now = store.database_clock().replace(microsecond=0)
    at = now - timedelta(minutes=10)
    schedule = ScheduleFactory.create(
        tenant="acme", key="acme.fenced", job="proc.effect", anchor=at, interval=timedelta(hours=1)
    )
    Limit.objects.create(schedule=schedule, keep_for=timedelta(minutes=1))
    (occurrence_id,) = plan(schedule, at, now=now)

    run_until_completed(start("first", env=NO_RETENTION), occurrence_id)
    purged = set(
        Attempt.objects.filter(occurrence_id=occurrence_id).values_list("fencing_token", flat=True)
    )
    assert purged

    as_root_on = ("acme.fenced", "--tenant", "acme", "--actor", "root")
    assert "purged 1 finished occurrence(s)" in manage_jobs("purge", *as_root_on)
    assert not Occurrence.objects.filter(pk=occurrence_id).exists()
    assert not Attempt.objects.filter(occurrence_id=occurrence_id).exists()
    manage_jobs("replay", *as_root_on, "--at", at.isoformat(), "--reason", "purged too soon")
    recreated = Occurrence.objects.get(pk=occurrence_id)  # the same identity, a new row
    assert (recreated.state, recreated.attempts) == (OccurrenceState.SCHEDULED, 0)

    run_until_completed(start("second", env=NO_RETENTION), occurrence_id)
    (attempt,) = Attempt.objects.filter(occurrence_id=occurrence_id)
    assert (attempt.replica, attempt.trigger, attempt.outcome) == (
        "second",
        Trigger.MANUAL,
        AttemptOutcome.SUCCEEDED,
    )
    assert attempt.fencing_token > max(purged)
    effects = list(
        Effect.objects.filter(occurrence_key=str(occurrence_id))
        .order_by("id")
        .values_list("replica", "token")
    )
    assert effects == [("first", max(purged)), ("second", attempt.fencing_token)]
