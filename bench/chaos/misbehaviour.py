"""What must hold for the handlers that misbehave on purpose (bench/chaos/app/jobs.py): crash
loops end, old lease holders stop, store outages are not failures, and every run starts with a
clean database session. Each check records its figures and its violations in ``Findings``."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from . import spans
from .faults import Fault
from .history import AttemptRow, Findings, Rows

CRASHER = "chaos.crasher"
STUBBORN = "chaos.stubborn"
READER = "chaos.reader"
LEAKER = "chaos.leaker"
# Attempt outcomes that may have been charged to the occurrence as a failure: written by a
# failure, or a lost lease (which a late write of the old holder may turn into fenced_out).
CHARGEABLE = ("failed", "timed_out", "lease_lost", "fenced_out")
# The error types of "the store could not be reached" (Django's and psycopg's).
CONNECTION_ERROR = re.compile(r"(OperationalError|InterfaceError)$")
# What an error injected into a statement (``statements``) says first: a serialization
# failure or a cancelled statement is an OperationalError too, and is no outage.
INJECTED = "chaos: injected"
# A handler whose own statement ends its session (``poisons``): its connection error is its
# failure, not the store's outage.
QUERY_OF_DEATH = "chaos.deadly"
OCCURRENCES_OF_JOB = """
    SELECT o.id, o.scheduled_at, o.state, o.failures, o.last_error_type, s.max_attempts
    FROM django_jobs_occurrence o JOIN django_jobs_schedule s ON s.id = o.schedule_id
    WHERE s.job = %s
