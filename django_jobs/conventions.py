"""What a handler dispatches, and where it lives: the specification's dispatch rule and its
placement convention, read from the handler's source.

A handler dispatches an Application Command or an approved port. The project names them in
``DJANGO_JOBS["COMMANDS"]`` and ``DJANGO_JOBS["APPROVED_PORTS"]`` (modules or callables); a
call in the handler (read through a partial, bound method, callable object or
``functools.wraps`` wrapper), or in a function it calls of its own module or of the project's
other modules (``source_rules.reach``, a few calls deep), whose target resolves to one of
them is a dispatch. A handler lives in the app that owns a command it dispatches.
"""

from __future__ import annotations

import ast
import inspect
import sys
import types
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from django.apps import apps

from . import source_rules
from .conf import JobsSettings


@dataclass(frozen=True)
class Dispatch:
    """One call of a command or approved port: its dotted path and which kind it is."""

    path: str
    kind: str  # "command" or "port"
    app: str  # label of the app whose module holds it ("" outside any app)


@dataclass
class HandlerReport:
    """What a handler dispatches and where it lives."""

    app: str  # label of the handler's app ("" outside any app)
    dispatches: list[Dispatch] = field(default_factory=list)
    readable: bool = True

    @property
    def commands(self) -> list[Dispatch]:
        return [d for d in self.dispatches if d.kind == "command"]

    @property
    def misplaced(self) -> bool:
        """It dispatches commands, none of them from its own app."""
        return bool(self.commands) and all(d.app != self.app for d in self.commands)


def app_label(module: str) -> str:
    config = apps.get_containing_app_config(module)
    return config.label if config is not None else ""


def reach(settings: JobsSettings) -> source_rules.Reach | None:
    """How far a handler's code is read: into the project's other modules, stopping at the
    commands and ports, when the project names any; else only its own module (W028 says
    why: no helper could be told from a command)."""
    stops = (*settings.COMMANDS, *settings.APPROVED_PORTS)
    return source_rules.Reach(stops=stops) if stops else None


def handler_module(func: Any) -> str:
    """The module of the function a handler runs (a partial's or bound method's function)."""
    target = source_rules.target_of(func)
    if isinstance(target, source_rules.Target):
        return target.module
    return target.module or str(getattr(func, "__module__", "") or "")


def _units(func: Any, settings: JobsSettings) -> Iterator[tuple[ast.AST, Mapping[str, Any]]]:
    """The handler's body and those of the functions it calls or hands on (as the source
    rules read them), with the namespace their names resolve in."""
    code = source_rules.handler_code(func, reach(settings))
    if isinstance(code, source_rules.Unreadable):
        return
    for unit in code.units:
        yield unit.tree, unit.namespace


def _dotted(node: ast.expr) -> list[str] | None:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return parts[::-1]


def _import(path: str) -> Any:
    """The object at dotted ``path`` if its module is already imported, else None."""
    module_path, _, attr = path.rpartition(".")
    if path in sys.modules:
        return sys.modules[path]
    owner = sys.modules.get(module_path)
    return getattr(owner, attr, None) if owner is not None else None


def _path_of(target: Any) -> str | None:
    if isinstance(target, types.ModuleType):
        return target.__name__
    module, qualname = getattr(target, "__module__", None), getattr(target, "__qualname__", None)
    if isinstance(module, str) and isinstance(qualname, str):
        return f"{module}.{qualname}"
    return None


def _resolve(parts: list[str], namespace: Mapping[str, Any], local: dict[str, str]) -> str | None:
    """The dotted path of what a call names (``statements.send_for`` -> the function's path),
    following attributes from a module-level or locally imported name."""
    root, rest = parts[0], parts[1:]
    if root in local:
        target = _import(local[root])
        if target is None:  # a module not imported yet: its path is enough
            return ".".join([local[root], *rest])
    elif root in namespace:
        target = namespace[root]
    else:
        return None  # a parameter (``run``), a local variable, a builtin
    for n, name in enumerate(rest):
        # Read statically: resolving ``self.client.post`` must not run a property.
        found = inspect.getattr_static(target, name, None)
        if found is None and isinstance(target, types.ModuleType):
            return ".".join([target.__name__, *rest[n:]])  # a submodule not imported yet
        if found is None:
            return None
        target = found
    return _path_of(target)


def _kind(path: str, settings: JobsSettings) -> str | None:
    for kind, listed in (("command", settings.COMMANDS), ("port", settings.APPROVED_PORTS)):
        if any(path == entry or path.startswith(entry + ".") for entry in listed):
            return kind
    return None


def report(func: Any, settings: JobsSettings) -> HandlerReport:
    """What ``func`` dispatches (in call order, each once) and the app it lives in."""
    result = HandlerReport(app=app_label(handler_module(func)))
    seen: set[str] = set()
    units = list(_units(func, settings))
    if not units:
        result.readable = False
        return result
    for node, namespace in units:
        local = dict(source_rules.imports_in(list(ast.walk(node))))
        calls = sorted(
            (n for n in ast.walk(node) if isinstance(n, ast.Call)),
            key=lambda n: (n.lineno, n.col_offset),
        )
        for call in calls:
            parts = _dotted(call.func)
            path = _resolve(parts, namespace, local) if parts else None
            kind = _kind(path, settings) if path else None
            if path and kind and path not in seen:
                seen.add(path)
                module = path if path in sys.modules else path.rpartition(".")[0]
                result.dispatches.append(Dispatch(path, kind, app_label(module)))
    return result
