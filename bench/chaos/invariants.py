"""What must hold after the campaign, read from the database alone (and, for outage logging,
from the replicas' own logs). Each check returns its violations: an empty list is a pass.
The checks of the handlers that misbehave on purpose are in ``misbehaviour``, those of the
rows written behind the service layer's back in ``hostile``; those of the handlers' own
heartbeats in ``beats``, of attempts per occurrence in ``bounds``, of injected statement
errors in ``statements``, of one-offs declared late in ``oneoffs``, of poisons in
``poisons``."""

from __future__ import annotations

import itertools
import json
import math
from collections import Counter, defaultdict
from datetime import datetime, timedelta
from types import SimpleNamespace
from typing import Any

from django_jobs.scheduling.timings import from_record

from . import beats as heartbeats
from .bounds import attempts_bounded
from .bounds import occurrences as bounded_occurrences
from .failover import failovers_survived, wal_tail_losses
from .faults import Fault
from .history import AttemptRow, Findings, Rows, attempts_by_occurrence, percentile
from .hostile import HOSTILE, hostile_rows
from .misbehaviour import (
    CRASHER,
    crash_loops_end,
    old_holders_stop,
    outages_are_not_failures,
    sessions_start_clean,
)
from .oneoffs import ONE_OFF, late_one_offs
from .poisons import HANG_KEY, POISON, exits_are_failures, poisons_end_dead
from .replicas import Incarnation
from .statements import replicas_keep_serving

__all__ = ["EFFECT_JOBS", "Findings", "Rows", "check_all"]

# Jobs whose handlers commit one Effect row with their completion.
EFFECT_JOBS = {
    "chaos.effect",
    "chaos.outside",
    "chaos.long",
    "chaos.flaky",
    "chaos.stubborn",
    "chaos.reader",
    "chaos.leaker",
    "chaos.snooper",
    "chaos.coroutine",
}
# Schedules the injector declares, each checked by its own invariant (``oneoffs``,
# ``poisons``), not by the lost-occurrence and lateness checks of the campaign's schedules.
INJECTED = (HOSTILE, ONE_OFF, POISON, HANG_KEY)
# Faults a replica may log an outage spell for (``_outage_logging``).
OUTAGE_LOGGED = (
    "pg_restart",
    "terminate_backends",
    "failover",
    "hang",
    "statement_error",
    "poison",
)
SCHEDULE_COLUMNS = (
    "id, key, job, timing_kind, cron, interval, anchor, run_at, delay, time_zone,"
    " skipped_time, repeated_time, misfire, overlap, max_attempts, created_at"
)


