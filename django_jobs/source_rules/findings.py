"""What a source rule reports: a ``Finding``, of one of four kinds, one per thing a handler
must leave to a command."""

from __future__ import annotations

from dataclasses import dataclass

# The kinds of finding, one per thing a handler must leave to a command.
STORAGE = "storage"
SQL = "SQL"
HTTP = "HTTP"
LOCAL_TIME = "local time"


@dataclass(frozen=True)
class Finding:
    """One forbidden thing at ``line``; ``helper`` names the module function it is in when the
    handler reaches it through a call."""

    line: int
    what: str
    kind: str = ""
    helper: str = ""

    def __str__(self) -> str:
        where = f"line {self.line} in {self.helper}()" if self.helper else f"line {self.line}"
        return f"{where}: {self.what}"


def by_line(found: list[Finding]) -> list[Finding]:
    """``found`` in source order."""
    return sorted(found, key=lambda f: f.line)
