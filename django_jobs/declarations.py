"""Schedule declarations: ``schedule(...)`` in an app's ``schedules.py``, apart from the jobs.

A declaration names every field of the schedule record. It is validated when it is made, and
``manage.py jobs sync`` (also run by the worker at start) writes it to a ``Schedule`` row.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from .exceptions import ConfigurationError
from .registry import Departure
from .scheduling.policies import MAX_DURATION, Misfire, Overlap, Retry
from .scheduling.rrules import RRule
from .scheduling.timings import After, At, Cron, Every, InvalidTiming, Timing
from .validation import arguments, draft_gaps, printable
from .validation import priority as priority_problem

KEY_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/-]{0,199}$")
TENANT_PATTERN = re.compile(r"^[A-Za-z0-9._:-]{0,100}$")
STATUSES = ("draft", "active", "retired")
MAX_KEEP_LAST = 100_000_000


class InvalidSchedule(ConfigurationError):
    """A schedule declaration or record is invalid. The message names the schedule and field."""

    def __init__(self, key: object, field_name: str, message: str) -> None:
        super().__init__(f"schedule {key!r}: {field_name}: {message}")
        self.key = key
        self.field = field_name
        self.detail = message


@dataclass(frozen=True)
class Declaration:
    """One schedule record as declared. Build it with ``schedule()``, which validates it."""

    key: str
    job: str
    timing: Timing
    operating_owner: str
    record_owner: str
    status: str
    retention: timedelta | int
    tenant: str = ""
    max_delay: timedelta = timedelta(minutes=5)
    misfire: Misfire = Misfire.SKIP
    max_catchup: int = 100
    overlap: Overlap = Overlap.SKIP
    retry: Retry = field(default_factory=Retry)
    timeout: timedelta = timedelta(minutes=15)
    decider: str = ""
    decide_by: dt.date | None = None
    # What the job is run for (``Run.args``): a JSON object, as the record keeps it. Not
    # hashed (a dict is not hashable); compared like every other field.
    args: dict[str, Any] = field(default_factory=dict, hash=False)
    # Claims take higher priority first (docs/enqueue.md#priority): -100 to 100.
    priority: int = 0
    # Where it was declared (the module that called ``schedule()``), and a recorded departure
    # from keeping schedules apart from behaviour (rule ``separation``): not part of the record.
    module: str = field(default="", compare=False)
    departure: Departure | None = field(default=None, compare=False)

    @property
    def label(self) -> str:
        """How the schedule is named to people: ``tenant/key``, or the key alone."""
        return f"{self.tenant}/{self.key}" if self.tenant else self.key

    def limit_fields(self) -> dict[str, Any]:
        if isinstance(self.retention, timedelta):
            return {"keep_for": self.retention, "keep_last": None}
        return {"keep_for": None, "keep_last": self.retention}

    def record_fields(self) -> dict[str, Any]:
        """The ``Schedule`` columns this declaration sets (timing included)."""
        return {
            "job": self.job,
            **self.timing.record_fields(),
            "max_delay": self.max_delay,
            "misfire": self.misfire.value,
            "max_catchup": self.max_catchup,
            "overlap": self.overlap.value,
            "max_attempts": self.retry.max_attempts,
            "backoff": self.retry.backoff,
            "max_backoff": self.retry.max_backoff,
            "timeout": self.timeout,
            "operating_owner": self.operating_owner,
            "record_owner": self.record_owner,
            "status": self.status,
            "decider": self.decider,
            "decide_by": self.decide_by,
            "args": self.args,
            "priority": self.priority,
        }


_TIMINGS = (Cron, RRule, Every, At, After)


def _text(value: object, max_chars: int = 200) -> bool:
    """Text a record column can hold: PostgreSQL refuses NUL, and control characters (a
    newline too: these are names, not prose) would garble the admin, logs and audit trail."""
    return isinstance(value, str) and len(value) <= max_chars and printable(value, layout=False)


# A rule's message, or what makes it: a message that shows the value is formatted only for a
# rule that fails (a sync of thousands of declarations validates every one at import).
Message = str | Callable[[], str]
_MISFIRES, _OVERLAPS = frozenset(Misfire), frozenset(Overlap)


def _failing(rules: list[tuple[bool, str, Message]]) -> list[tuple[str, str]]:
    """The (field, message) of each rule (ok, field, message) that does not hold."""
    return [(name, m if isinstance(m, str) else m()) for ok, name, m in rules if not ok]


def _problems(d: Declaration) -> list[tuple[str, str]]:
    """(field, message) for every invalid field of ``d``, in the order fields are declared."""
    status = (
        d.status in STATUSES,
        "status",
        lambda: f"must be one of {', '.join(STATUSES)}, got {d.status!r}",
    )
    return [
        *_failing([*_naming_rules(d), status]),
        *draft_gaps(d.status, d.decider, d.decide_by),
        *_failing(_policy_rules(d)),
        *_keeping_problems(d),
    ]


def _naming_rules(d: Declaration) -> list[tuple[bool, str, Message]]:
    """The key, tenant, job, timing and the people a declaration names."""
    owners = [
        (
            _text(value := getattr(d, owner)) and bool(value.strip()),
            owner,
            "is required (1-200 printable characters): who runs it in production / who "
            "answers for the record",
        )
        for owner in ("operating_owner", "record_owner")
    ]
    return [
        (
            isinstance(d.key, str) and bool(KEY_PATTERN.fullmatch(d.key)),
            "key",
            "must be 1-200 letters, digits and . _ : / -, starting with a letter or digit",
        ),
        (
            isinstance(d.tenant, str) and bool(TENANT_PATTERN.fullmatch(d.tenant)),
            "tenant",
            "must be at most 100 characters of letters, digits and . _ : -",
        ),
        (
            _text(d.job) and bool(d.job) and d.job == d.job.strip(),
            "job",
            "must name a registered @job (1-200 printable characters, no surrounding spaces)",
        ),
        (
            isinstance(d.timing, _TIMINGS),
            "timing",
            lambda: (
                "must be cron(...), rrule(...), every(...), at(...) or after(...), "
                f"got {d.timing!r}"
            ),
        ),
        *owners,
        (_text(d.decider), "decider", "must be at most 200 printable characters"),
    ]


def _policy_rules(d: Declaration) -> list[tuple[bool, str, Message]]:
    """The durations and policies: delay, timeout, misfire, overlap, catch-up."""
    durations = [
        (
            isinstance(value := getattr(d, name), timedelta)
            and timedelta(0) < value <= MAX_DURATION,
            name,
            lambda value=value: (  # bound now: the comprehension rebinds ``value``
                f"must be a positive timedelta of at most {MAX_DURATION.days} days, got {value!r}"
            ),
        )
        for name in ("max_delay", "timeout")
    ]
    return [
        *durations,
        (
            d.misfire in _MISFIRES,
            "misfire",
            lambda: f"must be one of {', '.join(m.value for m in Misfire)}, got {d.misfire!r}",
        ),
        (
            d.overlap in _OVERLAPS,
            "overlap",
            lambda: f"must be one of {', '.join(m.value for m in Overlap)}, got {d.overlap!r}",
        ),
        (
            isinstance(d.max_catchup, int)
            and not isinstance(d.max_catchup, bool)
            and 0 <= d.max_catchup <= 10_000,
            "max_catchup",
            lambda: f"must be a whole number from 0 to 10000, got {d.max_catchup!r}",
        ),
        (
            priority_problem(d.priority) is None,
            "priority",
            lambda: str(priority_problem(d.priority)),
        ),
    ]


def _keeping_problems(d: Declaration) -> list[tuple[str, str]]:
    """Retries and retention."""
    found = (
        list(d.retry.problems())
        if isinstance(d.retry, Retry)
        else [("retry", f"must be Retry(...), got {d.retry!r}")]
    )
    retention_ok = (
        isinstance(d.retention, timedelta) and timedelta(0) < d.retention <= MAX_DURATION
    ) or (
        isinstance(d.retention, int)
        and not isinstance(d.retention, bool)
        and 0 < d.retention <= MAX_KEEP_LAST
    )
    if not retention_ok:
        found.append(
            (
                "retention",
                f"must be a positive timedelta (keep for, at most {MAX_DURATION.days} days) or "
                f"a positive count (keep last, at most {MAX_KEEP_LAST}), got {d.retention!r}",
            )
        )
    return found


SKIPPED_CHOICES = "'shift' (run at the first instant after the gap) or 'skip' (do not run that day)"
REPEATED_CHOICES = (
    "'first' (run once, at the first of the two), 'last' (once, at the second) or 'both' (twice)"
)


def local_time_gaps(timing: Timing) -> list[tuple[str, str]]:
    """What a business-local (non-UTC) wall-clock timing (``cron``, ``rrule``: any
    ``Timing.local``) leaves unsaid, as (field, message): its reason, and its explicit DST
    choices. Empty for UTC and for elapsed-time timings."""
    if not timing.local:
        return []
    gaps = []
    if not timing.reason:
        maker = timing.kind  # a wall-clock kind's maker is named for it: cron(), rrule()
        gaps.append(
            (
                "timing.reason",
                f"a schedule in {timing.zone} (not UTC) says why: {maker}(..., reason='...'), "
                "for example 'statements go out at 09:00 for readers in New York'",
            )
        )
    if "skipped" not in timing.chosen:
        gaps.append(
            (
                "timing.skipped",
                f"choose what a local time that does not exist in {timing.zone} (spring "
                f"forward) does: skipped={SKIPPED_CHOICES}",
            )
        )
    if "repeated" not in timing.chosen:
        gaps.append(
            (
                "timing.repeated",
                f"choose what a local time that occurs twice in {timing.zone} (fall back) "
                f"does: repeated={REPEATED_CHOICES}",
            )
        )
    return gaps


def _first_problem(d: Declaration) -> tuple[str, str] | None:
    """The first (field, message) wrong with ``d``: its departure, then its fields, then (once
    those hold) what its timing refuses."""
    problems = _problems(d)
    if d.departure is not None and (
        not isinstance(d.departure, Departure) or d.departure.rule != "separation"
    ):
        return (
            "departure",
            "a schedule records a Departure(..., rule='separation') from being declared "
            f"in a schedules module, got {d.departure!r}",
        )
    if problems:
        return problems[0]
    try:
        d.timing.validate()
    except InvalidTiming as exc:
        return (exc.field, exc.message)
    return None


def schedule(
    key: str,
    *,
    job: str,
    timing: Timing,
    operating_owner: str,
    record_owner: str,
    status: str,
    retention: timedelta | int,
    tenant: str = "",
    max_delay: timedelta = timedelta(minutes=5),
    misfire: Misfire | str = Misfire.SKIP,
    max_catchup: int = 100,
    overlap: Overlap | str = Overlap.SKIP,
    retry: Retry | None = None,
    timeout: timedelta = timedelta(minutes=15),
    decider: str = "",
    decide_by: dt.date | None = None,
    args: dict[str, Any] | None = None,
    priority: int = 0,
    register: bool = True,
    departure: Departure | None = None,
) -> Declaration:
    """Declare a schedule record; see docs/schedules.md for every field and its default.

    Raises ``InvalidSchedule`` naming the schedule and the first invalid field. With
    ``register`` (the default, for ``schedules.py`` modules) the declaration is added to the
    set that ``manage.py jobs sync`` writes.
    """
    # An unknown policy value stays as given and is reported below with the other problems.
    with contextlib.suppress(ValueError):
        misfire = Misfire(misfire)
    with contextlib.suppress(ValueError):
        overlap = Overlap(overlap)
    kept_args, args_problem = arguments(args)
    declaration = Declaration(
        key=key,
        job=job,
        timing=timing,
        operating_owner=operating_owner,
        record_owner=record_owner,
        status=status,
        retention=retention,
        tenant=tenant,
        max_delay=max_delay,
        misfire=misfire,  # type: ignore[arg-type]
        max_catchup=max_catchup,
        overlap=overlap,  # type: ignore[arg-type]
        retry=retry if retry is not None else Retry(),
        timeout=timeout,
        decider=decider,
        decide_by=decide_by,
        args=kept_args if kept_args is not None else {},
        priority=priority,
        module=sys._getframe(1).f_globals.get("__name__", ""),
        departure=departure,
    )
    problem = _first_problem(declaration) or (("args", args_problem) if args_problem else None)
    if problem is not None:
        raise InvalidSchedule(key, *problem)
    if register:
        declared.add(declaration)
    return declaration


class Declared:
    """The declarations made by ``schedules.py`` modules, by (tenant, key)."""

    def __init__(self) -> None:
        self._items: dict[tuple[str, str], Declaration] = {}

    def add(self, declaration: Declaration) -> None:
        ident = (declaration.tenant, declaration.key)
        existing = self._items.get(ident)
        if existing is not None and existing != declaration:
            raise InvalidSchedule(
                declaration.key, "key", "is declared twice with different fields; keys are unique"
            )
        self._items[ident] = declaration

    def remove(self, tenant: str, key: str) -> None:
        self._items.pop((tenant, key), None)

    def all(self) -> list[Declaration]:
        return [self._items[k] for k in sorted(self._items)]

    def get(self, tenant: str, key: str) -> Declaration | None:
        """The declaration of (tenant, key) this process imported, if any."""
        return self._items.get((tenant, key))


declared = Declared()
