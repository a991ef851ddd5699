"""The fault campaign's checks (bench/chaos/invariants.py) catch what they say they catch.

Each test builds a small history with the real store on real PostgreSQL, checks that a clean
history passes, then breaks one thing and checks that exactly that invariant reports it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from bench.chaos import hostile
from bench.chaos.app.models import Effect, OutsideCall, OutsideEffect, SessionView, Sign
from bench.chaos.faults import Fault
from bench.chaos.invariants import Findings, check_all
from bench.chaos.misbehaviour import allowed_until
from bench.chaos.replicas import Incarnation
from django_jobs import store
from django_jobs.models import Attempt, Occurrence, Schedule
from django_jobs.store import Lease, PlannedOccurrence

from .factories import T0, ScheduleFactory
from .storeutil import LEASE, claim, plan

pytestmark = pytest.mark.django_db
S = timedelta(seconds=1)
CUTOFF = T0 + 6 * S  # instants T0+1s .. T0+5s came due
LEASE_SECONDS, GRACE_SECONDS = 3.0, 2.0  # an old holder's budget after a takeover: 5 s
HOURLY = timedelta(hours=1)  # a timing with no instant before CUTOFF: rows planned ad hoc


class ConnectionRows:
    def rows(self, sql: str, params: Any = None) -> list[tuple[Any, ...]]:
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            return list(cursor.fetchall())


@pytest.fixture
def history() -> Schedule:
    """Five due instants of a per-second schedule, each run once with its effect committed."""
    with connection.schema_editor() as editor:
        for model in (Effect, OutsideCall, OutsideEffect, Sign, SessionView):
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


def check(lives: list[Incarnation] | None = None, faults: list[Fault] | None = None) -> Findings:
    return check_all(
        ConnectionRows(),
        cutoff=CUTOFF,
        faults=faults or [],
        lives=lives or [],
        lease_seconds=LEASE_SECONDS,
        grace_seconds=GRACE_SECONDS,
    )


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


def life(tmp_path: Path, name: str, *, exit_code: int, log: str = "") -> Incarnation:
    path = tmp_path / f"{name}.log"
    path.write_text(log)
    return Incarnation(name, 0.0, T0, path, ended=T0 + 9 * S, exit_code=exit_code)


def one_occurrence(job: str, *, max_attempts: int = 5) -> Schedule:
    """A schedule of ``job`` with one occurrence, planned ad hoc at T0+2.5s (due before
    CUTOFF; not an instant of its hourly timing, so the lost-occurrence check ignores it)."""
    schedule = ScheduleFactory.create(
        job=job, interval=HOURLY, anchor=T0, created_at=T0, max_attempts=max_attempts
    )
    plan(schedule, T0 + 2 * S + S / 2, now=T0)
    return schedule


def sign(lease: Lease, job: str, at: datetime) -> None:
    Sign.objects.create(
        job=job,
        occurrence_key=str(lease.occurrence_id),
        token=lease.token,
        replica=lease.owner,
        at=at,
    )


def crash_loop(starts: int) -> list[Lease]:
    """A crasher occurrence started ``starts`` times, each start on a new replica after the
    previous one's lease expired (the crasher killed it)."""
    one_occurrence("chaos.crasher", max_attempts=3)
    leases = []
    for n in range(starts):
        (lease,) = claim(f"r{n + 1}.1", now=T0 + 10 * S + n * (LEASE + S))
        sign(lease, "chaos.crasher", lease.expires_at - LEASE)
        leases.append(lease)
    return leases


def worker_lost(lease: Lease) -> None:
    """The claim after the last allowed attempt was lost dead-letters it, without a run."""
    assert claim("r9.1", now=lease.expires_at + S) == []
    occurrence = Occurrence.objects.get(pk=lease.occurrence_id)
    assert (occurrence.state, occurrence.last_error_type) == ("dead", "WorkerLost")


def test_a_crash_loop_that_ends_dead_within_its_attempts_passes(history):
    worker_lost(crash_loop(3)[-1])
    found = check()
    assert broken(found) == {}
    assert (found.figures["crash_loops"], found.figures["crash_loops_dead"]) == (1, 1)
    assert found.figures["crasher_most_starts"] == 3


