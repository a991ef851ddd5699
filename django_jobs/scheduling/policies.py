"""The policies a schedule record names. Values are stored on ``Schedule`` rows as text."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import timedelta

# The longest duration a schedule field may name (intervals, delays, timeouts, backoff,
# retention): a century, so that an instant plus any of them stays a valid datetime.
MAX_DURATION = timedelta(days=36525)
# The most attempts an occurrence may be given (a bounded retry budget).
MAX_ATTEMPTS = 10_000


class Misfire(enum.StrEnum):
    """What happens to occurrences found later than their schedule's ``max_delay``."""

    SKIP = "skip"
    """Record each missed occurrence as skipped (reason ``misfire``) and run none of them."""
    REPLAY_ONCE = "replay_once"
    """Run the most recent missed occurrence; record the others as skipped."""
    REPLAY_ALL = "replay_all"
    """Run the most recent ``max_catchup`` missed occurrences oldest first; skip older ones."""


class Overlap(enum.StrEnum):
    """What happens to an occurrence due while the previous one of its schedule still runs."""

    SKIP = "skip"
    """Record it as skipped (reason ``overlap``)."""
    QUEUE = "queue"
    """Leave it waiting; it runs once the previous one has ended."""
    ALLOW = "allow"
    """Run it alongside."""


class SkippedTime(enum.StrEnum):
    """What a local time that does not exist (spring forward) does."""

    SHIFT = "shift"
    """Run at the first instant after the gap (02:30 on a 02:00→03:00 night runs at 03:00)."""
    SKIP = "skip"
    """Do not run for that local time."""


class RepeatedTime(enum.StrEnum):
    """What a local time that occurs twice (fall back) does."""

    FIRST = "first"
    """Run at the first (earlier) of the two instants."""
    LAST = "last"
    """Run at the second (later) of the two instants."""
    BOTH = "both"
    """Run at both instants: two occurrences with two identities."""


class TimingKind(enum.StrEnum):
    CRON = "cron"
    INTERVAL = "interval"
    AT = "at"
    AFTER = "after"
    RRULE = "rrule"
    # No timing: the policy record of a job's enqueued work (``enqueue()``), never planned.
    ENQUEUED = "enqueued"


class OnExcluded(enum.StrEnum):
    """What an occurrence of a calendar rule (``rrule(..., exclude=...)``) does when its local
    date is excluded (a holiday, a weekend)."""

    SKIP = "skip"
    """Do not run; the planner records it as skipped (reason ``excluded``)."""
    NEXT = "next"
    """Run on the next date that is not excluded, at the same local time."""
    PREVIOUS = "previous"
    """Run on the previous date that is not excluded, at the same local time."""


@dataclass(frozen=True)
class Retry:
    """Bounded attempts with capped exponential backoff and jitter.

    Attempt ``n`` (n >= 1) that fails waits ``min(backoff * 2**(n-1), max_backoff)``, scaled
    by a random factor in [0.5, 1], before attempt ``n+1``; after ``max_attempts`` failed
    attempts the occurrence is dead. Its bounds are a record's (``django_jobs/spec.py``).
    """

    max_attempts: int = 3
    backoff: timedelta = timedelta(seconds=30)
    max_backoff: timedelta = timedelta(minutes=10)

    def problems(self) -> list[tuple[str, str]]:
        """(field, message) for each invalid part, named as ``schedule(...)`` and ``@job``
        take it (``retry.max_attempts``, ``retry.backoff``, ``retry.max_backoff``); empty
        when valid. The spec of a record (``spec.py``) says the same of these columns: it
        asks these rules (here, so that this pure layer need not import the spec)."""
        found = []
        for name, rule in (
            ("max_attempts", attempts_problem),
            ("backoff", backoff_problem),
            ("max_backoff", backoff_problem),
        ):
            if (message := rule(getattr(self, name))) is not None:
                found.append((f"retry.{name}", message))
        return found


def attempts_problem(value: object) -> str | None:
    """What is wrong with ``value`` as a record's ``max_attempts``, or None."""
    if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_ATTEMPTS:
        return None
    return f"must be a whole number from 1 to {MAX_ATTEMPTS}, got {value!r}"


def backoff_problem(value: object) -> str | None:
    """What is wrong with ``value`` as a record's ``backoff`` or ``max_backoff``, or None."""
    if isinstance(value, timedelta) and timedelta(0) <= value <= MAX_DURATION:
        return None
    return f"must be a timedelta of 0 or more, at most {MAX_DURATION.days} days, got {value!r}"


def choices(policy: type[enum.StrEnum]) -> list[tuple[str, str]]:
    """Django ``choices`` for a policy enum."""
    return [(member.value, member.value.replace("_", " ")) for member in policy]
