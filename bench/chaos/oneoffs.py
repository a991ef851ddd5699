"""One-offs declared after their instant: a deploy, or a service call, that lands after the
moment a one-off schedule names (the injector's ``late_one_off`` fault, through the service
layer: ``declare.py``).

Each fault declares two, misfire ``skip``, ``max_delay`` ``MAX_DELAY_S``:

- ``within``: its instant 1-15 s ago, within its ``max_delay``: it must run, exactly once
  (one occurrence, completed, one successful attempt, one effect);
- ``beyond``: its instant past its ``max_delay`` (by 5 s to 5 minutes, or by 1 to 5 days):
  it must end skipped for its misfire (an occurrence ``skipped``/``misfire``, or a skip summary
  covering its instant), never run, and never be silently stranded: an active one-off with
  no ``next_due_at`` and no occurrence that nobody will ever plan.
"""

from __future__ import annotations

import json
import random
from datetime import datetime
from typing import TYPE_CHECKING, Any

from .history import Findings, Rows

if TYPE_CHECKING:
    from .faults import Fault

ONE_OFF = "oneoff."
MAX_DELAY_S = 30
DAY_S = 86_400


def specs(rng: random.Random, n: int) -> list[dict[str, Any]]:
    """The pair a ``late_one_off`` fault declares (``chaos.effect``: its effect shows how
    often it ran)."""
    late = (
        rng.uniform(5, 300) if rng.random() < 0.6 else rng.uniform(1, 5) * DAY_S
    )  # within the schedules' 7-day retention: the evidence stays
    common = {"job": "chaos.effect", "max_delay_s": MAX_DELAY_S, "misfire": "skip"}
    common |= {"max_attempts": 5, "timeout_s": 30}
    return [
        {
            **common,
            "key": f"{ONE_OFF}within-{n}",
            "lag_s": round(rng.uniform(1, 15), 3),
            "expect": "once",
            "why": "a one-off declared after its instant, within its max_delay",
        },
        {
            **common,
            "key": f"{ONE_OFF}beyond-{n}",
            "lag_s": round(MAX_DELAY_S + late, 3),
            "expect": "skipped",
            "why": "a one-off declared after its instant and its max_delay",
        },
    ]


def declared(faults: list[Fault]) -> list[dict[str, Any]]:
    return [
        spec
        for fault in faults
        if fault.kind == "late_one_off"
        for spec in fault.detail.get("one_offs", [])
    ]


def decided(db: Rows, spec: dict[str, Any]) -> bool:
    """Whether the fleet has decided the one-off: run it, or skipped it."""
    ((final,),) = db.rows(
        "SELECT count(*) FROM django_jobs_occurrence WHERE schedule_id = %s"
        " AND state IN ('completed', 'dead', 'skipped', 'cancelled')",
        [spec["schedule_id"]],
    )
    return bool(final)


def late_one_offs(found: Findings, db: Rows, faults: list[Fault]) -> None:
    """What became of every one-off declared after its instant (the module docstring)."""
    problems, once, skipped = [], 0, 0
    for spec in declared(faults):
        found_problem = _within(db, spec) if spec["expect"] == "once" else _beyond(db, spec)
        if found_problem:
            problems.append(f"{spec['key']} (instant {spec['run_at']}): {found_problem}")
        elif spec["expect"] == "once":
            once += 1
        else:
            skipped += 1
    found.figures["late_one_offs_declared"] = len(declared(faults))
    found.figures["late_one_offs_ran_once"] = once
    found.figures["late_one_offs_skipped"] = skipped
    found.check("one-offs declared after their instant: run once or skipped", problems)


def _occurrences(db: Rows, spec: dict[str, Any]) -> list[tuple[Any, ...]]:
    return db.rows(
        "SELECT o.id, o.state, o.skip_reason,"
        " (SELECT count(*) FROM django_jobs_attempt a WHERE a.occurrence_id = o.id),"
        " (SELECT count(*) FROM django_jobs_attempt a WHERE a.occurrence_id = o.id"
        "  AND a.outcome = 'succeeded'),"
        " (SELECT count(*) FROM chaos_effect e WHERE e.occurrence_key = o.id::text)"
        " FROM django_jobs_occurrence o WHERE o.schedule_id = %s ORDER BY o.scheduled_at",
        [spec["schedule_id"]],
    )


def _stranded(db: Rows, spec: dict[str, Any]) -> str:
    rows = db.rows(
        "SELECT status, next_due_at, parked_field FROM django_jobs_schedule WHERE id = %s",
        [spec["schedule_id"]],
    )
    if not rows:
        return "its schedule row is gone, with no occurrence"
    status, next_due, parked = rows[0]
    if status == "active" and next_due is None:
        return (
            "stranded: active, no next_due_at, no occurrence"
            + (f" (parked for {parked})" if parked else "")
            + "; nothing will ever plan it"
        )
    return f"no occurrence (status {status}, next due {next_due})"


def _within(db: Rows, spec: dict[str, Any]) -> str:
    rows = _occurrences(db, spec)
    if not rows:
        return _stranded(db, spec)
    if len(rows) > 1:
        return f"{len(rows)} occurrences"
    _, state, reason, tries, succeeded, effects = rows[0]
    if state != "completed" or succeeded != 1 or effects != 1:
        label = f"{state}:{reason}" if reason else state
        return (
            f"{label} after {tries} attempt(s), {succeeded} successful, {effects} effect(s);"
            " it must run exactly once"
        )
    return ""


def _beyond(db: Rows, spec: dict[str, Any]) -> str:
    rows = _occurrences(db, spec)
    if not rows:
        return "" if _summarised(db, spec) else _stranded(db, spec)
    if len(rows) > 1:
        return f"{len(rows)} occurrences"
    _, state, reason, tries, _, effects = rows[0]
    if (state, reason) != ("skipped", "misfire") or tries or effects:
        label = f"{state}:{reason}" if reason else state
        return (
            f"{label} after {tries} attempt(s), {effects} effect(s); it must end skipped for"
            " its misfire"
        )
    return ""


def _summarised(db: Rows, spec: dict[str, Any]) -> bool:
    """Whether a skip summary (``misfire.skipped`` audit record) covers its instant."""
    instant = datetime.fromisoformat(spec["run_at"])
    for (after,) in db.rows(
        "SELECT after FROM django_jobs_auditrecord"
        " WHERE action = 'misfire.skipped' AND target_id = %s",
        [str(spec["schedule_id"])],
    ):
        after = json.loads(after) if isinstance(after, str) else after
        if isinstance(after, dict) and after.get("first") and after.get("last"):
            first, last = (datetime.fromisoformat(after[k]) for k in ("first", "last"))
            if first <= instant <= last:
                return True
    return False