def test_a_crasher_started_more_than_max_attempts_is_reported(history):
    last = crash_loop(3)[-1]
    worker_lost(last)
    ran_again = Lease(**{**last.__dict__, "token": last.token + 1, "owner": "r4.1"})
    sign(ran_again, "chaos.crasher", last.expires_at + 2 * S)
    problems = broken(check())
    assert set(problems) == {"crash loops end dead within max_attempts"}
    assert (
        "started 4 times, max_attempts is 3"
        in problems["crash loops end dead within max_attempts"][0]
    )


def test_a_crash_loop_that_does_not_end_dead_is_reported(history):
    crash_loop(3)
    problems = broken(check())
    assert set(problems) == {"crash loops end dead within max_attempts"}
    assert "processing after 3 start(s)" in problems["crash loops end dead within max_attempts"][0]


def test_a_crasher_that_kills_its_replica_is_an_explained_exit(history, tmp_path: Path):
    worker_lost(crash_loop(3)[-1])  # killed r1.1, r2.1 and r3.1
    assert broken(check([life(tmp_path, "r1.1", exit_code=1)])) == {}
    # A replica the crasher never ran on has no excuse for exit code 1.
    problems = broken(check([life(tmp_path, "r1.2", exit_code=1)]))
    assert problems == {
        "replicas exit only when told, cleanly": ["r1.2: ended by itself with exit code 1"]
    }


def test_a_replica_that_cut_off_a_run_may_exit_3(history, tmp_path: Path):
    cut_off = '{"event": "run.cut_off", "occurrence": "x", "reason": "lease_lost"}\n'
    found = check([life(tmp_path, "r1.2", exit_code=3, log=cut_off)])
    assert broken(found) == {}
    assert (found.figures["runs_cut_off"], found.figures["lives_ended_after_cut_off"]) == (1, 1)
    assert set(broken(check([life(tmp_path, "r1.3", exit_code=3)]))) == {
        "replicas exit only when told, cleanly"
    }


def stubborn_taken_over() -> tuple[Lease, Lease]:
    """A stubborn run on r1.1 whose lease expired and was taken over by r2.1."""
    one_occurrence("chaos.stubborn")
    (old,) = claim("r1.1", now=T0 + 10 * S)
    (new,) = claim("r2.1", now=old.expires_at + S)
    return old, new


def takeover_of(lease: Lease) -> datetime:
    """When the claim that took the occurrence over started: its lease's start."""
    return lease.expires_at - LEASE


def test_an_old_holder_that_stops_within_lease_and_grace_passes(history):
    old, new = stubborn_taken_over()
    sign(old, "chaos.stubborn", takeover_of(new) + 4 * S)
    found = check()
    assert broken(found) == {}
    assert found.figures["stubborn_runs_taken_over"] == 1
    assert found.figures["old_holders_working_after_takeover"] == 1
    assert found.figures["old_holder_least_margin_s"] == 1.0


def test_an_old_holder_working_past_lease_and_grace_is_reported(history):
    old, new = stubborn_taken_over()
    sign(old, "chaos.stubborn", takeover_of(new) + 6 * S)
    problems = broken(check())
    assert set(problems) == {"old lease holders stop within lease + grace"}
    assert (
        "1.000 s after its deadline" in problems["old lease holders stop within lease + grace"][0]
    )


def test_time_an_old_holder_spent_frozen_does_not_count(history):
    old, new = stubborn_taken_over()
    taken = takeover_of(new)
    sign(old, "chaos.stubborn", taken + 12 * S)
    # SIGSTOPped from 1 s before the takeover to 8 s after it: 5 s more from the resume.
    frozen = Fault("sigstop", "r1.1", taken - S, 9.0)
    assert broken(check(faults=[frozen])) == {}
    sign(old, "chaos.stubborn", taken + 14 * S)
    assert set(broken(check(faults=[frozen]))) == {"old lease holders stop within lease + grace"}


def test_allowed_until_skips_only_the_frozen_spans_within_the_budget():
    budget = 5 * S
    assert allowed_until(T0, budget, []) == T0 + 5 * S
    assert allowed_until(T0, budget, [(T0 - 9 * S, T0 - S)]) == T0 + 5 * S  # before
    assert allowed_until(T0, budget, [(T0 - S, T0 + 3 * S)]) == T0 + 8 * S  # across
    assert allowed_until(T0, budget, [(T0 + 2 * S, T0 + 4 * S)]) == T0 + 7 * S  # within
    assert allowed_until(T0, budget, [(T0 + 6 * S, T0 + 9 * S)]) == T0 + 5 * S  # after


