"""The storage rule: model writes and SQL a handler makes itself, which belong to an
application command."""

from __future__ import annotations

import ast

from .findings import SQL, STORAGE, Finding, by_line
from .names import (
    DATABASE_CONNECTS,
    Names,
    dotted_name,
    is_database,
    is_queryset,
    is_related_manager,
    last_part,
    names_of,
    receiver_name,
)

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
# Writes that only a related manager has (``invoice.tags.add(tag)``).
RELATED_WRITES = {
    prefix + name for prefix in ("", "a") for name in ("add", "remove", "clear", "set")
}
SQL_CALLS = {"cursor", "execute", "executemany", "raw"}
# ``.execute()`` is SQL on a cursor or connection; on anything else (a command bus) it is not.
EXECUTE_CALLS = {"execute", "executemany", "executescript"}


def _storage_write(target: ast.expr, names: Names) -> tuple[str, str] | None:
    """The kind and description of the storage write ``target`` names (``obj.save``,
    ``M.objects.filter(...).update``, ``cursor.execute``), or None when it names none."""
    if not isinstance(target, ast.Attribute):
        return None
    name, receiver = target.attr, target.value
    plain = name[1:] if name in ASYNC_ORM_WRITES else name
    if (
        plain in {"save", "delete"}
        or (plain in ORM_WRITES and is_queryset(receiver, names))
        or (name in RELATED_WRITES and is_related_manager(receiver, names))
    ):
        return STORAGE, f"writes a model directly (.{name}())"
    if name in {"cursor", "raw"} or (name in EXECUTE_CALLS and is_database(receiver, names)):
        return SQL, f"runs SQL directly (.{name}())"
    return None


def storage_findings(tree: ast.AST, names: Names) -> list[Finding]:
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        called = dotted_name(node.func, names)
        if last_part(called) == "RawSQL":
            found.append(Finding(node.lineno, "runs SQL directly (RawSQL())", SQL))
        elif called in DATABASE_CONNECTS:
            found.append(Finding(node.lineno, f"runs SQL directly ({called}())", SQL))
        write = _storage_write(node.func, names)
        # ``image.save(buffer)``, ``cache.delete(key)``: a model's save() and delete() take
        # no positional arguments.
        if write and isinstance(node.func, ast.Attribute) and node.args:
            plain = node.func.attr.removeprefix("a")
            if plain in {"save", "delete"} and not is_queryset(node.func.value, names):
                write = None
        if write:
            found.append(Finding(node.lineno, write[1], write[0]))
        for arg in node.args:
            passed = _storage_write(arg, names)
            if passed:
                what = f"{passed[1]} through {receiver_name(node.func)}()"
                found.append(Finding(node.lineno, what, passed[0]))
    return found


def storage_writes(source: str) -> list[Finding]:
    """Direct model writes (``.save()``, ``.objects.create()``, a queryset's ``.update()``
    through a chain or a variable, their async forms ...) and SQL (cursors, ``.raw()``,
    ``RawSQL``), whether called or passed to be called (``sync_to_async(M.objects.create)``)."""
    tree = ast.parse(source)
    return by_line(storage_findings(tree, names_of(tree)))
