"""How far a handler's code is read beyond its own body: the functions it calls or hands on
(``_pay(run)``, ``sync_to_async(save_it)``), found by resolving each name in the call to the
object it stands for at check time, without importing or running anything.

Without a ``Reach``, only the functions of the handler's own module are read, one call down.
With one (the checks build it when the project names its commands or approved ports), the
functions of the project's other modules are read too, up to ``Reach.depth`` calls down; a
command or approved port is never read (writing is what it is for), nor is code outside the
project.

The project is every module whose file lies outside the Python installation and its
site-packages (sysconfig's ``stdlib``, ``platstdlib``, ``purelib`` and ``platlib``, and site's
directories), django_jobs excepted. So a virtualenv inside the project's folder stays outside
it, and a package installed in editable mode (``pip install -e``) counts as the project's.
"""

from __future__ import annotations

import ast
import functools
import inspect
import os
import site
import sys
import sysconfig
import types
from collections import ChainMap
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from .names import imports_in
from .targets import Target, target_of

# What a handler's reading is bounded by: calls down from the handler, and functions in all.
DEPTH = 3
MAX_FUNCTIONS = 64


@dataclass(frozen=True)
class Reach:
    """Read the project's other modules too, ``depth`` calls down from the handler, never
    into ``stops``: the dotted paths (modules or callables) of the commands and ports."""

    stops: tuple[str, ...] = ()
    depth: int = DEPTH

    def stops_at(self, path: str) -> bool:
        return bool(path) and any(path == s or path.startswith(f"{s}.") for s in self.stops)


@dataclass(frozen=True)
class Callee:
    """A function a piece of code calls or hands on, and the dotted path the call spells
    (``billing.commands.pay``; the function's own path when the call spells none)."""

    target: Target
    path: str


@functools.cache
def _outside_folders() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    folders = [paths.get(key, "") for key in ("stdlib", "platstdlib", "purelib", "platlib")]
    folders += [*site.getsitepackages(), site.getusersitepackages()]
    return tuple(os.path.realpath(f) + os.sep for f in folders if f)


def is_project_module(name: str) -> bool:
    """Whether module ``name`` is the project's own code (see the module's docstring)."""
    if name == "django_jobs" or name.startswith("django_jobs."):
        return False
    filename = getattr(sys.modules.get(name), "__file__", None)
    if not isinstance(filename, str):
        return False  # built in, frozen, or not imported
    path = os.path.realpath(filename)
    return not any(path.startswith(folder) for folder in _outside_folders())


def _bound_in(tree: ast.AST) -> set[str]:
    """The names ``tree`` binds itself (parameters, assignments): not its module's."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.arg):
            found.add(node.arg)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            found.add(node.id)
    return found


def namespace_of(target: Target, tree: ast.AST) -> Mapping[str, Any]:
    """What the names in ``target``'s code (parsed as ``tree``) stand for: its first parameter
    when bound (``self``), its closure's cells, then its module's globals; a name the code
    binds itself stands for nothing known (None)."""
    func, own = target.function, {}
    code = func.__code__
    if target.owner is not None and code.co_argcount:
        own[code.co_varnames[0]] = target.owner
    for name, cell in zip(code.co_freevars, func.__closure__ or (), strict=False):
        try:
            own[name] = cell.cell_contents
        except ValueError:  # a cell not filled yet
            continue
    local = dict.fromkeys(_bound_in(tree) - set(own))
    return ChainMap(own, local, func.__globals__)


def _chain(node: ast.expr) -> list[str] | None:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return [node.id, *reversed(parts)] if isinstance(node, ast.Name) else None


def _imported(path: str) -> Any:
    """What ``path`` names if its module is imported already (nothing is imported here)."""
    if path in sys.modules:
        return sys.modules[path]
    module, _, attr = path.rpartition(".")
    return (
        inspect.getattr_static(sys.modules[module], attr, None) if module in sys.modules else None
    )


def _root(name: str, namespace: Mapping[str, Any], local: dict[str, str]) -> tuple[Any, str]:
    """The object a call's first name stands for, and the dotted path it is reached by."""
    if name in local:
        return _imported(local[name]), local[name]
    value = namespace.get(name)
    if isinstance(value, types.ModuleType):
        return value, value.__name__
    module, qualname = getattr(value, "__module__", None), getattr(value, "__qualname__", None)
    if isinstance(module, str) and isinstance(qualname, str):
        return value, f"{module}.{qualname}"
    return value, f"{namespace.get('__name__', '')}.{name}"


def _resolve(
    parts: list[str], namespace: Mapping[str, Any], local: dict[str, str]
) -> tuple[Any, str]:
    """What ``a.b.c`` stands for (a function found on an instance bound to it, a classmethod
    to its class), and the dotted path it is reached by."""
    obj, path = _root(parts[0], namespace, local)
    owner: Any = None
    for name in parts[1:]:
        if obj is None:
            return None, ""
        owner, obj = obj, inspect.getattr_static(obj, name, None)
        path = f"{path}.{name}"
    unbound = (type, types.ModuleType, type(None))
    if isinstance(obj, types.FunctionType) and not isinstance(owner, unbound):
        obj = types.MethodType(obj, owner)
    elif isinstance(obj, classmethod) and owner is not None:
        obj = types.MethodType(obj.__func__, owner if isinstance(owner, type) else type(owner))
    return obj, path


def _named(tree: ast.AST) -> Iterator[list[str]]:
    """Each dotted name a call in ``tree`` calls or hands on as an argument."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            for part in [node.func, *node.args, *(k.value for k in node.keywords)]:
                parts = _chain(part)
                if parts:
                    yield parts


def callees(tree: ast.AST, namespace: Mapping[str, Any]) -> list[Callee]:
    """The Python functions ``tree`` calls or hands on, each once, in the order named."""
    local = dict(imports_in(list(ast.walk(tree))))
    found: dict[types.CodeType, Callee] = {}
    for parts in _named(tree):
        obj, path = _resolve(parts, namespace, local)
        target = target_of(obj) if obj is not None else None
        if isinstance(target, Target) and target.function.__code__ not in found:
            found[target.function.__code__] = Callee(target, path)
    return list(found.values())