def reader_attempt(outcome: str, *, error_type: str = "", failures: int = 0) -> Occurrence:
    """A reader occurrence whose one attempt ended with ``outcome`` (and ``error_type``),
    with ``failures`` charged to it."""
    schedule = one_occurrence("chaos.reader", max_attempts=10)
    (lease,) = claim("r1.1", now=T0 + 10 * S)
    Attempt.objects.filter(occurrence_id=lease.occurrence_id).update(
        outcome=outcome, finished_at=T0 + 11 * S, error_type=error_type
    )
    schedule.occurrences.update(state="scheduled", lease_owner="", failures=failures)
    return schedule.occurrences.get()


def test_an_outage_that_is_not_charged_passes(history):
    reader_attempt("outage")
    found = check()
    assert broken(found) == {}
    assert found.figures["reader_attempts_ended_by_outage"] == 1


def test_an_attempt_failed_by_a_connection_error_is_reported(history):
    reader_attempt("failed", error_type="django.db.utils.OperationalError", failures=1)
    problems = broken(check())
    assert set(problems) == {"store outages are not failures"}
    assert (
        "failed with django.db.utils.OperationalError"
        in problems["store outages are not failures"][0]
    )


def test_an_outage_charged_as_a_failure_is_reported(history):
    reader_attempt("outage", failures=1)
    problems = broken(check())
    assert set(problems) == {"store outages are not failures"}
    assert "1 failure(s) charged, 0 attempt(s)" in problems["store outages are not failures"][0]


def test_a_dead_reader_is_reported(history):
    occurrence = reader_attempt("lease_lost", failures=1)
    Occurrence.objects.filter(pk=occurrence.pk).update(state="dead", last_error_type="WorkerLost")
    problems = broken(check())
    assert problems == {
        "store outages are not failures": [
            f"occurrence {occurrence.pk} of chaos.reader: dead after 1 failure(s), last error"
            " WorkerLost (lease_lost)"
        ]
    }


def session_view(job: str = "chaos.snooper", **found: Any) -> None:
    SessionView.objects.create(
        job=job, occurrence_key="k", token=1, replica="r1.1", backend_pid=42, **found
    )


def test_runs_that_find_a_clean_session_pass(history):
    session_view("chaos.leaker")
    session_view()  # on the connection the leaker used: what DISCARD ALL leaves
    found = check()
    assert broken(found) == {}
    assert (found.figures["session_views"], found.figures["session_views_after_a_leak"]) == (2, 1)


def test_a_run_that_finds_an_earlier_runs_session_state_is_reported(history):
    session_view(setting="occurrence-1", temp_table=True, advisory_locks=1)
    problems = broken(check())
    assert problems == {
        "runs start with a clean session": [
            "chaos.snooper run of occurrence k token 1 (r1.1, backend 42) found"
            " chaos.leak = 'occurrence-1', temporary table chaos_leak, 1 advisory lock(s)"
        ]
    }


def test_a_coroutine_completed_without_its_effect_is_reported(history):
    one_occurrence("chaos.coroutine")
    (lease,) = claim("r1.1", now=T0 + 10 * S)
    store.complete([lease], now=T0 + 11 * S)  # the coroutine was never awaited
    problems = broken(check())
    assert set(problems) == {"effects match completions"}
    assert "completed without its effect" in problems["effects match completions"][0]
    Effect.objects.create(
        schedule="coroutine", occurrence_key=str(lease.occurrence_id), token=lease.token
    )
    found = check()
    assert broken(found) == {}
    assert found.figures["coroutines_completed_with_effect"] == 1


# --- Hostile rows: written behind the service layer's back (bench/chaos/hostile.py) --------

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
EVERY_MINUTE: dict[str, Any] = {
    "job": "chaos.effect",
    "timing_kind": "cron",
    "cron": "* * * * *",
    "interval": None,
    "anchor": None,
}


