"""Rules for text and arguments that operators and declarations hand us, written once.

Declarations, services, the ``jobs`` command, the admin and the system checks check names,
reasons, drafts, other free text and a job's arguments with these functions, so a rule
changes in one place.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from collections.abc import Iterable
from typing import Any

from .exceptions import JobsError

# The longest reason an audit record keeps (the admin's reason form, ``jobs --reason``).
REASON_MAX_CHARS = 2000


def storable(text: str) -> bool:
    """Whether PostgreSQL can store ``text``: it refuses NUL in text columns and parameters."""
    return "\x00" not in text


def printable(text: str, *, layout: bool = True) -> bool:
    """Whether ``text`` is safe to store and log: PostgreSQL refuses NUL in text, and other
    control characters garble audit trails and log lines. ``layout`` allows newline and tab
    (a reason may have several lines; a name or a key may not)."""
    if layout:
        text = text.replace("\n", "").replace("\t", "")
    return text.isprintable()


def text_problem(text: str, longest: int) -> str | None:
    """What makes ``text`` unfit for a record that holds at most ``longest`` characters of
    printable text, or None: the caller prefixes what the text is."""
    if len(text) > longest:
        return f"at most {longest} characters, got {len(text)}"
    if not printable(text):
        return "must not contain NUL or other control characters"
    return None


def need_reason(reason: object, what: str) -> str:
    """The reason an operator gave for ``what``, stripped; refused (``JobsError``) when it is
    missing, blank, too long for the audit record or not printable."""
    if not isinstance(reason, str) or not reason.strip():
        raise JobsError(f"{what}: reason: say why (it is kept in the audit record)")
    problem = text_problem(reason, REASON_MAX_CHARS)
    if problem is not None:
        raise JobsError(f"{what}: reason: {problem}")
    return reason.strip()


def draft_gaps(status: str, decider: object, decide_by: object) -> list[tuple[str, str]]:
    """What a draft leaves unnamed, as (field, message): a draft is a decision pending, so it
    names who decides (``decider``) and by when (``decide_by``). Empty for any other status."""
    if status != "draft":
        return []
    gaps = []
    if not isinstance(decider, str) or not decider.strip():
        gaps.append(("decider", "a draft must name a decider"))
    if not isinstance(decide_by, dt.date):
        gaps.append(("decide_by", "a draft must name a decide-by date"))
    return gaps


def draft_overdue(status: str, decide_by: object, today: dt.date) -> bool:
    """Whether a draft's decide-by date has passed (the decision it stands for is late)."""
    return status == "draft" and isinstance(decide_by, dt.date) and decide_by < today


# The largest arguments a schedule, or an operator's run-now, gives a job: compact JSON, in
# UTF-8 bytes. Each occurrence keeps a copy.
ARGS_MAX_BYTES = 16_384
# How deeply arguments may nest (objects and lists within each other).
ARGS_MAX_DEPTH = 32
_SCALARS = (str, int, float, bool, type(None))


def arguments(value: object) -> tuple[dict[str, Any], None] | tuple[None, str]:
    """``value`` as the arguments a record keeps, and ``None``; or ``None`` and what is wrong
    with it (the caller names the object and the field: ``args``).

    Arguments are a JSON object: ``str`` keys; values ``str``, ``int``, finite ``float``,
    ``bool``, ``None``, lists (or tuples) and objects of them; at most ``ARGS_MAX_BYTES`` as
    compact JSON. What is kept is what the database gives back (tuples become lists), so a
    record compares equal to its declaration. ``None`` is no arguments: ``{}``.
    """
    if value is None or value == {}:
        return {}, None
    if not isinstance(value, dict):
        return None, f"must be a JSON object (a dict with str keys), got {type(value).__name__}"
    return _bounded_json(value, "args", ARGS_MAX_BYTES, named_size="")


# What a handler may return (``Occurrence.result``): any JSON value, at most this large.
RESULT_MAX_BYTES = 65_536

# Priorities of jobs, schedules and enqueued work: Django's Tasks framework's range.
MIN_PRIORITY, MAX_PRIORITY = -100, 100


