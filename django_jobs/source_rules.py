"""Reading source code for what the specification forbids a job (or django_jobs) to do itself.

A job handler dispatches an application command; it does not write models or SQL directly,
call HTTP clients, or read machine-local time. These scanners read source text with ``ast``;
they report what they see in the code given, not in what it calls.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

# (receiver, attribute) pairs that read the host's local or naive time.
LOCAL_TIME_CALLS = {
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
ORM_WRITES = {
    "save",
    "delete",
    "create",
    "bulk_create",
    "bulk_update",
    "update",
    "get_or_create",
    "update_or_create",
}
# Django's async ORM (``await obj.asave()``, ``await M.objects.acreate()``), what a coroutine
# handler writes with.
ASYNC_ORM_WRITES = {f"a{name}" for name in ORM_WRITES}
SQL_CALLS = {"cursor", "execute", "executemany", "raw"}
HTTP_MODULES = {"requests", "httpx", "urllib", "urllib3", "aiohttp", "http"}


@dataclass(frozen=True)
class Finding:
    line: int
    what: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.what}"


def _receiver(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


def _root(node: ast.expr) -> str:
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else ""


def local_time_reads(source: str) -> list[Finding]:
    """Each machine-local or naive time read in ``source``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr == "TIME_ZONE":
            found.append(Finding(node.lineno, "reads TIME_ZONE"))
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        pair = (_receiver(node.func.value), node.func.attr)
        wants = 2 if pair[1] == "fromtimestamp" else 1
        has_tz = bool(node.keywords) or len(node.args) >= wants
        if pair in LOCAL_TIME_CALLS:
            found.append(Finding(node.lineno, f"{pair[0]}.{pair[1]}()"))
        elif pair[1] in {"now", "fromtimestamp"} and pair[0] in {"datetime", "date"} and not has_tz:
            found.append(Finding(node.lineno, f"naive {pair[0]}.{pair[1]}()"))
    return found


def _storage_write(target: ast.expr) -> str:
    """What writing ``target`` names (``obj.save``, ``M.objects.acreate``, ``c.execute``), or
    ``""`` when it names no storage write."""
    if not isinstance(target, ast.Attribute):
        return ""
    name, receiver = target.attr, target.value
    plain = name[1:] if name in ASYNC_ORM_WRITES else name
    on_manager = isinstance(receiver, ast.Attribute) and receiver.attr == "objects"
    if plain in {"save", "delete"} or (plain in ORM_WRITES and on_manager):
        return f"writes a model directly (.{name}())"
    if name in SQL_CALLS:
        return f"runs SQL directly (.{name}())"
    return ""


def storage_writes(source: str) -> list[Finding]:
    """Direct model writes (``.save()``, ``.objects.create()``, their async forms ...) and SQL
    (cursors), whether called or passed to be called (``sync_to_async(M.objects.create)``)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        what = _storage_write(node.func)
        if what:
            found.append(Finding(node.lineno, what))
        for arg in node.args:
            passed = _storage_write(arg)
            if passed:
                found.append(Finding(node.lineno, f"{passed} through {_receiver(node.func)}()"))
    return found


def http_calls(source: str) -> list[Finding]:
    """Imports of HTTP clients and calls through them."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in HTTP_MODULES:
                    found.append(Finding(node.lineno, f"imports {alias.name}"))
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in HTTP_MODULES:
            found.append(Finding(node.lineno, f"imports from {node.module}"))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and _root(node.func) in HTTP_MODULES
        ):
            found.append(Finding(node.lineno, f"calls {_root(node.func)}.{node.func.attr}()"))
    return found
