"""What of a job's exception may be stored, logged and shown to operators.

Only the exception's type and a bounded, single-paragraph message are kept: never a traceback,
never frame locals, never settings. Secrets in the message are replaced by ``[redacted]``
before it is bounded, stored or logged: credentials in URLs, ``password=``/``token=``-style
pairs (JSON-ish ones too), ``Authorization`` headers and common token shapes (AWS access key
ids, GitHub, Slack, JWTs, PEM private keys), plus the project's ``REDACT_PATTERNS``.

A pattern with named groups ``secret...`` has only those groups replaced (so
``password=[redacted]`` still says what was hidden); otherwise the whole match is.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass

REDACTED = "[redacted]"
_TYPE_MAX = 200
# Redaction scans at most this much of a message: a hostile message of megabytes costs no
# more than this, and whatever lies beyond is cut anyway.
_SCAN_MAX = 64 * 1024

_KEYS = (
    r"password|passwd|pwd|secret|token|api[_-]?key|apikey|access[_-]?key|private[_-]?key"
    r"|credentials?|session[_-]?id|cookie|auth"
)
_VALUE = r"""(?:"(?P<secret_dq>[^"\n]*)"?|'(?P<secret_sq>[^'\n]*)'?|(?P<secret>[^\s"',;&}\])>]+))"""

DEFAULT_PATTERNS: tuple[str, ...] = (
    # Credentials in a URL: scheme://user:password@host (the password; the last @ ends it).
    r"://[^\s:/?#@]*:(?P<secret>[^\s/?#]+)@",
    # Authorization: Bearer xxx (and Basic, Token, ...), as a header or a key-value pair.
    r"(?i)\b(?:proxy-)?authorization[\"']?\s{0,5}[:=]\s{0,5}[\"']?"
    r"(?:(?:bearer|basic|token|digest|negotiate)\s{1,5})?(?P<secret>[^\s\"',;]+)",
    r"(?i)\bbearer\s{1,5}(?P<secret>[A-Za-z0-9\-._~+/]{8,}=*)",
    # password=..., "api_key": "...", PGPASSWORD=..., token: ..., secret='...'
    rf"(?i)(?:{_KEYS})[\"']?\s{{0,5}}[:=]\s{{0,5}}{_VALUE}",
    # Token shapes, wherever they appear.
    r"(?<![A-Za-z0-9])(?:AKIA|ASIA)[0-9A-Z]{16}(?![0-9A-Z])",
    r"(?<![A-Za-z0-9_])gh[pousr]_[A-Za-z0-9]{20,255}",
    r"(?<![A-Za-z0-9_])github_pat_[A-Za-z0-9_]{20,255}",
    r"(?<![A-Za-z0-9-])xox[baprs]-[A-Za-z0-9-]{10,255}",
    r"(?<![A-Za-z0-9_-])eyJ[A-Za-z0-9_-]{5,}\.eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]*",
    r"(?<![A-Za-z0-9_])sk_(?:live|test)_[A-Za-z0-9]{16,255}",
    r"-----BEGIN [A-Z ]{0,40}PRIVATE KEY-----[\s\S]*?(?:-----END [A-Z ]{0,40}PRIVATE KEY-----|$)",
)


@functools.cache
def _compiled(patterns: tuple[str, ...]) -> tuple[re.Pattern[str], ...]:
    return tuple(re.compile(p) for p in patterns)


def _hide(match: re.Match[str]) -> str:
    spans = [
        match.span(name)
        for name, value in match.groupdict().items()
        if name.startswith("secret") and value is not None
    ]
    if not spans:
        return REDACTED
    text, start = match.group(0), match.start()
    out, last = [], 0
    for lo, hi in sorted(spans):
        out += [text[last : lo - start], REDACTED]
        last = hi - start
    return "".join([*out, text[last:]])


def redact(text: str, patterns: Iterable[str] = ()) -> str:
    """``text`` with every match of the default patterns and ``patterns`` hidden."""
    if len(text) > _SCAN_MAX:
        # Drop the last, possibly cut, word too: half a secret matches no pattern.
        text = text[:_SCAN_MAX].rsplit(maxsplit=1)[0] if text[:_SCAN_MAX].split() else ""
    for pattern in _compiled((*DEFAULT_PATTERNS, *patterns)):
        text = pattern.sub(_hide, text)
    return text


@dataclass(frozen=True)
class SafeError:
    type: str
    message: str

    @classmethod
    def from_exception(
        cls, exc: BaseException, *, max_chars: int, patterns: Iterable[str] = ()
    ) -> SafeError:
        """The exception's type and message, redacted (``patterns`` add to the defaults),
        then cut to ``max_chars``."""
        kind = type(exc)
        name = (
            kind.__qualname__
            if kind.__module__ == "builtins"
            else f"{kind.__module__}.{kind.__qualname__}"
        )
        patterns = tuple(patterns)
        return cls(
            type=bound(redact(name, patterns), _TYPE_MAX),
            message=bound(redact(_message(exc), patterns), max_chars),
        )

    def __str__(self) -> str:
        return f"{self.type}: {self.message}"


def loggable(
    error: BaseException | str, *, patterns: Iterable[str] = (), max_chars: int = 300
) -> str:
    """An error's text for a log line: redacted like a stored error, then bounded."""
    text = error if isinstance(error, str) else _message(error)
    return bound(redact(text.strip(), patterns), max_chars)


def _message(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception:  # a hostile __str__ must not turn a job failure into a crash
        return f"<{type(exc).__name__} whose message cannot be read>"


def bound(text: str, max_chars: int) -> str:
    """`text` without control characters, cut to `max_chars` with a visible marker."""
    cleaned = "".join(ch if ch.isprintable() or ch in "\n\t" else "?" for ch in text)
    if len(cleaned) <= max_chars:
        return cleaned
    marker = "…[truncated]"
    return cleaned[: max(0, max_chars - len(marker))] + marker
