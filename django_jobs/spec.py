"""What a valid schedule record is, said once: ``ScheduleSpec`` and its ``problems()``.

A declaration (``schedule(...)``), a job's policies (``@job(...)``, the Tasks backend's
``OPTIONS``), the console's form and ``upsert_schedule`` (through a declaration), the
planner's check of a stored row (``check_row``) and the system checks all build a spec of
what they hold and ask it; each only says which field of its own input a problem belongs to
(``schedule()`` and ``@job`` take ``retry=Retry(...)``: ``RETRY_FIELDS``). Every bound and
message is here, or taken from the pure module that holds it: ``scheduling.policies``
(``MAX_DURATION``, and the retry columns' rules, which the public ``Retry.problems()`` asks
too), ``scheduling.planner`` (``MAX_CATCHUP``), ``validation`` (priority, arguments). Pure: no
clock, no database.

A spec holds the record's stored columns, each as given (nothing is trusted yet); a column an
entry point does not hold is ``NOT_GIVEN`` and is not checked (the planner checks only what
it plans with). ``ScheduleSpec.of`` takes the declared shapes: a ``Retry`` for the three
retry columns, a retention that is a duration (``keep_for``) or a count (``keep_last``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Final

from .scheduling.planner import MAX_CATCHUP
from .scheduling.policies import MAX_ATTEMPTS as MAX_ATTEMPTS  # re-exported
from .scheduling.policies import (
    MAX_DURATION,
    Misfire,
    Overlap,
    Retry,
    TimingKind,
    attempts_problem,
    backoff_problem,
)
from .scheduling.timing import InvalidTiming
from .validation import arguments, draft_gaps, printable
from .validation import priority as priority_problem

KEY_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/-]{0,199}$")
TENANT_PATTERN = re.compile(r"^[A-Za-z0-9._:-]{0,100}$")
# A queue's name (``schedule(queue=)``, ``@job(queue=)``, ``enqueue(queue=)``, ``runworker
# --queue``): what an occurrence is claimed by. Without one, work is on ``DEFAULT_QUEUE``.
QUEUE_PATTERN = re.compile(r"^[A-Za-z0-9_.-]{1,100}$")
DEFAULT_QUEUE = "default"
STATUSES = ("draft", "active", "retired")
# The longest a count-based retention (``keep_last``) may keep.
MAX_KEEP_LAST = 100_000_000
# The longest text column a name (an owner, a decider, a job) is kept in.
MAX_NAME_CHARS = 200

# Where ``schedule(...)`` and ``@job(...)`` name the retry columns: ``retry=Retry(...)``.
RETRY_FIELDS: Final = {
    "max_attempts": "retry.max_attempts",
    "backoff": "retry.backoff",
    "max_backoff": "retry.max_backoff",
}


class _NotGiven:
    """A column the entry point does not hold: not checked."""

    def __repr__(self) -> str:
        return "NOT_GIVEN"


NOT_GIVEN: Final[Any] = _NotGiven()

_MISFIRES, _OVERLAPS = frozenset(Misfire), frozenset(Overlap)
_PLANNED_KINDS = frozenset(TimingKind) - {TimingKind.ENQUEUED}


@dataclass(frozen=True, slots=True)
class ScheduleSpec:
    """A schedule record's columns as given, in the order ``problems()`` reports them."""

    key: object = NOT_GIVEN
    tenant: object = NOT_GIVEN
    job: object = NOT_GIVEN
    # The timing value (``cron(...)``, ``every(...)``...): its columns are its own to check
    # (``validate()``); a stored row's are checked where it is read back.
    timing: object = NOT_GIVEN
    operating_owner: object = NOT_GIVEN
    record_owner: object = NOT_GIVEN
    decider: object = NOT_GIVEN
    status: object = NOT_GIVEN
    decide_by: object = NOT_GIVEN
    max_delay: object = NOT_GIVEN
    timeout: object = NOT_GIVEN
    misfire: object = NOT_GIVEN
    overlap: object = NOT_GIVEN
    max_catchup: object = NOT_GIVEN
    priority: object = NOT_GIVEN
    queue: object = NOT_GIVEN
    # ``retry=`` given as something other than ``Retry(...)`` (``of``): refused as such.
    retry: object = NOT_GIVEN
    max_attempts: object = NOT_GIVEN
    backoff: object = NOT_GIVEN
    max_backoff: object = NOT_GIVEN
    # The retention Limit: a duration, or a count of occurrences; at least one of them.
    keep_for: object = NOT_GIVEN
    keep_last: object = NOT_GIVEN
    args: object = NOT_GIVEN

    @classmethod
    def of(
        cls, *, retry: object = NOT_GIVEN, retention: object = NOT_GIVEN, **columns: Any
    ) -> ScheduleSpec:
        """A spec from what ``schedule(...)`` and ``@job(...)`` take: ``retry`` a ``Retry``,
        ``retention`` a duration (kept for) or a count (kept last); the other columns as
        named."""
        if isinstance(retry, Retry):
            columns.update(
                max_attempts=retry.max_attempts,
                backoff=retry.backoff,
                max_backoff=retry.max_backoff,
            )
        elif retry is not NOT_GIVEN:
            columns["retry"] = retry
        if retention is not NOT_GIVEN:
            counted = isinstance(retention, int) and not isinstance(retention, bool)
            columns["keep_last" if counted else "keep_for"] = retention
        return cls(**columns)

    def problems(self) -> list[tuple[str, str]]:
        """(field, message) for every column given that a record may not hold, in the order
        a declaration names them; empty when valid. The retention Limit is reported as
        ``retention``, a timing's own columns as ``timing.<field>``."""
        found = self._failing(_NAMING)
        if self.timing is not NOT_GIVEN and not _is_timing(self.timing):
            found.append(("timing", _not_a_timing(self.timing)))
        found += self._failing(_PEOPLE)
        if self.status is not NOT_GIVEN:
            found += draft_gaps(self.status, self.decider, self.decide_by)  # type: ignore[arg-type]
        found += self._failing(_POLICIES)
        found += self._kept_problems()
        if self.timing is not NOT_GIVEN and _is_timing(self.timing):
            found += _timing_problems(self.timing)
        if self.args is not NOT_GIVEN and (problem := arguments(self.args)[1]) is not None:
            found.append(("args", problem))
        return found

    def _failing(self, rules: _Rules) -> list[tuple[str, str]]:
        """(field, message) of each column of ``rules`` given whose rule refuses it."""
        found = []
        for name, rule in rules:
            value = getattr(self, name)
            if value is not NOT_GIVEN and (message := rule(value)) is not None:
                found.append((name, message))
        return found

    def _kept_problems(self) -> list[tuple[str, str]]:
        """Retention: a positive duration of at most ``MAX_DURATION`` or a positive count of
        at most ``MAX_KEEP_LAST``, one of them at least."""
        keep_for, keep_last = self.keep_for, self.keep_last
        if keep_for is NOT_GIVEN and keep_last is NOT_GIVEN:
            return []
        given = [v for v in (keep_for, keep_last) if v is not NOT_GIVEN and v is not None]
        bad = next((v for v in given if not _kept(v)), NOT_GIVEN) if given else None
        if bad is NOT_GIVEN:
            return []
        return [
            (
                "retention",
                f"must be a positive timedelta (keep for, at most {MAX_DURATION.days} days) or "
                f"a positive count (keep last, at most {MAX_KEEP_LAST}), got {bad!r}",
            )
        ]