def check_all(
    db: Rows,
    *,
    cutoff: datetime,
    faults: list[Fault],
    lives: list[Incarnation],
    lease_seconds: float,
    grace_seconds: float,
    max_rss_mib: float = 512.0,
    enqueued: list[str] | None = None,
    ha: bool = False,
    beats: list[heartbeats.Beat] | None = None,
) -> Findings:
    """Every invariant, with the replicas' ``LEASE_SECONDS`` and ``TIMEOUT_GRACE_SECONDS``,
    and the peak memory a replica life may reach; with ``ha`` (a campaign on a primary and
    a standby, ``--ha``) those of failovers too (``failover``); ``beats``: the handlers' own
    heartbeats (``beats.read``)."""
    found = Findings()
    # The campaign's own schedules, and their occurrences: not the hostile rows (checked by
    # ``hostile_rows``), not occurrences forged in another tenant's name.
    schedules = {
        row[0]: SimpleNamespace(**dict(zip(SCHEDULE_COLUMNS.split(", "), row, strict=True)))
        for row in db.rows(
            f"SELECT {SCHEDULE_COLUMNS} FROM django_jobs_schedule"
            " WHERE NOT EXISTS (SELECT 1 FROM unnest(%s::text[]) p WHERE starts_with(key, p))"
            " AND origin <> 'enqueue'",
            [list(INJECTED)],
        )
    }
    occurrences = {
        (sid, at): (oid, state, reason, attempts, failures, token)
        for oid, sid, at, state, reason, attempts, failures, token in db.rows(
            "SELECT o.id, o.schedule_id, o.scheduled_at, o.state, o.skip_reason, o.attempts,"
            " o.failures, o.fencing_token FROM django_jobs_occurrence o"
            " JOIN django_jobs_schedule s ON s.id = o.schedule_id"
            " WHERE o.scheduled_at < %s AND o.tenant = s.tenant",
            [cutoff],
        )
        if sid in schedules
    }
    attempts = attempts_by_occurrence(db)
    summaries = db.rows(
        "SELECT target_id, after FROM django_jobs_auditrecord WHERE action = 'misfire.skipped'"
    )

    _due_and_lost(found, schedules, occurrences, summaries, cutoff)
    _effects(found, db, attempts)
    _enqueued_work(found, db, enqueued or [])
    _tokens(found, attempts)
    _drains(found, attempts, lives)
    _takeovers(found, attempts, faults)
    _lateness(found, schedules, occurrences, attempts)
    _replica_logs(found, lives)
    _outage_logging(found, faults, lives)
    _replica_exits(found, db, lives)
    crash_loops_end(found, db, cutoff=cutoff)
    budget = timedelta(seconds=lease_seconds + grace_seconds)
    old_holders_stop(found, db, attempts, faults, budget=budget)
    outages_are_not_failures(found, db, attempts, faults)
    sessions_start_clean(found, db)
    written = [f.detail for f in faults if f.kind == "hostile_row"]
    hostile_rows(found, db, written, lives, cutoff=cutoff)
    _replica_memory(found, lives, written, bound_mib=max_rss_mib)
    attempts_bounded(found, attempts, bounded_occurrences(db), faults)
    replicas_keep_serving(found, attempts, faults, lives)
    late_one_offs(found, db, faults)
    poisons_end_dead(found, db, attempts, faults)
    exits_are_failures(found, db, attempts, faults, lives)
    heartbeats.check(
        found,
        db,
        beats or [],
        faults,
        lease=timedelta(seconds=lease_seconds),
        grace=timedelta(seconds=grace_seconds),
    )
    if ha:
        failovers_survived(found, db, faults, lives)
        gone = sum(
            "no occurrence row" in p for p in found.violations["every committed enqueue completed"]
        )
        states = {
            str(oid): state
            for oid, state in db.rows("SELECT id, state FROM django_jobs_occurrence")
        }
        wal_tail_losses(found, faults, lives, attempts, states, gone)
    return found


def _due_and_lost(
    found: Findings,
    schedules: dict[Any, SimpleNamespace],
    occurrences: dict[tuple[Any, datetime], tuple[Any, ...]],
    summaries: list[tuple[Any, ...]],
    cutoff: datetime,
) -> None:
    """Every instant that came due has a row, in a final state its policies explain."""
    lost: list[str] = []
    states: Counter[str] = Counter()
    due = 0
    for sid, schedule in schedules.items():
        timing = from_record(schedule)
        start = schedule.created_at + timedelta(seconds=1)
        summarised = _summarised(summaries, sid)
        for instant in timing.between(start, cutoff):
            due += 1
            row = occurrences.get((sid, instant))
            if row is None:
                if any(lo <= instant <= hi for lo, hi in summarised):
                    states["skipped:misfire (summarised)"] += 1
                else:
                    lost.append(f"{schedule.key}@{instant.isoformat()}: no occurrence row")
                continue
            _, state, reason, attempts, failures, _ = row
            label = f"{state}:{reason}" if reason else state
            states[label] += 1
            why = _unexplained(schedule, state, reason, attempts, failures)
            if why:
                lost.append(f"{schedule.key}@{instant.isoformat()}: {why}")
    found.figures["due"] = due
    found.figures["outcomes"] = dict(sorted(states.items()))
    found.figures["lost"] = len(lost)
    found.check("lost occurrences", lost)


def _summarised(summaries: list[tuple[Any, ...]], sid: Any) -> list[tuple[datetime, datetime]]:
    spans = []
    for target, after in summaries:
        after = json.loads(after) if isinstance(after, str) else after
        if str(target) == str(sid) and after.get("first") and after.get("last"):
            spans.append(
                (datetime.fromisoformat(after["first"]), datetime.fromisoformat(after["last"]))
            )
    return spans


