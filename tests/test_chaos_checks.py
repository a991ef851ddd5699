"""The fault campaign's checks (bench/chaos/invariants.py) catch what they say they catch.

Each test builds a small history with the real store on real PostgreSQL, checks that a clean
history passes, then breaks one thing and checks that exactly that invariant reports it.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from bench.chaos.app.models import Effect, OutsideCall, OutsideEffect
from bench.chaos.invariants import Findings, check_all
from bench.chaos.replicas import Incarnation
from django_jobs import store
from django_jobs.models import Attempt, Schedule

from .factories import T0, ScheduleFactory
from .storeutil import claim, plan

pytestmark = pytest.mark.django_db
S = timedelta(seconds=1)
CUTOFF = T0 + 6 * S  # instants T0+1s .. T0+5s came due


class ConnectionRows:
    def rows(self, sql: str, params: Any = None) -> list[tuple[Any, ...]]:
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            return list(cursor.fetchall())


@pytest.fixture
def history() -> Schedule:
    """Five due instants of a per-second schedule, each run once with its effect committed."""
    with connection.schema_editor() as editor:
        for model in (Effect, OutsideCall, OutsideEffect):
            editor.create_model(model)
    schedule = ScheduleFactory.create(job="chaos.effect", interval=S, anchor=T0, created_at=T0)
    plan(schedule, *[T0 + n * S for n in range(1, 6)], now=T0)
    leases = claim("r1.1", now=T0 + 6 * S)
    for lease in leases:
        Effect.objects.create(
            schedule="effect", occurrence_key=str(lease.occurrence_id), token=lease.token
        )
    store.complete(leases, now=T0 + 7 * S)
    return schedule


def check(lives: list[Incarnation] | None = None) -> Findings:
    return check_all(ConnectionRows(), cutoff=CUTOFF, faults=[], lives=lives or [])


def broken(found: Findings) -> dict[str, list[str]]:
    return {name: problems for name, problems in found.violations.items() if problems}


def test_a_clean_history_passes(history):
    found = check()
    assert broken(found) == {}
    assert found.figures["due"] == 5
    assert found.figures["outcomes"] == {"completed": 5}


def test_an_effect_committed_twice_is_reported(history):
    first = Effect.objects.first()
    assert first is not None
    Effect.objects.create(schedule="effect", occurrence_key=first.occurrence_key, token=99)
    assert set(broken(check())) == {"no effect committed twice"}


def test_a_missing_occurrence_is_lost(history):
    history.occurrences.filter(scheduled_at=T0 + 3 * S).delete()
    problems = broken(check())
    assert set(problems) == {"lost occurrences"}
    assert "no occurrence row" in problems["lost occurrences"][0]


def test_a_completion_without_its_effect_is_reported(history):
    Effect.objects.filter(pk=Effect.objects.first().pk).delete()  # type: ignore[union-attr]
    problems = broken(check())
    assert set(problems) == {"effects match completions"}
    assert "completed without its effect" in problems["effects match completions"][0]


def test_tokens_that_do_not_grow_are_reported(history):
    plan(history, T0 + 6 * S, now=T0)
    (first,) = claim("r1.1", now=T0 + 7 * S)
    (second,) = claim("r2.1", now=first.expires_at + S)  # taken over after expiry
    assert second.token > first.token
    Attempt.objects.filter(occurrence_id=second.occurrence_id, number=2).update(fencing_token=0)
    assert set(broken(check())) == {"fencing tokens increase"}


def test_work_left_running_by_a_sigterm_replica_is_reported(history, tmp_path: Path):
    plan(history, T0 + 5 * S + S / 2, now=T0)  # an extra, ad hoc instant: not in the timing
    (lease,) = claim("r2.1", now=T0 + 8 * S)
    log = tmp_path / "r2.1.log"
    log.write_text("")
    life = Incarnation("r2.1", 0.0, T0, log, ended=T0 + 9 * S, ended_by="sigterm", exit_code=0)
    problems = broken(check([life]))
    assert set(problems) == {"SIGTERM releases leases"}
    assert "running" in problems["SIGTERM releases leases"][0]
    # Released on shutdown instead: nothing to report.
    store.release([lease], now=T0 + 9 * S)
    assert broken(check([life])) == {}


def test_a_replica_that_dies_by_itself_is_reported(history, tmp_path: Path):
    log = tmp_path / "r1.2.log"
    log.write_text("")
    life = Incarnation("r1.2", 0.0, T0, log, ended=T0 + 9 * S, exit_code=1)
    assert set(broken(check([life]))) == {"replicas exit only when told, cleanly"}
