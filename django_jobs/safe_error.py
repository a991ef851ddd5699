"""What of a job's exception may be stored and shown to operators.

Only the exception's type and a bounded, single-paragraph message are kept: never a traceback,
never frame locals, never settings. (Secret redaction by configurable patterns comes with the
security work; until then the length bound and the absence of tracebacks are the guarantee.)
"""

from __future__ import annotations

from dataclasses import dataclass

_TYPE_MAX = 200


@dataclass(frozen=True)
class SafeError:
    type: str
    message: str

    @classmethod
    def from_exception(cls, exc: BaseException, *, max_chars: int) -> SafeError:
        kind = type(exc)
        name = (
            kind.__qualname__
            if kind.__module__ == "builtins"
            else f"{kind.__module__}.{kind.__qualname__}"
        )
        return cls(type=name[:_TYPE_MAX], message=bound(str(exc), max_chars))


def bound(text: str, max_chars: int) -> str:
    """`text` without control characters, cut to `max_chars` with a visible marker."""
    cleaned = "".join(ch if ch.isprintable() or ch in "\n\t" else "?" for ch in text)
    if len(cleaned) <= max_chars:
        return cleaned
    marker = "…[truncated]"
    return cleaned[: max(0, max_chars - len(marker))] + marker
