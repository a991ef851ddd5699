"""Attempts bounded for every job: no occurrence runs more often than its ``max_attempts``,
but for the attempts a genuine store outage ended (which are not failures, by design, and
give the occurrence back to be run again).

What counts: every attempt that started (not ``unstarted``, claimed ahead and never run;
not ``claimed``, still waiting for a thread; not ``released``, given back unfinished on a
SIGTERM). What is excused, the allowance: an attempt recorded ``outage`` that met an outage
the campaign injected:

- the store down for every replica (a PostgreSQL restart, a failover, a ``hang`` fault's
  outage) or a statement fault armed (an injected serialization failure or cancelled
  statement is an ``OperationalError`` a worker may take for an outage);
- its own replica's connections terminated (``terminate_backends``, a ``hang`` fault's cut);
- its own replica frozen (SIGSTOP: it wakes up with its lease unconfirmed);

each widened by ``RECOVERY`` after its end, for a connection that finds out at its next use.
An ``outage`` attempt that met none of them is counted: nothing the campaign did took the
store away from it (a handler that kills its own session, for one).
"""

from __future__ import annotations

from collections import Counter
from datetime import timedelta
from typing import TYPE_CHECKING, Any, NamedTuple

from .history import AttemptRow, Findings, Rows
from .spans import Span, cut, fault_span, frozen, overlaps, store_down

if TYPE_CHECKING:
    from .faults import Fault

NOT_COUNTED = ("unstarted", "claimed", "released")
RECOVERY = timedelta(seconds=10)


class Occurrence(NamedTuple):
    """What the bound of one occurrence needs: its schedule's key and job, and its limit."""

    key: str
    job: str
    max_attempts: int


def occurrences(db: Rows) -> dict[Any, Occurrence]:
    return {
        oid: Occurrence(key, job, limit)
        for oid, key, job, limit in db.rows(
            "SELECT o.id, s.key, s.job, s.max_attempts FROM django_jobs_occurrence o"
            " JOIN django_jobs_schedule s ON s.id = o.schedule_id"
        )
    }


class Excuses:
    """The injected outages an ``outage`` attempt may have met (the module docstring)."""

    def __init__(self, faults: list[Fault]) -> None:
        self.every: list[Span] = store_down(faults)
        self.every += [fault_span(f) for f in faults if f.kind == "statement_error"]
        self.own: dict[str, list[Span]] = {k: list(v) for k, v in frozen(faults).items()}
        for life, spans in cut(faults).items():
            self.own.setdefault(life, []).extend(spans)

    def excuse(self, row: AttemptRow) -> bool:
        if row.outcome != "outage":
            return False
        ran = (row.started_at, row.finished_at or row.started_at)
        return overlaps(ran, [*self.every, *self.own.get(row.replica, [])], slack=RECOVERY)


def counted(rows: list[AttemptRow], excuses: Excuses) -> tuple[int, int]:
    """How many of an occurrence's attempts count against its bound, and how many started
    attempts were excused."""
    started = [row for row in rows if row.outcome not in NOT_COUNTED]
    excused = sum(excuses.excuse(row) for row in started)
    return len(started) - excused, excused


def attempts_bounded(
    found: Findings,
    attempts: dict[Any, list[AttemptRow]],
    jobs: dict[Any, Occurrence],
    faults: list[Fault],
) -> None:
    """Every occurrence's counted attempts are at most its ``max_attempts``."""
    excuses = Excuses(faults)
    problems, excused_total, worst = [], 0, 0
    for oid, rows in attempts.items():
        occurrence = jobs.get(oid)
        if occurrence is None:
            continue
        n, excused = counted(rows, excuses)
        excused_total += excused
        worst = max(worst, n - occurrence.max_attempts)
        if n > occurrence.max_attempts:
            outcomes = Counter(row.outcome for row in rows)
            problems.append(
                f"{occurrence.key} occurrence {oid} ({occurrence.job}): {n} attempts counted,"
                f" max_attempts {occurrence.max_attempts} ({excused} more excused as outages;"
                f" outcomes {dict(sorted(outcomes.items()))})"
            )
    found.figures["attempts_excused_as_outages"] = excused_total
    found.figures["attempts_most_over_max"] = worst
    found.check("attempts bounded for every job", problems)