def _is_timing(value: object) -> bool:
    """Whether ``value`` is a timing of a planned kind (not a job's policy record)."""
    kind = getattr(value, "kind", None)
    return isinstance(kind, TimingKind) and kind in _PLANNED_KINDS and hasattr(value, "validate")


def _not_a_timing(value: object) -> str:
    return f"must be cron(...), rrule(...), every(...), at(...) or after(...), got {value!r}"


def _timing_problems(timing: Any) -> list[tuple[str, str]]:
    """What a timing's own ``validate()`` refuses, as (``timing.<field>``, message)."""
    try:
        timing.validate()
    except InvalidTiming as exc:
        return [(exc.field, exc.message)]
    return []


def _text(value: object, *, most: int = MAX_NAME_CHARS) -> bool:
    """Text a record column can hold: PostgreSQL refuses NUL, and control characters (a
    newline too: these are names, not prose) would garble the admin, logs and audit trail."""
    return isinstance(value, str) and len(value) <= most and printable(value, layout=False)


def _count(value: object, least: int, most: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and least <= value <= most


def _duration(value: object, *, zero: bool) -> bool:
    least = timedelta(0)
    return (
        isinstance(value, timedelta)
        and (least <= value if zero else least < value)
        and (value <= MAX_DURATION)
    )


def _kept(value: object) -> bool:
    return _duration(value, zero=False) or _count(value, 1, MAX_KEEP_LAST)


def _key(value: object) -> str | None:
    if isinstance(value, str) and KEY_PATTERN.fullmatch(value):
        return None
    return "must be 1-200 letters, digits and . _ : / -, starting with a letter or digit"


def _tenant(value: object) -> str | None:
    if isinstance(value, str) and TENANT_PATTERN.fullmatch(value):
        return None
    return "must be at most 100 characters of letters, digits and . _ : -"


def queue_problem(value: object) -> str | None:
    """What is wrong with ``value`` as a queue's name, or None."""
    if isinstance(value, str) and QUEUE_PATTERN.fullmatch(value):
        return None
    return f"must be 1-100 letters, digits and _ . -, got {value!r}"


def _job(value: object) -> str | None:
    if _text(value) and value and value == value.strip():  # type: ignore[attr-defined]
        return None
    return "must name a registered @job (1-200 printable characters, no surrounding spaces)"


def _owner(who: str) -> Callable[[object], str | None]:
    def rule(value: object) -> str | None:
        if _text(value) and value.strip():  # type: ignore[attr-defined]
            return None
        return f"is required: 1-{MAX_NAME_CHARS} printable characters naming {who}"

    return rule


def _decider(value: object) -> str | None:
    return None if _text(value) else f"must be at most {MAX_NAME_CHARS} printable characters"


def _status(value: object) -> str | None:
    if value in STATUSES:
        return None
    return f"must be one of {', '.join(STATUSES)}, got {value!r}"


def _positive_duration(value: object) -> str | None:
    if _duration(value, zero=False):
        return None
    return f"must be a positive timedelta of at most {MAX_DURATION.days} days, got {value!r}"


def _policy(policy: type[Misfire] | type[Overlap]) -> Callable[[object], str | None]:
    members = _MISFIRES if policy is Misfire else _OVERLAPS

    def rule(value: object) -> str | None:
        if value in members:
            return None
        return f"must be one of {', '.join(m.value for m in policy)}, got {value!r}"

    return rule


def _max_catchup(value: object) -> str | None:
    if _count(value, 0, MAX_CATCHUP):
        return None
    return f"must be a whole number from 0 to {MAX_CATCHUP}, got {value!r}"


def _retry(value: object) -> str | None:
    return f"must be Retry(...), got {value!r}"


# Each column's rule, in the order ``problems`` reports them: who and what the record is,
# then (after the draft's decider and date) its policies; the retention Limit, the timing's
# own columns and the arguments follow.
_Rules = tuple[tuple[str, Callable[[object], str | None]], ...]
_NAMING: _Rules = (("key", _key), ("tenant", _tenant), ("job", _job))
_PEOPLE: _Rules = (
    ("operating_owner", _owner("who runs it in production")),
    ("record_owner", _owner("who answers for the record")),
    ("decider", _decider),
    ("status", _status),
)
_POLICIES: _Rules = (
    ("max_delay", _positive_duration),
    ("timeout", _positive_duration),
    ("misfire", _policy(Misfire)),
    ("overlap", _policy(Overlap)),
    ("max_catchup", _max_catchup),
    ("priority", priority_problem),
    ("queue", queue_problem),
    ("retry", _retry),
    ("max_attempts", attempts_problem),
    ("backoff", backoff_problem),
    ("max_backoff", backoff_problem),
)
_RULE_OF = dict(_NAMING + _PEOPLE + _POLICIES)


def column_problem(column: str, value: object) -> str | None:
    """What ``problems()`` says of ``value`` in ``column`` (one of the columns with a rule of
    their own, not the retention, timing or arguments), or None: for the planner's check of
    each row it plans, which builds no spec (``worker/planning.check_row``)."""
    return _RULE_OF[column](value)


# Record defaults: ``DJANGO_JOBS["DEFAULTS"]`` completes what a declaration leaves out, so
# ``schedule("orders.sync", job="orders.sync", timing=every(minutes=5))`` is a whole record.
# These fields may be given there; a record's name, job, timing, tenant and arguments may not.
DEFAULTABLE: Final = (
    "operating_owner",
    "record_owner",
    "status",
    "decider",
    "retention",
    "max_delay",
    "misfire",
    "max_catchup",
    "overlap",
    "retry",
    "timeout",
    "priority",
)
# What every record holds and nothing but the declaration or the project's defaults gives.
REQUIRED: Final = ("operating_owner", "record_owner", "status", "retention")


def defaults_problems(defaults: object) -> list[tuple[str, str]]:
    """(field, message) for what ``DJANGO_JOBS["DEFAULTS"]`` may not hold: a field no default
    may give, or a value the record's own rule refuses (a draft's decider and date are each
    declaration's to give)."""
    if not isinstance(defaults, dict) or not all(isinstance(k, str) for k in defaults):
        return [("", f"must be a dict of schedule() fields, got {defaults!r}")]
    unknown = sorted(set(defaults) - set(DEFAULTABLE))
    if unknown:
        from .suggest import did_you_mean

        return [
            (
                name,
                "is not a field a default may give"
                + (did_you_mean(name, DEFAULTABLE) or f"; those are {', '.join(DEFAULTABLE)}"),
            )
            for name in unknown
        ]
    found = ScheduleSpec.of(**defaults).problems()
    drafts = {"decider", "decide_by"} - set(defaults)
    return [
        (RETRY_FIELDS.get(name, name), message) for name, message in found if name not in drafts
    ]


def completed(given: dict[str, Any], defaults: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """``given`` (a declaration's fields, ``NOT_GIVEN`` where left out) completed from
    ``defaults``; and the ``REQUIRED`` fields neither gives, in that order."""
    whole = {
        name: defaults.get(name, NOT_GIVEN) if value is NOT_GIVEN else value
        for name, value in given.items()
    }
    return whole, [name for name in REQUIRED if whole.get(name, NOT_GIVEN) is NOT_GIVEN]