def result(value: object) -> tuple[Any, None] | tuple[None, str]:
    """A handler's return value as the completion keeps it, and ``None``; or ``None`` and what
    is wrong with it. Any JSON value (as ``arguments``' values), at most ``RESULT_MAX_BYTES``
    as compact JSON; what is kept is what the database gives back (tuples become lists)."""
    return _bounded_json(value, "result", RESULT_MAX_BYTES, named_size="result: ")


# The longest JSON text a user may type for arguments (a form, ``jobs run-now --args``):
# room for pretty-printed arguments of ``ARGS_MAX_BYTES``, and a bound on the nesting scan.
JSON_TEXT_MAX_CHARS = 8 * ARGS_MAX_BYTES


def json_text(text: str) -> tuple[Any, None] | tuple[None, str]:
    """JSON text a user typed, parsed, and ``None``; or ``None`` and what is wrong with it
    (the caller names the object and the field). Its nesting is counted before it is parsed,
    so text nested deeper than ``ARGS_MAX_DEPTH`` is refused by name, never by the parser's
    recursion (``RecursionError``); what the value may hold is ``arguments``' to say."""
    # The outermost object is depth 0; the scan reads no more than the longest text taken.
    if _nests_deeper(text[: JSON_TEXT_MAX_CHARS + 1], ARGS_MAX_DEPTH + 1):
        return None, f"nested more than {ARGS_MAX_DEPTH} levels deep"
    if len(text) > JSON_TEXT_MAX_CHARS:
        return None, f"at most {JSON_TEXT_MAX_CHARS} characters of JSON, got {len(text)}"
    try:
        return json.loads(text), None
    except ValueError as exc:
        return None, f"not JSON: {exc}"


def _nests_deeper(text: str, most: int) -> bool:
    """Whether ``text`` opens more than ``most`` brackets (``[`` ``{``) within each other,
    outside strings: one pass that stops at the first one too deep."""
    depth, in_string, escaped = 0, False, False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            if depth > most:
                return True
        elif ch in "]}":
            depth -= 1
    return False


def _bounded_json(
    value: object, path: str, most: int, *, named_size: str
) -> tuple[Any, None] | tuple[None, str]:
    """``value`` as the database gives it back, and ``None``; or ``None`` and what JSON (or
    jsonb) cannot hold in it, found at ``path``, or that it is over ``most`` bytes as compact
    JSON (that message starts with ``named_size``)."""
    problem = _json_problem(value, path, depth=0)
    if problem is not None:
        return None, problem
    encoded = json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    size = len(encoded.encode())
    if size > most:
        return None, f"{named_size}at most {most} bytes as JSON, got {size}"
    return json.loads(encoded), None


def priority(value: object) -> str | None:
    """What is wrong with ``value`` as a priority, or None."""
    if not isinstance(value, int) or isinstance(value, bool):
        return f"must be an int, got {type(value).__name__}"
    if not MIN_PRIORITY <= value <= MAX_PRIORITY:
        return f"must be from {MIN_PRIORITY} to {MAX_PRIORITY}, got {value}"
    return None


def _json_problem(value: object, path: str, *, depth: int) -> str | None:
    """What in ``value`` (found at ``path``) JSON or PostgreSQL's jsonb cannot hold, or None."""
    if depth > ARGS_MAX_DEPTH:
        return f"{path}: nested more than {ARGS_MAX_DEPTH} levels deep"
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                return f"{path}: keys must be str, got {type(key).__name__} {key!r}"
            problem = _json_problem(item, f"{path}[{key!r}]", depth=depth + 1)
            if problem is not None:
                return problem
        return _nul_problem(value.keys(), path)
    if isinstance(value, list | tuple):
        for n, item in enumerate(value):
            problem = _json_problem(item, f"{path}[{n}]", depth=depth + 1)
            if problem is not None:
                return problem
        return None
    if not isinstance(value, _SCALARS):
        return (
            f"{path}: must be JSON (str, int, float, bool, None, list or dict), got "
            f"{type(value).__name__}"
        )
    if isinstance(value, float) and not math.isfinite(value):
        return f"{path}: must be a finite number, got {value!r}"
    return _nul_problem([value], path)


def _nul_problem(values: Iterable[object], path: str) -> str | None:
    """PostgreSQL's jsonb refuses NUL in its strings (keys too)."""
    if any(isinstance(v, str) and not storable(v) for v in values):
        return f"{path}: must not contain NUL characters"
    return None
