"""The campaign's history as the checks read it: rows from the database, and what the checks
find in them (figures, and violations per invariant)."""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NamedTuple, Protocol


class Rows(Protocol):
    """Where the checks read from: the campaign's ``Database``, or a test's connection."""

    def rows(self, sql: str, params: Any = None) -> list[tuple[Any, ...]]: ...


class AttemptRow(NamedTuple):
    """One ``django_jobs_attempt`` row: one claim of an occurrence and how it ended."""

    number: int
    token: int
    replica: str
    started_at: datetime
    finished_at: datetime | None
    outcome: str
    error_type: str
    error_message: str


# Every attempt as a table (SQL): the ended ones' rows, and the attempt holding a processing
# occurrence's lease, read from its row (its Attempt row is written when it ends, #38:
# ``Occurrence.current_attempt``). The columns of ``AttemptRow``, after ``occurrence_id``.
ATTEMPTS = (
    "SELECT occurrence_id, number, fencing_token, replica, started_at, finished_at,"
    " outcome, error_type, error_message FROM django_jobs_attempt"
    " UNION ALL"
    " SELECT o.id, o.attempts, o.fencing_token, o.lease_owner,"
    " COALESCE(o.attempt_started_at, o.started_at), NULL,"
    " CASE WHEN o.attempt_started_at IS NULL THEN 'claimed' ELSE 'running' END, '', ''"
    " FROM django_jobs_occurrence o WHERE o.state = 'processing' AND o.attempts > 0"
    " AND NOT EXISTS (SELECT 1 FROM django_jobs_attempt a"
    " WHERE a.occurrence_id = o.id AND a.fencing_token = o.fencing_token)"
)


def attempts_by_occurrence(db: Rows) -> dict[Any, list[AttemptRow]]:
    """Every occurrence's attempts, in order (``ATTEMPTS``)."""
    found: dict[Any, list[AttemptRow]] = defaultdict(list)
    for occurrence, *row in db.rows(f"{ATTEMPTS} ORDER BY 1, 2"):
        found[occurrence].append(AttemptRow(*row))
    return found


@dataclass
class Findings:
    figures: dict[str, Any] = field(default_factory=dict)
    violations: dict[str, list[str]] = field(default_factory=dict)

    def check(self, name: str, problems: list[str]) -> None:
        self.violations[name] = problems

    @property
    def passed(self) -> bool:
        return not any(self.violations.values())


def percentile(values: list[float], p: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(p / 100 * len(ordered)) - 1)]
