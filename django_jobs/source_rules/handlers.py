"""A handler's own code, read by every rule: the function it runs (through a partial, a bound
method, a callable object or a ``functools.wraps`` wrapper) and the functions it calls or
hands on (``reach``: its own module's, one call down; with a ``Reach``, the project's other
modules' too), with findings in each file's line numbers."""

from __future__ import annotations

import ast
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from .findings import Finding, by_line
from .http import http_findings
from .local_time import local_time_findings
from .names import Names, module_names, names_of, related_accessors
from .reach import MAX_FUNCTIONS, Callee, Reach, callees, is_project_module, namespace_of
from .storage import storage_findings
from .targets import Target, Unreadable, module_tree, source_of, target_of

RULES: tuple[Callable[[ast.AST, Names], list[Finding]], ...] = (
    storage_findings,
    http_findings,
    local_time_findings,
)


@dataclass(frozen=True)
class Unit:
    """One function of the code a handler runs: its parsed source, the number to add to its
    line numbers for its file's, what its module's top-level names mean, what the names in it
    stand for at check time, and how a finding names it: ``""`` for the handler itself, the
    function's name for a helper of the handler's module, its dotted path for another's."""

    tree: ast.AST
    offset: int
    outer: Names
    namespace: Mapping[str, Any]
    helper: str


@dataclass(frozen=True)
class HandlerCode:
    """The code a handler runs: its own function first, then the helpers read with it."""

    units: list[Unit]

    @property
    def tree(self) -> ast.AST:
        return self.units[0].tree


class _Reader:
    """Reads the functions of one handler's code, each module's top level parsed once."""

    def __init__(self, home: str, reach: Reach | None) -> None:
        self.home, self.reach = home, reach
        self.outers: dict[str, Names] = {}

    def outer(self, func: types.FunctionType) -> Names:
        module = func.__module__ or ""
        if module not in self.outers:
            tree = module_tree(func)
            self.outers[module] = module_names(tree) if tree else Names(related=related_accessors())
        return self.outers[module]

    def unit(self, target: Target, helper: str) -> Unit | Unreadable:
        source = source_of(target.function)
        if isinstance(source, Unreadable):
            return source
        tree, offset = source
        namespace = namespace_of(target, tree)
        return Unit(tree, offset, self.outer(target.function), namespace, helper)

    def may_read(self, callee: Callee) -> bool:
        """Never a command or port; always the handler's module; the project's with a reach."""
        target, reach = callee.target, self.reach
        if reach is not None and (reach.stops_at(callee.path) or reach.stops_at(target.path)):
            return False
        if target.module == self.home:
            return True
        return reach is not None and is_project_module(target.module)

    def label(self, target: Target) -> str:
        name = target.function.__qualname__
        return name if target.module == self.home else target.path

    def helpers_of(self, units: list[Unit], seen: set[types.CodeType]) -> list[Unit]:
        """The functions ``units`` call or hand on that may be read and were not yet."""
        found = []
        for unit in units:
            for callee in callees(unit.tree, unit.namespace):
                code = callee.target.function.__code__
                if code in seen or len(seen) >= MAX_FUNCTIONS or not self.may_read(callee):
                    continue
                seen.add(code)
                helper = self.unit(callee.target, self.label(callee.target))
                if isinstance(helper, Unit):
                    found.append(helper)
        return found


def handler_code(func: Any, reach: Reach | None = None) -> HandlerCode | Unreadable:
    """The code a handler runs of its own: its function's source and the functions it calls
    or hands on, ``reach.depth`` calls down (one without a reach); ``Unreadable`` (saying why)
    if its own source cannot be read. An unreadable helper is left out."""
    target = target_of(func)
    if isinstance(target, Unreadable):
        return target
    reader = _Reader(target.module, reach)
    first = reader.unit(target, "")
    if isinstance(first, Unreadable):
        return first
    units, frontier, seen = [first], [first], {target.function.__code__}
    for _ in range(reach.depth if reach is not None else 1):
        frontier = reader.helpers_of(frontier, seen)
        units += frontier
    return HandlerCode(units)


def code_findings(code: HandlerCode) -> list[Finding]:
    """What the code does that the specification forbids a handler, by every rule: the
    handler's own findings in source order, then each helper's, naming it."""
    found: list[Finding] = []
    for unit in code.units:
        names = names_of(unit.tree, unit.outer)
        own = by_line([f for rule in RULES for f in rule(unit.tree, names)])
        found += [replace(f, line=f.line + unit.offset, helper=unit.helper) for f in own]
    return found


def handler_findings(func: Any, reach: Reach | None = None) -> list[Finding] | None:
    """What a handler does that the specification forbids, by every rule: in its own source
    and in the functions it calls (see ``handler_code``; each finding in a helper names it).
    Line numbers are the files'. None if its source cannot be read."""
    code = handler_code(func, reach)
    return None if isinstance(code, Unreadable) else code_findings(code)