@dataclass
class Hostile:
    """What the fleet made of the campaign's hostile rows, as it should: the flood row parked
    for its catch-up cap, a corrupted zone parked for it, the 1970 cron caught up in a pass
    of a month, the forged occurrence refused by the real store's claim."""

    flood: Schedule
    zoned: Schedule
    ancient: Schedule
    forged: Occurrence
    faults: list[Fault]
    log: list[dict[str, str]]

    def replica(self, tmp_path: Path, *, peak_mib: int = 200) -> Incarnation:
        lines = "".join(json.dumps(event) + "\n" for event in self.log)
        found = life(tmp_path, "r1.1", exit_code=0, log=lines)
        found.ended_by, found.peak_rss_kib = "sigterm", peak_mib * 1024
        return found

    def check(self, tmp_path: Path, **life_fields: Any) -> Findings:
        return check([self.replica(tmp_path, **life_fields)], self.faults)


def written(shape: str, **detail: Any) -> Fault:
    fields = {"shape": shape, "expect": hostile.EXPECT[shape], "written_at": T0.isoformat()}
    return Fault("hostile_row", "", T0, 1.0, {**fields, **detail})


@pytest.fixture
def refused(history: Schedule) -> Hostile:
    parked = {"parked_at": T0 + S, "parked_reason": "RefusedRow: ...", "next_due_at": None}
    flood = ScheduleFactory.create(
        key="hostile.flood-1",
        job="chaos.effect",
        interval=S,
        anchor=EPOCH,
        created_at=EPOCH,
        misfire="replay_all",
        max_catchup=2**31 - 1,
        parked_field="max_catchup",
        **parked,
    )
    zoned = ScheduleFactory.create(
        key="hostile.bad_zone-2",
        time_zone="Mars/Olympus_Mons",  # a timing that does not evaluate: the checks skip it
        parked_field="timing.zone",
        **EVERY_MINUTE,
        **parked,
    )
    ancient = ScheduleFactory.create(
        key="hostile.ancient_cron-3", created_at=EPOCH, last_scheduled_at=CUTOFF, **EVERY_MINUTE
    )
    month = EPOCH + timedelta(days=31)
    store.record_skip_summary(
        ancient, now=T0 + S, count=31 * 1440, first=EPOCH, last=month - timedelta(minutes=1)
    )
    forgery = PlannedOccurrence(history.pk, "intruder", history.key, T0 + 2 * S + S / 2)
    store.plan([forgery], now=T0)
    claimed = store.claim_runs(owner="r1.1", now=T0 + 3 * S, lease_for=LEASE, limit=10)
    assert claimed.forged == [forgery.id]
    return Hostile(
        flood=flood,
        zoned=zoned,
        ancient=ancient,
        forged=Occurrence.objects.get(pk=forgery.id),
        faults=[
            written("flood", schedule=flood.key),
            written("bad_zone", schedule=zoned.key, corrupted_at=T0.isoformat()),
            written("ancient_cron", schedule=ancient.key),
            written("forged_tenant", occurrence=str(forgery.id), schedule=history.key),
        ],
        log=[
            {"event": "schedule.invalid", "schedule": flood.key, "field": "max_catchup"},
            {"event": "schedule.invalid", "schedule": zoned.key, "field": "timing.zone"},
            {"event": "occurrence.refused", "occurrence": str(forgery.id)},
        ],
    )


def test_hostile_rows_the_fleet_refused_or_caught_up_pass(refused, tmp_path: Path):
    found = refused.check(tmp_path)
    assert broken(found) == {}
    assert found.figures["hostile_rows_by_shape"] == {
        "ancient_cron": 1,
        "bad_zone": 1,
        "flood": 1,
        "forged_tenant": 1,
    }
    assert (found.figures["hostile_rows_parked"], found.figures["forged_refused"]) == (2, 1)
    assert (found.figures["ancient_passes"], found.figures["ancient_longest_pass_days"]) == (1, 31)
    assert found.figures["replica_peak_rss_max_mib_hostile"] == 200
    assert refused.forged.last_error_type == "TenantMismatch"


def test_a_hostile_row_left_unparked_is_reported(refused, tmp_path: Path):
    Schedule.objects.filter(pk=refused.flood.pk).update(parked_field="", next_due_at=T0)
    problems = broken(refused.check(tmp_path))
    assert set(problems) == {"hostile schedule rows parked, naming the field"}
    assert (
        "parked_field '', expected 'max_catchup'"
        in problems["hostile schedule rows parked, naming the field"][0]
    )