def _unexplained(
    schedule: SimpleNamespace, state: str, reason: str, attempts: int, failures: int
) -> str:
    if state == "completed":
        return ""
    if state == "dead":
        return (
            ""
            if failures >= schedule.max_attempts or schedule.job == "chaos.doomed"
            else (f"dead after {failures} failure(s) of {schedule.max_attempts} allowed")
        )
    if state == "skipped":
        if reason == "misfire" and schedule.misfire in ("skip", "replay_once", "replay_all"):
            return ""  # replay_all skips too, beyond max_catchup
        if reason == "overlap" and schedule.overlap == "skip":
            return ""
        return f"skipped ({reason}) although misfire={schedule.misfire} overlap={schedule.overlap}"
    return f"left {state} after the campaign settled"


def _effects(found: Findings, db: Rows, attempts: dict[Any, list[AttemptRow]]) -> None:
    """One effect per completed occurrence, written with the token of its one success; the
    partner applies each outside call once (repeated deliveries are counted, not hidden)."""
    effects: dict[str, list[int]] = defaultdict(list)
    for key, token in db.rows("SELECT occurrence_key, token FROM chaos_effect"):
        effects[key].append(token)
    applied = {
        key: n for key, n in db.rows("SELECT idempotency_key, deliveries FROM chaos_outsideeffect")
    }
    duplicates, mismatched, twice = [], [], []
    coroutines = 0
    for oid, job, state in db.rows(
        "SELECT o.id, s.job, o.state FROM django_jobs_occurrence o"
        " JOIN django_jobs_schedule s ON s.id = o.schedule_id"
    ):
        key = str(oid)
        rows = attempts.get(oid, [])
        succeeded = [(row.number, row.token) for row in rows if row.outcome == "succeeded"]
        written = effects.get(key, [])
        if len(succeeded) > 1:
            twice.append(f"occurrence {key}: {len(succeeded)} successful attempts")
        if len(written) > 1:
            duplicates.append(f"occurrence {key}: effect committed {len(written)} times")
        if job not in EFFECT_JOBS:
            continue
        if state == "completed":
            if not written:
                mismatched.append(f"occurrence {key}: completed without its effect")
            elif succeeded and written[0] != succeeded[0][1]:
                mismatched.append(
                    f"occurrence {key}: effect written with token {written[0]},"
                    f" completion accepted with token {succeeded[0][1]}"
                )
            if succeeded and succeeded[0][0] != rows[-1].number:
                mismatched.append(f"occurrence {key}: a claim followed its completion")
            if job == "chaos.outside" and f"{key}:notify-partner" not in applied:
                mismatched.append(f"occurrence {key}: completed without its outside call")
            if job == "chaos.coroutine" and len(written) == 1:
                coroutines += 1
        elif written:
            mismatched.append(f"occurrence {key}: effect committed but the occurrence is {state}")
    refused = sum(1 for rows in attempts.values() for row in rows if row.outcome == "fenced_out")
    found.figures["duplicate_effects"] = len(duplicates)
    found.figures["duplicate_completions"] = len(twice)
    found.figures["stale_completions_refused"] = refused
    found.figures["outside_calls_applied"] = len(applied)
    found.figures["outside_calls_redelivered"] = sum(1 for n in applied.values() if n > 1)
    found.figures["coroutines_completed_with_effect"] = coroutines
    found.check("no effect committed twice", duplicates)
    found.check("no occurrence completed twice", twice)
    found.check("effects match completions", mismatched)


def _enqueued_work(found: Findings, db: Rows, committed: list[str]) -> None:
    """Every piece of work the enqueuer committed (``bench/chaos/enqueuer.py``) exists once
    and completed; its effect (once, with its completion's token) is ``_effects``' check."""
    states = dict(
        db.rows(
            "SELECT o.id::text, o.state FROM django_jobs_occurrence o WHERE o.id = ANY(%s::uuid[])",
            [committed],
        )
    )
    lost = [f"enqueued {oid}: no occurrence row" for oid in committed if oid not in states]
    lost += [
        f"enqueued {oid}: {state}, not completed"
        for oid, state in states.items()
        if state != "completed"
    ]
    found.figures["enqueued"] = len(committed)
    found.figures["enqueued_completed"] = sum(1 for s in states.values() if s == "completed")
    found.figures["enqueued_lost"] = len(lost)
    found.check("every committed enqueue completed", lost)


