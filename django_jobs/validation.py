"""Rules for text that operators and declarations hand us, written once.

Declarations, services, the ``jobs`` command and the admin all check names, reasons and
other free text with these functions, so a rule changes in one place.
"""

from __future__ import annotations


def printable(text: str) -> bool:
    """Whether ``text`` is safe to store and log: PostgreSQL refuses NUL in text, and other
    control characters garble audit trails and log lines (newline and tab are allowed)."""
    return all(ch.isprintable() or ch in "\n\t" for ch in text)
