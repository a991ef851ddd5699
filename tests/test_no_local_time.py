"""Production code never reads machine-local or naive time, nor TIME_ZONE."""

from __future__ import annotations

import ast
from pathlib import Path

import django_jobs

SOURCE = Path(django_jobs.__file__).parent

# (receiver, attribute) pairs that read the host's local or naive time.
FORBIDDEN_CALLS = {
    ("datetime", "utcnow"),
    ("datetime", "today"),
    ("date", "today"),
    ("time", "localtime"),
    ("time", "mktime"),
    ("time", "ctime"),
    ("time", "strftime"),
    ("timezone", "localtime"),
    ("timezone", "localdate"),
    ("timezone", "get_current_timezone"),
    ("datetime", "utcfromtimestamp"),
}


def _receiver(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


def local_time_reads(source: str) -> list[str]:
    """Return a description of each machine-local time read in ``source``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr == "TIME_ZONE":
            found.append(f"line {node.lineno}: reads TIME_ZONE")
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        pair = (_receiver(node.func.value), node.func.attr)
        has_tz = bool(node.keywords) or len(node.args) >= (2 if pair[1] == "fromtimestamp" else 1)
        if pair in FORBIDDEN_CALLS:
            found.append(f"line {node.lineno}: {pair[0]}.{pair[1]}()")
        elif pair[1] in {"now", "fromtimestamp"} and pair[0] in {"datetime", "date"} and not has_tz:
            found.append(f"line {node.lineno}: naive {pair[0]}.{pair[1]}()")
    return found


def test_the_scanner_finds_each_kind_of_local_time_read() -> None:
    sample = "\n".join(
        [
            "datetime.now()",
            "datetime.datetime.utcnow()",
            "date.today()",
            "time.localtime()",
            "timezone.localtime(x)",
            "datetime.fromtimestamp(1)",
            "settings.TIME_ZONE",
            "datetime.now(UTC)",  # allowed
            "datetime.fromtimestamp(1, tz=UTC)",  # allowed
        ]
    )
    assert len(local_time_reads(sample)) == 7


def test_production_code_reads_no_machine_local_time() -> None:
    offenders = {
        str(path.relative_to(SOURCE)): hits
        for path in sorted(SOURCE.rglob("*.py"))
        if (hits := local_time_reads(path.read_text()))
    }
    assert offenders == {}