def _tokens(found: Findings, attempts: dict[Any, list[AttemptRow]]) -> None:
    problems = []
    for oid, rows in attempts.items():
        tokens = [row.token for row in rows]
        if any(b <= a for a, b in itertools.pairwise(tokens)):
            problems.append(f"occurrence {oid}: tokens {tokens} do not strictly increase")
    found.check("fencing tokens increase", problems)


def _drains(
    found: Findings, attempts: dict[Any, list[AttemptRow]], lives: list[Incarnation]
) -> None:
    """A replica stopped with SIGTERM hands back what it holds: nothing it was running (or had
    claimed ahead) at the signal is left so, or waits for its lease to expire and be taken
    over."""
    signalled = {
        life.name: life.ended
        for life in lives
        if life.ended_by == "sigterm" and life.exit_code == 0 and life.ended
    }
    problems = [
        f"occurrence {oid} attempt {row.number} of {row.replica}: {row.outcome}"
        f" (SIGTERM at {at:%H:%M:%S})"
        for oid, rows in attempts.items()
        for row in rows
        if (at := signalled.get(row.replica))
        and (
            row.outcome in ("running", "claimed")
            or (row.outcome == "lease_lost" and row.finished_at and row.finished_at > at)
        )
    ]
    found.figures["sigterm_drains"] = len(signalled)
    found.check("SIGTERM releases leases", problems)


def _takeovers(found: Findings, attempts: dict[Any, list[AttemptRow]], faults: list[Fault]) -> None:
    """From a replica's death (SIGKILL) or freeze (SIGSTOP) to its work running elsewhere."""
    hit = {f.replica: f for f in faults if f.kind in ("sigkill", "sigstop")}
    delays = []
    for rows in attempts.values():
        for row, nxt in itertools.pairwise(rows):
            fault = hit.get(row.replica)
            if (
                fault
                and row.started_at < fault.at < nxt.started_at
                and row.outcome in ("running", "lease_lost", "fenced_out")
            ):
                delays.append((nxt.started_at - fault.at).total_seconds())
    found.figures["takeovers"] = len(delays)
    found.figures["takeover_p50_s"] = percentile(delays, 50)
    found.figures["takeover_p99_s"] = percentile(delays, 99)


def _lateness(
    found: Findings,
    schedules: dict[Any, SimpleNamespace],
    occurrences: dict[tuple[Any, datetime], tuple[Any, ...]],
    attempts: dict[Any, list[AttemptRow]],
) -> None:
    """Start lateness of completed occurrences: first attempt's start minus the scheduled
    instant, overall and per schedule (queued runs wait for their predecessors by design)."""
    by_key: dict[str, list[float]] = defaultdict(list)
    for (sid, at), (oid, state, *_rest) in occurrences.items():
        if state == "completed" and attempts.get(oid):
            by_key[schedules[sid].key].append((attempts[oid][0].started_at - at).total_seconds())
    late = [value for values in by_key.values() for value in values]
    found.figures["start_lateness_p50_s"] = percentile(late, 50)
    found.figures["start_lateness_p99_s"] = percentile(late, 99)
    found.figures["worst_lateness_s"] = max(late) if late else None
    found.figures["lateness_by_schedule"] = {
        key: {
            "p50_s": percentile(values, 50),
            "p99_s": percentile(values, 99),
            "worst_s": max(values),
            "overlap": next(s.overlap for s in schedules.values() if s.key == key),
        }
        for key, values in sorted(by_key.items())
    }


def _replica_logs(found: Findings, lives: list[Incarnation]) -> None:
    """What the replicas' own logs add: writes refused by ``run.atomic()``'s token check
    before they committed, runs cut off for ignoring cancellation, and how well each life
    corrected its host clock's skew."""
    refused, cut_off, residual = 0, 0, 0.0
    for life in lives:
        for event in life.events():
            if event.get("event") == "lease.lost":
                refused += 1
            elif event.get("event") == "run.cut_off":
                cut_off += 1
            elif event.get("event") == "clock.synced" and life.skew_seconds:
                # The measured offset cancels the injected skew: what is left is the error.
                error_ms = abs(event["offset_ms"] + life.skew_seconds * 1000)
                residual = max(residual, error_ms)
    found.figures["stale_runs_stopped_before_commit"] = refused
    found.figures["runs_cut_off"] = cut_off
    found.figures["skewed_lives"] = sum(1 for life in lives if life.skew_seconds)
    found.figures["clock_skew_residual_max_ms"] = round(residual, 2)


