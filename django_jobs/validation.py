"""Rules for text that operators and declarations hand us, written once.

Declarations, services, the ``jobs`` command, the admin and the system checks check names,
reasons, drafts and other free text with these functions, so a rule changes in one place.
"""

from __future__ import annotations

import datetime as dt

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
