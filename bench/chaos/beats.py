"""What the handlers' own heartbeats show (``bench/chaos/app/beats.py``): when each run was
executing, on the host's monotonic clock, whatever the database knew or could be told.

Two invariants are read from them, not from the database:

- *no two replicas execute one occurrence at once beyond lease + grace*: once a later run of
  an occurrence has beaten, an earlier one beats for at most lease + grace of its replica's
  running time (SIGSTOPped spans do not count);
- *no run outlives its timeout + grace, even during an outage*: a run's last beat is no
  later than its first plus its schedule's timeout, the cut-off grace and ``EXIT_SLACK``, of
  its replica's running time.

A run is the beats of one (occurrence, fencing token, replica life). Beats are converted from
the monotonic clock to the runner's wall clock with one offset, taken by the runner
(``wall_minus_monotonic``), so that they can be set against the fault log.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from .app.beats import SUFFIX
from .history import Findings, Rows
from .misbehaviour import allowed_until
from .spans import cut, frozen, overlaps, store_down

if TYPE_CHECKING:
    from .faults import Fault

HANG = "chaos.hang"
# After the cut-off, the replica releases its other runs and exits: the abandoned handler
# beats until the process is gone. What that takes, on a busy two-core machine.
EXIT_SLACK = timedelta(seconds=1)


class Beat(NamedTuple):
    replica: str
    at: datetime
    occurrence: str
    token: int
    job: str


@dataclass
class RunBeats:
    """One run as its beats show it."""

    occurrence: str
    token: int
    replica: str
    job: str
    first: datetime
    last: datetime
    count: int = 1


def wall_minus_monotonic() -> float:
    """The runner's wall clock less the host's monotonic clock, in seconds."""
    return time.time() - time.monotonic()


def read(folder: Path, offset: float) -> list[Beat]:
    """Every beat written in ``folder``; a line cut short by a SIGKILL is left out."""
    found = []
    for path in sorted(folder.glob(f"*{SUFFIX}")):
        for line in path.read_text(errors="replace").splitlines():
            parts = line.split()
            if len(parts) != 5:
                continue
            replica, mono, occurrence, token, job = parts
            try:
                at = datetime.fromtimestamp(float(mono) + offset, UTC)
                found.append(Beat(replica, at, occurrence, int(token), job))
            except ValueError:
                continue
    return found


def runs(beats: list[Beat]) -> dict[str, list[RunBeats]]:
    """Per occurrence, its runs in the order they began."""
    by_run: dict[tuple[str, int, str], RunBeats] = {}
    for beat in beats:
        key = (beat.occurrence, beat.token, beat.replica)
        run = by_run.get(key)
        if run is None:
            by_run[key] = RunBeats(*key, beat.job, beat.at, beat.at)
            continue
        run.first, run.last = min(run.first, beat.at), max(run.last, beat.at)
        run.count += 1
    found: dict[str, list[RunBeats]] = defaultdict(list)
    for run in sorted(by_run.values(), key=lambda r: r.first):
        found[run.occurrence].append(run)
    return found


def timeouts(db: Rows) -> dict[str, timedelta]:
    """Each occurrence's schedule timeout, by occurrence id."""
    return {
        str(oid): timeout
        for oid, timeout in db.rows(
            "SELECT o.id, s.timeout FROM django_jobs_occurrence o"
            " JOIN django_jobs_schedule s ON s.id = o.schedule_id"
        )
    }


def one_run_at_a_time(
    found: Findings,
    by_occurrence: dict[str, list[RunBeats]],
    faults: list[Fault],
    *,
    budget: timedelta,
) -> None:
    """No two runs of one occurrence beat at once for longer than ``budget`` (lease + grace)
    of the earlier run's running time, counted from the later run's first beat.

    Why lease + grace: a later run exists only once the earlier run's lease has lapsed
    (or was given back); the earlier holder learns of it at its next renewal and is cut off a
    grace later (``misbehaviour.old_holders_stop``, which measures the same promise from the
    database's signs and claims)."""
    stopped = frozen(faults)
    problems, overlapping, longest = [], 0, 0.0
    for occurrence, its_runs in by_occurrence.items():
        for i, earlier in enumerate(its_runs):
            for later in its_runs[i + 1 :]:
                if later.token == earlier.token or earlier.last <= later.first:
                    continue
                overlapping += 1
                together = (earlier.last - later.first).total_seconds()
                longest = max(longest, together)
                deadline = allowed_until(later.first, budget, stopped.get(earlier.replica, []))
                if earlier.last > deadline:
                    problems.append(
                        f"occurrence {occurrence} ({earlier.job}): token {earlier.token} on"
                        f" {earlier.replica} beat until {earlier.last:%H:%M:%S.%f},"
                        f" {together:.3f} s after token {later.token} began on {later.replica}"
                        f" ({(earlier.last - deadline).total_seconds():.3f} s past lease + grace)"
                    )
    found.figures["beaten_runs"] = sum(len(r) for r in by_occurrence.values())
    found.figures["runs_beating_at_once"] = overlapping
    found.figures["runs_beating_at_once_longest_s"] = round(longest, 3)
    found.check("no two replicas execute one occurrence at once beyond lease + grace", problems)


def no_run_outlives_its_timeout(
    found: Findings,
    by_occurrence: dict[str, list[RunBeats]],
    faults: list[Fault],
    limits: dict[str, timedelta],
    *,
    grace: timedelta,
) -> None:
    """A run's last beat is no later than its first plus its timeout, the grace and
    ``EXIT_SLACK`` of its replica's running time: past its timeout a run is cancelled, one
    that ignores it is cut off a grace later and its replica exits, whether or not the store
    answers meanwhile (the worker keeps its deadlines on its own clock)."""
    stopped, down, severed = frozen(faults), store_down(faults), cut(faults)
    problems: list[str] = []
    hangs, in_outage, margins = 0, 0, []
    for occurrence, its_runs in by_occurrence.items():
        timeout = limits.get(occurrence)
        if timeout is None:
            continue
        for run in its_runs:
            budget = timeout + grace + EXIT_SLACK
            deadline = allowed_until(run.first, budget, stopped.get(run.replica, []))
            outage = overlaps((run.first, run.last), [*down, *severed.get(run.replica, [])])
            if run.job == HANG:
                hangs += 1
                in_outage += outage
                margins.append((deadline - run.last).total_seconds())
            if run.last > deadline:
                problems.append(
                    f"occurrence {occurrence} ({run.job}) token {run.token} on {run.replica}:"
                    f" beat for {(run.last - run.first).total_seconds():.3f} s, timeout"
                    f" {timeout.total_seconds():g} s + grace {grace.total_seconds():g} s;"
                    f" {(run.last - deadline).total_seconds():.3f} s past"
                    + (" (during a store outage)" if outage else "")
                )
    found.figures["hang_runs"] = hangs
    found.figures["hang_runs_in_an_outage"] = in_outage
    found.figures["hang_least_margin_s"] = round(min(margins), 3) if margins else None
    found.check("no run outlives its timeout + grace, even during an outage", problems)


def check(
    found: Findings,
    db: Rows,
    beats: list[Beat],
    faults: list[Fault],
    *,
    lease: timedelta,
    grace: timedelta,
) -> None:
    by_occurrence = runs(beats)
    one_run_at_a_time(found, by_occurrence, faults, budget=lease + grace)
    no_run_outlives_its_timeout(found, by_occurrence, faults, timeouts(db), grace=grace)