def _outage_logging(found: Findings, faults: list[Fault], lives: list[Incarnation]) -> None:
    """Each replica logs an outage's start, at most one summary per 30 s, and the recovery.
    A ``hang`` fault stops the server or severs connections; an injected statement error
    and a query of death's own end of its session may be taken for an outage too: the bound
    allows a spell for each."""
    problems = []
    worst = 0
    for life in lives:
        end = life.ended or datetime.max.replace(tzinfo=life.started.tzinfo)
        seen = [f for f in faults if f.kind in OUTAGE_LOGGED and life.started <= _began(f) <= end]
        lines = Counter(
            e.get("event")
            for e in life.events()
            if e.get("event") in ("store.unavailable", "store.still_unavailable", "store.recovered")
        )
        total = sum(lines.values())
        worst = max(worst, total)
        bound = 2 * (len(seen) + 1) + sum(math.ceil(f.seconds / 30) for f in seen)
        if total > bound:
            problems.append(f"{life.name}: {total} outage log lines, more than {bound}")
    found.figures["outage_log_lines_max_per_replica"] = worst
    found.check("outage logging bounded", problems)


def _began(fault: Fault) -> datetime:
    """When a fault's outage began: a ``hang`` fault's once its run beats, seconds after
    the fault itself (a life started meanwhile meets it)."""
    for name in ("outage_from", "cut_from"):
        if fault.detail.get(name):
            return datetime.fromisoformat(fault.detail[name])
    return fault.at


def _replica_exits(found: Findings, db: Rows, lives: list[Incarnation]) -> None:
    """A worker ends only when told (SIGKILL, or SIGTERM with exit 0), or for the two reasons
    the campaign's handlers give it: the crasher killed it (exit 1, and a start sign of the
    crasher names that life), or it cut off a run that ignored cancellation and asks its
    supervisor for a restart (exit 3, and ``run.cut_off`` in its log)."""
    crashed = {
        replica
        for (replica,) in db.rows(
            "SELECT DISTINCT replica FROM chaos_sign WHERE job = %s", [CRASHER]
        )
    }
    by_crasher, by_cut_off, problems = 0, 0, []
    for life in lives:
        if life.exit_code is None or life.ended_by == "sigkill":
            continue
        if life.exit_code == 1 and life.name in crashed:
            by_crasher += 1
        elif life.exit_code == 3 and any(e.get("event") == "run.cut_off" for e in life.events()):
            by_cut_off += 1
        elif not (life.ended_by == "sigterm" and life.exit_code == 0):
            problems.append(
                f"{life.name}: ended by {life.ended_by or 'itself'} with exit code {life.exit_code}"
            )
    found.figures["replica_lives"] = len(lives)
    found.figures["lives_ended_by_crasher"] = by_crasher
    found.figures["lives_ended_after_cut_off"] = by_cut_off
    found.check("replicas exit only when told, cleanly", problems)


def _replica_memory(
    found: Findings, lives: list[Incarnation], hostile: list[dict[str, Any]], *, bound_mib: float
) -> None:
    """No replica life's peak resident memory (``VmHWM``, sampled while it ran) exceeds
    ``bound_mib``: a row that makes the planner list what it should count shows here first,
    before the kernel's OOM killer (a SIGKILL nobody asked for: *replicas exit only when
    told*). Reported separately for the lives that were up once a hostile row was written."""
    first = min((datetime.fromisoformat(d["written_at"]) for d in hostile), default=None)
    peaks = [(life, life.peak_rss_kib / 1024) for life in lives if life.peak_rss_kib]
    met = [mib for life, mib in peaks if first and (life.ended is None or life.ended >= first)]
    found.figures["replica_peak_rss_max_mib"] = (
        round(max(m for _, m in peaks), 1) if peaks else None
    )
    found.figures["replica_peak_rss_max_mib_hostile"] = round(max(met), 1) if met else None
    found.figures["replica_peak_rss_bound_mib"] = bound_mib
    found.check(
        "replica memory bounded",
        [
            f"{life.name}: peak resident memory {mib:.1f} MiB, more than {bound_mib:g} MiB"
            for life, mib in peaks
            if mib > bound_mib
        ],
    )
