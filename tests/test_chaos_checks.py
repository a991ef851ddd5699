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

from bench.chaos import beats as heartbeats
from bench.chaos import bounds, hostile, oneoffs, poisons, statements
from bench.chaos.app.models import Effect, OutsideCall, OutsideEffect, SessionView, Sign
from bench.chaos.beats import Beat, RunBeats
from bench.chaos.faults import Fault
from bench.chaos.history import AttemptRow, attempts_by_occurrence
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
    # Attempt 2 holds the lease: it is read from the occurrence row.
    Occurrence.objects.filter(pk=second.occurrence_id).update(fencing_token=0)
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
    # The history row an ending write inserts.
    Attempt.objects.create(
        occurrence_id=lease.occurrence_id,
        number=1,
        fencing_token=lease.token,
        replica="r1.1",
        trigger=lease.trigger,
        started_at=T0 + 10 * S,
        finished_at=T0 + 11 * S,
        outcome=outcome,
        error_type=error_type,
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


def test_an_error_injected_into_a_statement_is_not_taken_for_an_outage(history):
    occurrence = reader_attempt("failed", error_type="django.db.utils.OperationalError", failures=1)
    Attempt.objects.filter(occurrence=occurrence).update(
        error_message="chaos: injected 40001 into a completion statement (BEFORE UPDATE ...)"
    )
    assert broken(check()) == {}


def test_a_session_cut_while_the_store_answered_is_the_jobs_failure_by_design(history):
    """The injector terminated the replica's sessions during the attempt and the store was up:
    the worker asked the store, which answered, so the failure is charged (as a query of
    death's is), and counted apart. The same cut during a PostgreSQL restart is an outage."""
    reader_attempt("failed", error_type="django.db.utils.OperationalError", failures=1)
    cut = Fault("terminate_backends", "r1.1", T0 + 10 * S + S / 2)
    found = check(faults=[cut])
    assert broken(found) == {}
    assert found.figures["sessions_cut_while_store_answered"] == 1

    restart = Fault("pg_restart", "", T0 + 9 * S, seconds=5.0)
    problems = broken(check(faults=[cut, restart]))
    assert set(problems) == {"store outages are not failures"}


@pytest.mark.parametrize(
    ("restart_at", "seconds", "charged_by_design"),
    [
        # Ended 0.2 s before the attempt started (campaign seed 20261130, 2026-12-03).
        (T0 + 4 * S, 5.8, True),
        # Begun 0.5 s after the attempt's end was written (the campaign of 2026-12-02).
        (T0 + 11 * S + S / 2, 5.0, True),
        # Begun between the cut and the end: the worker may have met it; not excused.
        (T0 + 10 * S + S * 7 / 10, 5.0, False),
    ],
)
def test_only_an_outage_between_the_cut_and_the_end_makes_the_cut_an_outage(
    history, restart_at: datetime, seconds: float, charged_by_design: bool
):
    """The attempt ran from 10 s to 11 s and its session was cut at 10.5 s: only an outage
    between the cut and the attempt's end could be what the worker met when it asked the
    store, so only such an outage makes the charged failure a violation."""
    reader_attempt("failed", error_type="django.db.utils.OperationalError", failures=1)
    cut = Fault("terminate_backends", "r1.1", T0 + 10 * S + S / 2)
    restart = Fault("pg_restart", "", restart_at, seconds=seconds)
    found = check(faults=[cut, restart])
    assert (broken(found) == {}) is charged_by_design
    assert found.figures["sessions_cut_while_store_answered"] == int(charged_by_design)


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


# --- Issue #32: the handlers' own heartbeats, attempt bounds, statement errors, late one-offs
# and poisons. Most of these checks read synthetic evidence (beats, attempt rows, fault
# details); those that read occurrences get them from the real store.


def beat(replica: str, at: datetime, *, token: int = 1, job: str = "chaos.stubborn") -> Beat:
    return Beat(replica, at, "occurrence-1", token, job)


def beats_of(*beats: Beat) -> dict[str, list[RunBeats]]:
    return heartbeats.runs(list(beats))


TOGETHER = "no two replicas execute one occurrence at once beyond lease + grace"
OUTLIVES = "no run outlives its timeout + grace, even during an outage"
BUDGET = 5 * S  # lease + grace of the campaign's replicas


def test_a_run_taken_over_that_stops_within_lease_and_grace_passes():
    found = Findings()
    runs = beats_of(beat("r1.1", T0), beat("r1.1", T0 + 9 * S), beat("r2.1", T0 + 5 * S, token=2))
    heartbeats.one_run_at_a_time(found, runs, [], budget=BUDGET)
    assert found.violations == {TOGETHER: []}
    assert (
        found.figures["runs_beating_at_once"],
        found.figures["runs_beating_at_once_longest_s"],
    ) == (
        1,
        4.0,
    )


def test_two_runs_of_one_occurrence_beating_at_once_past_lease_and_grace_are_reported():
    found = Findings()
    runs = beats_of(beat("r1.1", T0), beat("r1.1", T0 + 11 * S), beat("r2.1", T0 + 5 * S, token=2))
    heartbeats.one_run_at_a_time(found, runs, [], budget=BUDGET)
    (problem,) = found.violations[TOGETHER]
    assert "token 1 on r1.1" in problem
    assert "6.000 s after token 2 began on r2.1" in problem
    assert "(1.000 s past lease + grace)" in problem


def test_beats_at_once_do_not_count_the_time_the_earlier_replica_was_frozen():
    found = Findings()
    runs = beats_of(beat("r1.1", T0), beat("r1.1", T0 + 12 * S), beat("r2.1", T0 + 5 * S, token=2))
    frozen = Fault("sigstop", "r1.1", T0 + 4 * S, 3.0)  # 2 s of it after the takeover
    heartbeats.one_run_at_a_time(found, runs, [frozen], budget=BUDGET)
    assert found.violations == {TOGETHER: []}


def hang_runs(last: datetime) -> dict[str, list[RunBeats]]:
    return beats_of(beat("r1.1", T0, job="chaos.hang"), beat("r1.1", last, job="chaos.hang"))


def test_a_run_cut_off_within_its_timeout_and_grace_passes():
    found = Findings()
    limits = {"occurrence-1": 2 * S}  # timeout 2 s, grace 2 s, exit slack 1 s
    heartbeats.no_run_outlives_its_timeout(found, hang_runs(T0 + 4.5 * S), [], limits, grace=2 * S)
    assert found.violations == {OUTLIVES: []}
    assert (found.figures["hang_runs"], found.figures["hang_least_margin_s"]) == (1, 0.5)


def test_a_run_outliving_its_timeout_and_grace_in_an_outage_is_reported():
    found = Findings()
    outage = Fault("pg_restart", "", T0 + S, 8.0)
    limits = {"occurrence-1": 2 * S}
    heartbeats.no_run_outlives_its_timeout(
        found, hang_runs(T0 + 7 * S), [outage], limits, grace=2 * S
    )
    (problem,) = found.violations[OUTLIVES]
    assert (
        "beat for 7.000 s, timeout 2 s + grace 2 s; 2.000 s past (during a store outage)" in problem
    )
    assert found.figures["hang_runs_in_an_outage"] == 1


def test_beats_are_read_from_each_life_s_file_on_one_clock(tmp_path: Path):
    (tmp_path / "r1.1.beats").write_text(
        "r1.1 100.000000 occurrence-1 7 chaos.stubborn\nr1.1 101.5000"  # cut by a SIGKILL
    )
    (tmp_path / "r2.1.beats").write_text("r2.1 103.250000 occurrence-1 8 chaos.stubborn\n")
    offset = T0.timestamp() - 100.0  # monotonic 100.0 is T0 on the runner's clock
    found = heartbeats.read(tmp_path, offset)
    assert found == [
        Beat("r1.1", T0, "occurrence-1", 7, "chaos.stubborn"),
        Beat("r2.1", T0 + 3.25 * S, "occurrence-1", 8, "chaos.stubborn"),
    ]


def attempt(number: int, outcome: str, *, replica: str = "r1.1", at: datetime = T0) -> AttemptRow:
    return AttemptRow(number, number, replica, at, at + S, outcome, "", "")


BOUNDED = "attempts bounded for every job"
ONE = {"occurrence-1": bounds.Occurrence("chaos.reader", "chaos.reader", 2)}


def test_attempts_within_max_attempts_pass():
    found = Findings()
    rows = [attempt(1, "failed"), attempt(2, "unstarted"), attempt(3, "released")]
    rows.append(attempt(4, "lease_lost"))
    bounds.attempts_bounded(found, {"occurrence-1": rows}, ONE, [])
    assert found.violations == {BOUNDED: []}


def test_outage_attempts_no_injected_outage_explains_count_against_max_attempts():
    found = Findings()
    rows = [attempt(n, "outage", at=T0 + n * 60 * S) for n in (1, 2, 3)]
    bounds.attempts_bounded(found, {"occurrence-1": rows}, ONE, [])
    (problem,) = found.violations[BOUNDED]
    assert "3 attempts counted, max_attempts 2 (0 more excused as outages" in problem
    # A PostgreSQL restart met by the second: excused, the allowance.
    found = Findings()
    restart = Fault("pg_restart", "", T0 + 115 * S, 10.0)
    bounds.attempts_bounded(found, {"occurrence-1": rows}, ONE, [restart])
    assert found.violations == {BOUNDED: []}
    assert found.figures["attempts_excused_as_outages"] == 1


def test_a_severed_connection_excuses_only_its_own_replica_s_outage_attempts():
    cut = Fault("terminate_backends", "r2.1", T0 + 30 * S, 0.0)
    rows = [attempt(n, "outage", replica="r1.1", at=T0 + 30 * S) for n in (1, 2, 3)]
    found = Findings()
    bounds.attempts_bounded(found, {"occurrence-1": rows}, ONE, [cut])
    assert len(found.violations[BOUNDED]) == 1
    rows = [attempt(n, "outage", replica="r2.1", at=T0 + 30 * S) for n in (1, 2, 3)]
    found = Findings()
    bounds.attempts_bounded(found, {"occurrence-1": rows}, ONE, [cut])
    assert found.violations == {BOUNDED: []}


SERVING = "replicas keep serving through non-outage store errors"


def statement_fault(at: datetime) -> Fault:
    detail = {"statement": "claim", "sqlstate": "P0001", "budget": 2, "raised": 2}
    return Fault("statement_error", "", at, 1.0, {**detail, "let_through": 0})


def serving(tmp_path: Path, *starts: datetime, faults: list[Fault] | None = None) -> Findings:
    up = life(tmp_path, "r1.1", exit_code=0)
    up.ended, up.ended_by = T0 + 600 * S, "sigterm"
    found = Findings()
    rows = {f"occurrence-{n}": [attempt(1, "succeeded", at=at)] for n, at in enumerate(starts)}
    statements.replicas_keep_serving(
        found, rows, [statement_fault(T0 + 60 * S), *(faults or [])], [up]
    )
    return found


def test_a_replica_that_claims_again_after_a_statement_error_passes(tmp_path: Path):
    found = serving(tmp_path, T0 + 70 * S)
    assert found.violations == {SERVING: []}
    assert found.figures["lives_asked_to_serve_after_statement_faults"] == 1


def test_a_replica_that_claims_nothing_after_a_statement_error_is_reported(tmp_path: Path):
    found = serving(tmp_path, T0 + 30 * S, T0 + 90 * S)
    assert found.violations == {
        SERVING: [
            "r1.1: no run started in the 20 s after a claim fault (P0001, 2 statement(s)"
            " failed) ended at 12:01:01"
        ]
    }
    frozen = Fault("sigstop", "r1.1", T0 + 62 * S, 5.0)  # it could not have claimed
    assert serving(tmp_path, T0 + 30 * S, faults=[frozen]).violations == {SERVING: []}


LATE = "one-offs declared after their instant: run once or skipped"


def late_one_off(expect: str, *, next_due_at: datetime | None = T0) -> tuple[Schedule, Fault]:
    """A one-off of ``chaos.effect`` declared after its instant (T0 + 2.5 s)."""
    schedule = ScheduleFactory.create(
        key=f"oneoff.{expect}-1", job="chaos.effect", interval=HOURLY, next_due_at=next_due_at
    )
    spec = {"key": schedule.key, "schedule_id": schedule.pk, "expect": expect}
    spec["run_at"] = (T0 + 2 * S + S / 2).isoformat()
    return schedule, Fault("late_one_off", "", T0, 1.0, {"one_offs": [spec]})


def run_once(schedule: Schedule) -> None:
    plan(schedule, T0 + 2 * S + S / 2, now=T0)
    (lease,) = claim("r1.1", now=T0 + 3 * S)
    Effect.objects.create(
        schedule="effect", occurrence_key=str(lease.occurrence_id), token=lease.token
    )
    store.complete([lease], now=T0 + 4 * S)


def test_late_one_offs_run_once_within_max_delay_and_skipped_beyond_it_pass(history):
    within, ran = late_one_off("once")
    run_once(within)
    beyond, skipped = late_one_off("skipped")
    plan(beyond, T0 + 2 * S + S / 2, now=T0)
    beyond.occurrences.update(state="skipped", skip_reason="misfire", finished_at=T0)
    found = Findings()
    oneoffs.late_one_offs(found, ConnectionRows(), [ran, skipped])
    assert found.violations == {LATE: []}
    assert (found.figures["late_one_offs_ran_once"], found.figures["late_one_offs_skipped"]) == (
        1,
        1,
    )


def test_a_late_one_off_left_stranded_is_reported(history):
    _, fault = late_one_off("skipped", next_due_at=None)
    found = Findings()
    oneoffs.late_one_offs(found, ConnectionRows(), [fault])
    (problem,) = found.violations[LATE]
    assert "stranded: active, no next_due_at, no occurrence" in problem


def test_a_late_one_off_run_past_its_max_delay_is_reported(history):
    beyond, fault = late_one_off("skipped")
    run_once(beyond)
    found = Findings()
    oneoffs.late_one_offs(found, ConnectionRows(), [fault])
    (problem,) = found.violations[LATE]
    assert "completed after 1 attempt(s), 1 effect(s); it must end skipped" in problem


def poison(variant: str) -> tuple[Occurrence, Fault]:
    """A poison one-off of ``variant`` planned at T0 + 2.5 s, with its attempts to come."""
    job = poisons.POISONS[variant]
    schedule = ScheduleFactory.create(
        key=f"poison.{variant}-1", job=job, interval=HOURLY, max_attempts=2
    )
    plan(schedule, T0 + 2 * S + S / 2, now=T0)
    spec = {"key": schedule.key, "job": job, "schedule_id": schedule.pk, "variant": variant}
    spec["max_attempts"] = 2
    return schedule.occurrences.get(), Fault("poison", "", T0, 1.0, {"one_offs": [spec]})


def attempts_of(occurrence: Occurrence, *outcomes: str, error_type: str = "") -> None:
    """Attempts of a second each, 2 s apart, from T0 + 12 s, on r1.1."""
    for n, outcome in enumerate(outcomes, start=1):
        Attempt.objects.create(
            occurrence=occurrence,
            number=n,
            fencing_token=n,
            replica="r1.1",
            trigger="schedule",
            started_at=T0 + 10 * S + n * 2 * S,
            finished_at=T0 + 10 * S + n * 2 * S + S,
            outcome=outcome,
            error_type=error_type,
        )


def poison_findings(fault: Fault, lives: list[Incarnation] | None = None) -> Findings:
    found = Findings()
    attempts = attempts_by_occurrence(ConnectionRows())
    poisons.poisons_end_dead(found, ConnectionRows(), attempts, [fault])
    poisons.exits_are_failures(found, ConnectionRows(), attempts, [fault], lives or [])
    return found


DEAD = "poisons end dead within their attempts"
EXITS = "SystemExit and KeyboardInterrupt are the attempt's failure"


def test_a_query_of_death_that_ends_dead_within_its_attempts_passes(history):
    occurrence, fault = poison("query_of_death")
    attempts_of(occurrence, "failed", "failed", error_type="django.db.utils.OperationalError")
    Occurrence.objects.filter(pk=occurrence.pk).update(state="dead", failures=2)
    assert broken(poison_findings(fault)) == {}


def test_a_query_of_death_retried_as_an_outage_is_reported(history):
    occurrence, fault = poison("query_of_death")
    attempts_of(occurrence, "outage", "outage", "outage", "outage")  # no outage was injected
    problems = broken(poison_findings(fault))[DEAD]
    assert "scheduled after 4 attempt(s), 0 failure(s) counted" in problems[0]
    assert "4 attempts counted, max_attempts 2 (0 more excused as outages)" in problems[1]
    assert problems[2].endswith("nothing else completed in the 7.0 s it ran")


def test_system_exit_recorded_as_the_attempt_s_failure_passes(history, tmp_path: Path):
    occurrence, fault = poison("system_exit")
    attempts_of(occurrence, "failed", "failed", error_type="SystemExit")
    Occurrence.objects.filter(pk=occurrence.pk).update(
        state="dead", failures=2, last_error_type="SystemExit"
    )
    up = life(tmp_path, "r1.1", exit_code=0)
    up.ended, up.ended_by = T0 + 20 * S, "sigterm"  # stopped by the injector, not by itself
    found = poison_findings(fault, [up])
    assert broken(found) == {}
    assert found.figures["exit_poison_runs"] == 2


def test_system_exit_recorded_as_a_lost_worker_is_reported(history):
    occurrence, fault = poison("system_exit")
    attempts_of(occurrence, "lease_lost", "lease_lost")
    Occurrence.objects.filter(pk=occurrence.pk).update(
        state="dead", failures=2, last_error_type="WorkerLost"
    )
    problems = broken(poison_findings(fault))
    assert set(problems) == {EXITS}
    assert problems[EXITS][0].endswith("dead with WorkerLost, not SystemExit")
    assert "attempt 1 (r1.1): lease_lost, not failed with SystemExit" in problems[EXITS][1]


def test_a_replica_that_ends_after_a_keyboard_interrupt_is_reported(history, tmp_path: Path):
    occurrence, fault = poison("keyboard_interrupt")
    attempts_of(occurrence, "failed", "failed", error_type="KeyboardInterrupt")
    Occurrence.objects.filter(pk=occurrence.pk).update(
        state="dead", failures=2, last_error_type="KeyboardInterrupt"
    )
    ended = life(tmp_path, "r1.1", exit_code=3)
    ended.ended, ended.pid = T0 + 15 * S, 4242  # it exited by itself after both
    problems = broken(poison_findings(fault, [ended]))
    assert problems == {
        EXITS: [
            f"{fault.detail['one_offs'][0]['key']}: r1.1 (pid 4242) ended by itself (exit code 3)"
            f" after attempt {n}"
            for n in (1, 2)
        ]
    }


def test_a_replica_that_exits_3_for_another_run_s_cut_off_after_a_system_exit_passes(
    history, tmp_path: Path
):
    occurrence, fault = poison("system_exit")
    attempts_of(occurrence, "failed", "failed", error_type="SystemExit")
    Occurrence.objects.filter(pk=occurrence.pk).update(
        state="dead", failures=2, last_error_type="SystemExit"
    )
    other = '{"event": "run.cut_off", "occurrence": "another", "reason": "timeout"}\n'
    ended = life(tmp_path, "r1.1", exit_code=3, log=other)
    ended.ended = T0 + 15 * S
    assert broken(poison_findings(fault, [ended])) == {}
    # Its own run cut off (the SystemExit left a run thread behind): not explained.
    own = other.replace("another", str(occurrence.pk))
    ended = life(tmp_path, "r1.1", exit_code=3, log=own)
    ended.ended = T0 + 15 * S
    assert set(broken(poison_findings(fault, [ended]))) == {EXITS}


def test_a_hang_fault_s_severed_connections_are_an_outage_for_its_replica_only():
    severed = {"replica": "r1.1", "cut_from": T0.isoformat(), "cut_to": (T0 + 6 * S).isoformat()}
    cut = Fault("hang", "r1.1", T0, 8.0, severed)
    limits = {"occurrence-1": 2 * S}
    found = Findings()
    heartbeats.no_run_outlives_its_timeout(found, hang_runs(T0 + 7 * S), [cut], limits, grace=2 * S)
    assert found.violations[OUTLIVES][0].endswith("past (during a store outage)")
    rows = [attempt(n, "outage", replica="r1.1", at=T0 + n * S) for n in (1, 2, 3)]
    found = Findings()
    bounds.attempts_bounded(found, {"occurrence-1": rows}, ONE, [cut])
    assert found.violations == {BOUNDED: []}
    rows = [row._replace(replica="r2.1") for row in rows]
    bounds.attempts_bounded(found, {"occurrence-1": rows}, ONE, [cut])
    assert len(found.violations[BOUNDED]) == 1


def test_a_life_started_before_a_hang_fault_s_outage_may_log_it(history, tmp_path: Path):
    spell = "".join(
        json.dumps({"event": event}) + "\n"
        for event in ("store.unavailable", "store.unavailable", "store.unavailable")
    )
    up = life(tmp_path, "r1.2", exit_code=0, log=spell)
    up.started, up.ended, up.ended_by = T0 + 2 * S, T0 + 20 * S, "sigterm"
    outage = {"outage_from": (T0 + 4 * S).isoformat(), "outage_to": (T0 + 9 * S).isoformat()}
    hang = Fault("hang", "r1.2", T0, 9.0, outage)  # declared before the life started
    assert broken(check([up], [hang])) == {}
    assert set(broken(check([up], []))) == {"outage logging bounded"}