def test_a_hostile_row_parked_for_another_field_is_reported(refused, tmp_path: Path):
    Schedule.objects.filter(pk=refused.zoned.pk).update(parked_field="timing.cron")
    problems = broken(refused.check(tmp_path))
    assert problems == {
        "hostile schedule rows parked, naming the field": [
            "hostile.bad_zone-2 (bad_zone): parked_field 'timing.cron', expected 'timing.zone'"
        ]
    }


def test_a_park_no_replica_logged_is_reported(refused, tmp_path: Path):
    refused.log = refused.log[1:]
    problems = broken(refused.check(tmp_path))
    assert problems == {
        "hostile schedule rows parked, naming the field": [
            "hostile.flood-1: parked for max_catchup, but no replica logged schedule.invalid"
        ]
    }


def test_occurrences_planned_after_the_corruption_are_reported(refused, tmp_path: Path):
    # Before the corruption, within what a pass before it planned ahead, and beyond that.
    beyond = T0 + hostile.AHEAD + 3 * S
    plan(refused.zoned, T0 - S, T0 + hostile.AHEAD - S, beyond, now=T0)
    problems = broken(refused.check(tmp_path))
    assert problems == {
        "hostile schedule rows parked, naming the field": [
            "hostile.bad_zone-2: 1 occurrence(s) planned after it was written"
        ]
    }


def test_an_ancient_row_skipping_more_than_a_month_in_one_pass_is_reported(refused, tmp_path: Path):
    first = EPOCH + timedelta(days=31)
    store.record_skip_summary(
        refused.ancient, now=T0 + 2 * S, count=1, first=first, last=first + timedelta(days=40)
    )
    problems = broken(refused.check(tmp_path))
    assert set(problems) == {"ancient schedules planned in bounded passes"}
    assert "one pass skipped 40 days" in problems["ancient schedules planned in bounded passes"][0]


def test_an_ancient_row_not_caught_up_or_parked_is_reported(refused, tmp_path: Path):
    Schedule.objects.filter(pk=refused.ancient.pk).update(
        last_scheduled_at=EPOCH + timedelta(days=31), parked_field="timing.cron"
    )
    problems = broken(refused.check(tmp_path))
    assert problems == {
        "ancient schedules planned in bounded passes": [
            "hostile.ancient_cron-3: a valid row parked for timing.cron",
            "hostile.ancient_cron-3: planned only up to 1970-02-01 00:00:00+00:00, not caught up",
        ]
    }


def test_a_forged_occurrence_that_ran_is_reported(refused, tmp_path: Path):
    forged = refused.forged
    Occurrence.objects.filter(pk=forged.pk).update(
        state="completed", attempts=1, fencing_token=1, last_error_type=""
    )
    Attempt.objects.create(
        occurrence=forged,
        number=1,
        fencing_token=1,
        replica="r1.1",
        trigger="schedule",
        started_at=T0 + 3 * S,
        finished_at=T0 + 4 * S,
        outcome="succeeded",
    )
    Effect.objects.create(schedule="effect", occurrence_key=str(forged.pk), token=1)
    problems = broken(refused.check(tmp_path))
    assert problems == {
        "forged occurrences never run": [
            f"forged occurrence {forged.pk} of {forged.schedule.key}: completed (no error)",
            f"forged occurrence {forged.pk} of {forged.schedule.key}: ran (1 attempt row(s),"
            " 1 attempt(s) counted, 1 effect(s))",
        ]
    }


def test_a_refusal_no_replica_logged_is_reported(refused, tmp_path: Path):
    refused.log = refused.log[:2]
    problems = broken(refused.check(tmp_path))
    assert problems == {
        "forged occurrences never run": [
            f"forged occurrence {refused.forged.pk}: no replica logged occurrence.refused"
        ]
    }


def test_a_replica_past_its_memory_bound_is_reported(refused, tmp_path: Path):
    problems = broken(refused.check(tmp_path, peak_mib=2048))
    assert problems == {
        "replica memory bounded": ["r1.1: peak resident memory 2048.0 MiB, more than 512 MiB"]
    }
