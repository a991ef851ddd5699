"""A handler's own code, read by every rule: its source and the functions of its module it
calls or hands on (one level down), with findings in the module file's line numbers."""

from __future__ import annotations

import ast
import inspect
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from .findings import Finding, by_line
from .http import http_findings
from .local_time import local_time_findings
from .names import Names, module_names, names_of, related_accessors
from .storage import storage_findings

RULES: tuple[Callable[[ast.AST, Names], list[Finding]], ...] = (
    storage_findings,
    http_findings,
    local_time_findings,
)


def _findings(tree: ast.AST, outer: Names) -> list[Finding]:
    names = names_of(tree, outer)
    return by_line([f for rule in RULES for f in rule(tree, names)])


def _module_tree(func: Any) -> ast.Module | None:
    try:
        return ast.parse(inspect.getsource(inspect.getmodule(func)))  # type: ignore[arg-type]
    except (OSError, TypeError, SyntaxError):
        return None


def _helpers(
    tree: ast.AST, module_tree: ast.Module, own: str
) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    """The top-level functions of the module that ``tree`` calls by bare name (``_pay()``) or
    hands to a call (``sync_to_async(_pay)``, ``run.once("pay", _pay)``)."""
    used = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            for part in [node.func, *node.args, *(k.value for k in node.keywords)]:
                if isinstance(part, ast.Name):
                    used.add(part.id)
    return [
        node
        for node in module_tree.body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name in used - {own}
    ]


@dataclass(frozen=True)
class HandlerCode:
    """A handler's parsed source and the same-module helpers it calls (one level down)."""

    tree: ast.AST
    offset: int  # add to the tree's line numbers for the module file's
    helpers: list[ast.FunctionDef | ast.AsyncFunctionDef]
    module_tree: ast.Module | None


def handler_code(func: Any) -> HandlerCode | None:
    """The code a handler runs of its own: its source and the top-level functions of its
    module it calls or hands on; None if its source cannot be read."""
    func = inspect.unwrap(func)
    try:
        lines, first = inspect.getsourcelines(func)
        tree = ast.parse(textwrap.dedent("".join(lines)))
    except (OSError, TypeError, SyntaxError):
        return None
    module_tree = _module_tree(func)
    helpers = _helpers(tree, module_tree, getattr(func, "__name__", "")) if module_tree else []
    return HandlerCode(tree, max(first - 1, 0), helpers, module_tree)


def handler_findings(func: Any) -> list[Finding] | None:
    """What a handler does that the specification forbids, by every rule: in its own source
    and in the functions of its module it calls (one level down, each finding naming the
    helper). Line numbers are the module file's. None if its source cannot be read."""
    code = handler_code(func)
    if code is None:
        return None
    module_tree = code.module_tree
    outer = module_names(module_tree) if module_tree else Names(related=related_accessors())
    found = [replace(f, line=f.line + code.offset) for f in _findings(code.tree, outer)]
    for helper in code.helpers:
        found += [replace(f, helper=helper.name) for f in _findings(helper, outer)]
    return found
