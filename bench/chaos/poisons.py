"""Poisons: one-off schedules of handlers that break the rules in ways a worker must contain,
declared through the service layer by the injector's ``poison`` and ``hang`` faults
(``declare.py``; the handlers are in ``app/jobs.py``).

- ``query_of_death`` (``chaos.deadly``): its own statement ends its database session. The
  store is fine; every attempt does the same. It must end dead within its attempts (plus the
  outage allowance of ``bounds``), and the fleet must go on completing other work meanwhile.
- ``system_exit`` (``chaos.exit``) and ``keyboard_interrupt`` (``chaos.interrupt``): each
  attempt is recorded as the handler's failure (not a lost worker), the occurrence ends dead
  with that error, and the replica that ran it goes on serving (the same process).
- ``hang`` (``chaos.hang``, a fault of its own): ignores its 2-second timeout; its beats show
  that it stopped in time (``beats.no_run_outlives_its_timeout``), and it ends dead too.

Each has ``max_attempts`` 2, so a worker that does not contain it shows at once.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from .bounds import Excuses, counted
from .history import AttemptRow, Findings, Rows
from .spans import Span, frozen, overlaps, store_down

if TYPE_CHECKING:
    from .faults import Fault
    from .replicas import Incarnation

POISON = "poison."
HANG_KEY = "hang."
POISONS = {
    "query_of_death": "chaos.deadly",
    "system_exit": "chaos.exit",
    "keyboard_interrupt": "chaos.interrupt",
}
EXITS = {"chaos.exit": "SystemExit", "chaos.interrupt": "KeyboardInterrupt"}
MAX_ATTEMPTS = 2
# After a run of an exit poison, how long its replica life has to start another run.
SERVE_AGAIN_WITHIN = timedelta(seconds=20)
# The runner waits this long at most, after the rest has settled, for the poisons to end:
# a worker that loops on a query of death would never let the campaign finish.
POISON_WAIT_S = 30.0


def poison_specs(n: int) -> list[dict[str, Any]]:
    """One one-off of each poison, due 1.5 s after it is declared."""
    return [
        {
            "key": f"{POISON}{variant}-{n}",
            "job": job,
            "lag_s": -1.5,
            "max_delay_s": 30,
            "max_attempts": MAX_ATTEMPTS,
            "timeout_s": 5,
            "why": f"a {variant.replace('_', ' ')} handler",
            "variant": variant,
        }
        for variant, job in POISONS.items()
    ]


def hang_spec(n: int) -> dict[str, Any]:
    """A run that ignores its timeout of 2 s, due 1 s after it is declared."""
    return {
        "key": f"{HANG_KEY}{n}",
        "job": "chaos.hang",
        "lag_s": -1.0,
        "max_delay_s": 30,
        "max_attempts": MAX_ATTEMPTS,
        "timeout_s": 2,
        "why": "a handler that ignores its timeout",
        "variant": "hang",
    }


def declared(faults: list[Fault]) -> list[dict[str, Any]]:
    """Every poison and hang one-off the injector declared."""
    return [
        spec
        for fault in faults
        if fault.kind in ("poison", "hang")
        for spec in fault.detail.get("one_offs", [])
    ]


def _occurrence(db: Rows, schedule_id: int) -> tuple[Any, ...] | None:
    rows = db.rows(
        "SELECT id, state, last_error_type, failures FROM django_jobs_occurrence"
        " WHERE schedule_id = %s ORDER BY scheduled_at",
        [schedule_id],
    )
    return rows[0] if rows else None


def poisons_end_dead(
    found: Findings,
    db: Rows,
    attempts: dict[Any, list[AttemptRow]],
    faults: list[Fault],
) -> None:
    """Every poison (and hang) one-off ran, ended dead, and counted at most
    ``max_attempts`` attempts (``bounds.counted``: outages the campaign injected excused);
    while a query of death was being retried, the fleet completed other work."""
    excuses = Excuses(faults)
    problems, most = [], 0
    for spec in declared(faults):
        row = _occurrence(db, spec["schedule_id"])
        if row is None:
            problems.append(f"{spec['key']}: no occurrence was ever planned")
            continue
        oid, state, error, failures = row
        rows = attempts.get(oid, [])
        n, excused = counted(rows, excuses)
        most = max(most, n)
        if not rows:
            problems.append(f"{spec['key']}: never ran ({state})")
        elif state != "dead":
            problems.append(
                f"{spec['key']} occurrence {oid}: {state} after {len(rows)} attempt(s),"
                f" {failures} failure(s) counted (last error {error or 'none'}); it must end dead"
            )
        if n > spec["max_attempts"]:
            problems.append(
                f"{spec['key']} occurrence {oid}: {n} attempts counted, max_attempts"
                f" {spec['max_attempts']} ({excused} more excused as outages)"
            )
        if spec["variant"] == "query_of_death" and len(rows) > 1:
            problems += _others_completed(db, spec["key"], rows)
    found.figures["poisons_declared"] = len(declared(faults))
    found.figures["poison_most_attempts_counted"] = most
    found.check("poisons end dead within their attempts", problems)


def _others_completed(db: Rows, key: str, rows: list[AttemptRow]) -> list[str]:
    """The fleet went on completing other occurrences while a query of death was retried."""
    first, last = rows[0].started_at, max(r.finished_at or r.started_at for r in rows)
    if (last - first).total_seconds() < 5:
        return []
    ((others,),) = db.rows(
        "SELECT count(*) FROM django_jobs_occurrence o"
        " JOIN django_jobs_schedule s ON s.id = o.schedule_id"
        " WHERE o.state = 'completed' AND o.finished_at BETWEEN %s AND %s"
        " AND NOT starts_with(s.key, %s)",
        [first, last, POISON],
    )
    if others:
        return []
    return [f"{key}: nothing else completed in the {(last - first).total_seconds():.1f} s it ran"]


def exits_are_failures(
    found: Findings,
    db: Rows,
    attempts: dict[Any, list[AttemptRow]],
    faults: list[Fault],
    lives: list[Incarnation],
) -> None:
    """``SystemExit`` and ``KeyboardInterrupt`` from a handler are the attempt's failure:

    1. each attempt that started ends ``failed`` with that error type (an attempt whose
       replica the injector killed, stopped or froze meanwhile, or an outage excused by
       ``bounds``, is not asked);
    2. the occurrence ends dead with that error, not ``WorkerLost`` (``poisons_end_dead``
       checks that it ends dead);
    3. the replica life that ran it does not end by itself afterwards (but the crasher may
       kill it: a start sign of the crasher names the life) and, if it is up
       ``SERVE_AGAIN_WITHIN`` later, has started another run by then: the same process
       serves on.
    """
    lives_seen = _Lives(db, attempts, faults, lives)
    excuses = Excuses(faults)
    problems, runs = [], 0
    for spec in declared(faults):
        expected = EXITS.get(spec["job"])
        found_row = _occurrence(db, spec["schedule_id"]) if expected else None
        if expected is None or found_row is None:
            continue  # not an exit poison; or never planned, which poisons_end_dead reports
        oid, state, error, _ = found_row
        if state == "dead" and not error.endswith(expected):
            problems.append(f"{spec['key']} occurrence {oid}: dead with {error}, not {expected}")
        for attempt in attempts.get(oid, []):
            if attempt.outcome in ("unstarted", "claimed") or excuses.excuse(attempt):
                continue
            runs += 1
            if lives_seen.hit_during(attempt):
                continue
            if attempt.outcome != "failed" or not attempt.error_type.endswith(expected):
                problems.append(
                    f"{spec['key']} attempt {attempt.number} ({attempt.replica}):"
                    f" {' '.join(filter(None, (attempt.outcome, attempt.error_type)))},"
                    f" not failed with {expected}"
                )
            problems += lives_seen.kept_serving(spec["key"], attempt, str(oid))
    found.figures["exit_poison_runs"] = runs
    found.check("SystemExit and KeyboardInterrupt are the attempt's failure", problems)


class _Lives:
    """What the exit check knows of the replica lives: each life, when the injector killed,
    stopped or froze it (from then on), when the store was down, which lives the crasher
    killed (a start sign names them), which runs each life cut off (``run.cut_off``: it then
    exits 3), and when each life started runs."""

    def __init__(
        self,
        db: Rows,
        attempts: dict[Any, list[AttemptRow]],
        faults: list[Fault],
        lives: list[Incarnation],
    ) -> None:
        self.by_name = {life.name: life for life in lives}
        self.hit = {name: list(spans) for name, spans in frozen(faults).items()}
        for fault in faults:
            if fault.kind in ("sigkill", "sigterm", "clock_skew") and fault.replica:
                forever = datetime.max.replace(tzinfo=fault.at.tzinfo)
                self.hit.setdefault(fault.replica, []).append((fault.at, forever))
        self.down = store_down(faults)
        self.crashed = {
            replica
            for (replica,) in db.rows(
                "SELECT DISTINCT replica FROM chaos_sign WHERE job = %s", ["chaos.crasher"]
            )
        }
        self.cut_off = {
            life.name: {
                str(e.get("occurrence")) for e in life.events() if e.get("event") == "run.cut_off"
            }
            for life in lives
        }
        self.starts: dict[str, list[datetime]] = {}
        for rows in attempts.values():
            for row in rows:
                self.starts.setdefault(row.replica, []).append(row.started_at)

    def hit_during(self, attempt: AttemptRow) -> bool:
        span = (attempt.started_at, attempt.finished_at or attempt.started_at)
        return overlaps(span, self.hit.get(attempt.replica, []))

    def kept_serving(self, key: str, attempt: AttemptRow, occurrence: str) -> list[str]:
        """The life that ran ``attempt`` (of ``occurrence``) did not end by itself, but for
        the crasher or a cut-off of another run (exit 3), and, unless it ended or could not
        claim (killed, frozen, the store down) meanwhile, started another run within
        ``SERVE_AGAIN_WITHIN``."""
        life = self.by_name.get(attempt.replica)
        if life is None:
            return []
        who, ended = f"{life.name} (pid {life.pid})", life.ended
        by_itself = life.ended_by == "" and life.exit_code is not None
        if by_itself and ended is not None and ended >= attempt.started_at:
            others_cut_off = self.cut_off.get(life.name, set()) - {occurrence}
            if life.name in self.crashed or (life.exit_code == 3 and others_cut_off):
                return []
            return [
                f"{key}: {who} ended by itself (exit code {life.exit_code}) after attempt"
                f" {attempt.number}"
            ]
        until = attempt.started_at + SERVE_AGAIN_WITHIN
        unable: list[Span] = [*self.hit.get(life.name, []), *self.down]
        if (ended is not None and ended < until) or overlaps((attempt.started_at, until), unable):
            return []
        if any(attempt.started_at < at <= until for at in self.starts.get(life.name, [])):
            return []
        return [
            f"{key}: {who} started no run in the {SERVE_AGAIN_WITHIN.seconds} s after"
            f" attempt {attempt.number}"
        ]
