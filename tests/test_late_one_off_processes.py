"""One-offs declared in a ``schedules.py`` whose instants passed before a real ``runworker``
synced them at start-up (a deploy that landed late): each is decided by its misfire policy
when its record is created. Within ``max_delay`` it runs once; past it, ``replay_once`` runs
it once, late (trigger ``catchup``), and ``skip`` records it skipped (reason ``misfire``) with
its log line and audit record. Before, none of them was ever planned: each record stayed
active with nothing due, and these waits timed out.

The replica is ``runworker_fileclock``, its clock at ``LATE_DEPLOY`` (a file this test
writes), so the instants are late by exactly what the declarations say.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from django_jobs.identity import occurrence_id
from django_jobs.models import AuditRecord, Occurrence, OccurrenceState, Schedule
from tests.workerapp.management.commands.runworker_fileclock import CLOCK_FILE
from tests.workerapp.models import Effect
from tests.workerapp.schedules import LATE_DEPLOY, LATE_ONE_OFFS

from .concurrency import wait_until
from .processes import FileClock, log_tail

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.processes]


def identity(key: str) -> str:
    return str(occurrence_id("", key, LATE_ONE_OFFS[key][0]))


def effects() -> Counter[str]:
    return Counter(Effect.objects.values_list("occurrence_key", flat=True))


def test_one_offs_declared_after_their_instants_are_decided_when_a_real_worker_syncs_them(
    start, tmp_path: Path
) -> None:
    clock = FileClock(tmp_path / "clock", LATE_DEPLOY)
    replica = start(
        "r1",
        env={CLOCK_FILE: str(clock.path), "JOBS_TEST_DECLARE": "late_one_offs"},
        command="runworker_fileclock",
    )
    replica.wait_logged("sync.done", timeout=120)
    ran = [identity("proc.late.within"), identity("proc.late.replayed")]
    wait_until(
        lambda: all(effects()[key] for key in ran),
        timeout=60,
        what=lambda: f"both late one-offs to run: {log_tail(replica)}",
    )
    occurrences = {
        o.schedule.key: (o.scheduled_at, o.state, o.trigger, o.skip_reason)
        for o in Occurrence.objects.select_related("schedule")
    }
    assert occurrences == {
        "proc.late.within": (LATE_ONE_OFFS["proc.late.within"][0], "completed", "schedule", ""),
        "proc.late.replayed": (LATE_ONE_OFFS["proc.late.replayed"][0], "completed", "catchup", ""),
        "proc.late.skipped": (
            LATE_ONE_OFFS["proc.late.skipped"][0],
            OccurrenceState.SKIPPED,
            "schedule",
            "misfire",
        ),
    }
    assert effects() == Counter(ran)  # each ran once; the skipped one never
    skipped = Schedule.objects.get(key="proc.late.skipped")
    record = AuditRecord.objects.get(action="misfire.skipped")
    assert (record.schedule_id, record.target_id, record.actor) == (
        skipped.pk,
        identity("proc.late.skipped"),
        "django_jobs.planner",
    )
    lines = [e for e in replica.events() if e.get("event") == "occurrence.skipped"]
    assert [(e["schedule"], e["reason"]) for e in lines] == [("proc.late.skipped", "misfire")]
    assert replica.logged("one_off.late") == 2