"""


def crash_loops_end(found: Findings, db: Rows, *, cutoff: datetime) -> None:
    """A crasher occurrence starts at most ``max_attempts`` times (one start sign per fencing
    token: the crasher writes it, then kills its replica) and, once due before the end of the
    faults, ends dead: a claim that takes it over with no attempt left dead-letters it
    without running it again."""
    starts = dict(
        db.rows(
            "SELECT occurrence_key, count(DISTINCT token) FROM chaos_sign WHERE job = %s"
            " GROUP BY occurrence_key",
            [CRASHER],
        )
    )
    problems, loops, dead = [], 0, 0
    for oid, at, state, _, error, allowed in db.rows(OCCURRENCES_OF_JOB, [CRASHER]):
        n = starts.get(str(oid), 0)
        if n > allowed:
            problems.append(f"occurrence {oid}: started {n} times, max_attempts is {allowed}")
        if state == "skipped" or at >= cutoff:
            continue
        loops += 1
        if state == "dead":
            dead += 1
        else:
            problems.append(
                f"occurrence {oid}: {state} after {n} start(s) (last error {error or 'none'});"
                " a crash loop must end dead"
            )
    found.figures["crash_loops"] = loops
    found.figures["crash_loops_dead"] = dead
    found.figures["crasher_starts"] = sum(starts.values())
    found.figures["crasher_most_starts"] = max(starts.values(), default=0)
    found.check("crash loops end dead within max_attempts", problems)


def allowed_until(
    start: datetime, budget: timedelta, freezes: list[tuple[datetime, datetime]]
) -> datetime:
    """``start`` plus ``budget`` of a process's running time: spans it spent frozen
    (SIGSTOP to SIGCONT) do not count."""
    at, left = start, budget
    for frozen, thawed in sorted(freezes):
        if thawed <= at:
            continue
        if frozen >= at + left:
            break
        left -= max(frozen - at, timedelta(0))
        at = thawed
    return at + left


def _takeover(rows: list[AttemptRow], index: int) -> datetime | None:
    """When attempt ``rows[index]`` stopped being the occurrence's run: the next claim's start,
    or, for a lost lease with no next attempt (the claim found no attempt left and
    dead-lettered the occurrence), the end that claim wrote on it. ``None``: never taken over."""
    if index + 1 < len(rows):
        return rows[index + 1].started_at
    last = rows[index]
    return last.finished_at if last.outcome == "lease_lost" else None


def old_holders_stop(
    found: Findings,
    db: Rows,
    attempts: dict[Any, list[AttemptRow]],
    faults: list[Fault],
    *,
    budget: timedelta,
) -> None:
    """After its lease is taken over, the old holder leaves no sign of life later than
    ``budget`` (lease + timeout grace) of its own running time.

    Steps:
    1. for each run that left signs of life (occurrence, fencing token), find the takeover
       (``_takeover``); a run never taken over is not checked;
    2. the deadline is the takeover plus ``budget`` of the old holder's running time: spans
       in which the injector's fault log has its replica life SIGSTOPped do not count, as a
       frozen process can notice nothing (``allowed_until``);
    3. its last sign of life, stamped by PostgreSQL's ``clock_timestamp()``, must not be
       later than the deadline.

    Why lease + grace: a running holder learns that its lease is gone at its next renewal (a
    third of the lease) or stops its run before the lease lapses when it cannot renew; a
    handler that ignores the cancellation is cut off after the timeout grace; the rest of the
    lease is slack for round trips. Instants are compared across clocks: signs use the
    database's, takeovers the claimer's (synced to the database at start, to a millisecond),
    freezes the injector's (the same host as the embedded server).
    """
    by_key = {str(oid): rows for oid, rows in attempts.items()}
    freezes: dict[str, list[tuple[datetime, datetime]]] = {}
    for fault in faults:
        if fault.kind == "sigstop":
            span = (fault.at, fault.at + timedelta(seconds=fault.seconds))
            freezes.setdefault(fault.replica, []).append(span)
    problems, taken_over, worked_on, longest = [], 0, 0, 0.0
    margins: list[float] = []
    for job, key, token, replica, last in db.rows(
        "SELECT max(job), occurrence_key, token, max(replica), max(at) FROM chaos_sign"
        " GROUP BY occurrence_key, token"
    ):
        rows = by_key.get(key, [])
        index = next((i for i, row in enumerate(rows) if row.token == token), None)
        takeover = None if index is None else _takeover(rows, index)
        if takeover is None:
            continue
        taken_over += job == STUBBORN
        deadline = allowed_until(takeover, budget, freezes.get(replica, []))
        if last > takeover:
            worked_on += 1
            longest = max(longest, (last - takeover).total_seconds())
            margins.append((deadline - last).total_seconds())
        if last > deadline:
            problems.append(
                f"occurrence {key} token {token} ({replica}): sign of life at"
                f" {last:%H:%M:%S.%f}, {(last - deadline).total_seconds():.3f} s after its"
                f" deadline {deadline:%H:%M:%S.%f} (taken over at {takeover:%H:%M:%S.%f})"
            )
    found.figures["stubborn_runs_taken_over"] = taken_over
    found.figures["old_holders_working_after_takeover"] = worked_on
    found.figures["old_holder_longest_after_takeover_s"] = round(longest, 3)
    found.figures["old_holder_budget_s"] = budget.total_seconds()
    found.figures["old_holder_least_margin_s"] = round(min(margins), 3) if margins else None
    found.check("old lease holders stop within lease + grace", problems)


def outages_are_not_failures(
    found: Findings,
    db: Rows,
    attempts: dict[Any, list[AttemptRow]],
    faults: list[Fault] | None = None,
) -> None:
    """A store outage is never charged to an occurrence as a failure. Three ways it could be:

    1. an attempt ends failed or timed out with a connection error (the handler met the
       outage, or its outcome could not be written until later), but for an error the
       campaign injected into a statement (``INJECTED``), the query of death's own, and a
       session the injector terminated while the store answered (``cut_while_up``): the
       worker asks the store, and a store that answers makes an ended session the job's
       failure, by design (docs/worker.md, "Store outages"; a query of death is the same
       error), counted in ``sessions_cut_while_store_answered``;
    2. an occurrence has more failures than attempts that can be charged (``CHARGEABLE``):
       an attempt ended by an outage was counted;
    3. an occurrence of the reader, which meets outages mid-run and fails no other way
       (and has ten attempts against lost leases), ends dead.
    """
    problems = []
    ended: Counter[str] = Counter()
    cut_while_up = _cut_while_store_answered(faults or [])
    charged_by_design = 0
    jobs = {
        oid: job
        for oid, job in db.rows(
            "SELECT o.id, s.job FROM django_jobs_occurrence o"
            " JOIN django_jobs_schedule s ON s.id = o.schedule_id"
        )
    }
    for oid, rows in attempts.items():
        for row in rows:
            if row.outcome == "outage":
                ended[jobs.get(oid, "")] += 1
            if (
                row.outcome in ("failed", "timed_out")
                and CONNECTION_ERROR.search(row.error_type)
                and INJECTED not in row.error_message
                and jobs.get(oid) != QUERY_OF_DEATH
            ):
                if cut_while_up(row):
                    charged_by_design += 1
                    continue
                problems.append(
                    f"occurrence {oid} attempt {row.number} ({row.replica}): {row.outcome}"
                    f" with {row.error_type}: {row.error_message[:120]}"
                )
    for oid, failures in db.rows("SELECT id, failures FROM django_jobs_occurrence"):
        chargeable = sum(1 for row in attempts.get(oid, []) if row.outcome in CHARGEABLE)
        if failures > chargeable:
            outcomes = ", ".join(row.outcome for row in attempts.get(oid, []))
            problems.append(
                f"occurrence {oid}: {failures} failure(s) charged, {chargeable} attempt(s)"
                f" failed, timed out or lost their lease ({outcomes})"
            )
    for oid, _, state, failures, error, _ in db.rows(OCCURRENCES_OF_JOB, [READER]):
        failed = [r for r in attempts.get(oid, []) if r.outcome in ("failed", "timed_out")]
        if state == "dead" and not (failed and all(cut_while_up(r) for r in failed)):
            outcomes = ", ".join(row.outcome for row in attempts.get(oid, []))
            problems.append(
                f"occurrence {oid} of {READER}: dead after {failures} failure(s), last error"
                f" {error or 'none'} ({outcomes})"
            )
    found.figures["attempts_ended_by_outage"] = sum(ended.values())
    found.figures["sessions_cut_while_store_answered"] = charged_by_design
    found.figures["reader_attempts_ended_by_outage"] = ended[READER]
    found.check("store outages are not failures", problems)


def sessions_start_clean(found: Findings, db: Rows) -> None:
    """No run finds state an earlier run left on its database session: the session setting,
    the temporary table and the advisory locks the leaker leaves behind on purpose."""
    problems, views, after_leak = [], 0, 0
    leaked_on: set[tuple[str, int]] = set()  # connections (replica life, backend) a leaker used
    for job, key, token, replica, pid, setting, temp_table, locks in db.rows(
        "SELECT job, occurrence_key, token, replica, backend_pid, setting, temp_table,"
        " advisory_locks FROM chaos_sessionview ORDER BY id"
    ):
        views += 1
        after_leak += (replica, pid) in leaked_on
        if job == LEAKER:
            leaked_on.add((replica, pid))
        left = [
            *([f"chaos.leak = {setting!r}"] if setting else []),
            *(["temporary table chaos_leak"] if temp_table else []),
            *([f"{locks} advisory lock(s)"] if locks else []),
        ]
        if left:
            problems.append(
                f"{job} run of occurrence {key} token {token} ({replica}, backend {pid})"
                f" found {', '.join(left)}"
            )
    found.figures["session_views"] = views
    found.figures["session_views_after_a_leak"] = after_leak
    found.figures["session_views_with_leaks"] = len(problems)
    found.check("runs start with a clean session", problems)


# How far from an attempt's own run a cut of its replica's connections still explains its
# connection error: the cut is logged by the injector after ``pg_terminate_backend`` returned,
# and the attempt's end is written after the handler's error was classified.
CUT_SLACK = timedelta(seconds=2)


def _cut_while_store_answered(faults: list[Fault]) -> Callable[[AttemptRow], bool]:
    """Whether the injector severed an attempt's replica's connections during its run and the
    store was up for every replica from that cut until the attempt's end: its error then ended
    only its own session, and the worker, asking the store, found it answering.

    The window is the cut to the end, not the whole run: the worker classifies the error after
    the cut (a cut's instant is taken before ``pg_terminate_backend`` is called) and before it
    writes the end (replicas' clocks are synced to the server's at start). An outage that was
    over before the cut, or began after the end, cannot have been what the worker met.
    """
    cuts = spans.cut(faults)
    down = spans.store_down(faults)

    def explains(row: AttemptRow) -> bool:
        end = row.finished_at or row.started_at
        for cut_from, cut_to in cuts.get(row.replica, []):
            if cut_from > end + CUT_SLACK or cut_to < row.started_at - CUT_SLACK:
                continue
            met = max(cut_from, row.started_at)
            if not any(a <= end and b >= met for a, b in down):
                return True
        return False

    return explains
