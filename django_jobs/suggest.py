""" "Did you mean": the known name closest to a misspelt one, for error messages."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def did_you_mean(word: str, known: Iterable[str]) -> str:
    """`` (did you mean 'orders.sync'?)`` when one of ``known`` is close to ``word``, else
    ``""``: appended to a message that already says ``word`` is unknown."""
    close = difflib.get_close_matches(word, list(known), n=1, cutoff=0.75)
    return f" (did you mean {close[0]!r}?)" if close else ""
