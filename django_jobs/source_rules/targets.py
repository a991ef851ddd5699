"""The Python function a callable runs, and its source: a handler (or a helper it calls) given
as a ``functools.partial``, a bound method, an object with ``__call__`` or a
``functools.wraps`` wrapper is read through to the function underneath; when none can be
reached, or its source cannot be read, ``Unreadable`` says why.

Nothing here calls the callable or runs a property: attributes are read with
``inspect.getattr_static``.
"""

from __future__ import annotations

import ast
import functools
import inspect
import textwrap
import types
from dataclasses import dataclass
from typing import Any

# How many wrappers deep a callable is read before giving up (a wrapper that wraps itself).
MAX_WRAPPERS = 32

# Callables written in C: there is no Python source to read.
BUILT_IN = (
    types.BuiltinFunctionType,
    types.BuiltinMethodType,
    types.MethodWrapperType,
    types.WrapperDescriptorType,
    types.MethodDescriptorType,
    types.ClassMethodDescriptorType,
)


@dataclass(frozen=True)
class Target:
    """The Python function a callable runs, and what its first parameter is bound to (the
    instance of a bound method or callable object, the class of a classmethod)."""

    function: types.FunctionType
    owner: object | None = None

    @property
    def module(self) -> str:
        return str(self.function.__module__ or "")

    @property
    def path(self) -> str:
        """Its dotted path (``billing.jobs.Exporter.run``)."""
        return f"{self.module}.{self.function.__qualname__}"


@dataclass(frozen=True)
class Unreadable:
    """Why a callable's source cannot be read, and the module of what was reached."""

    why: str
    module: str = ""


def describe(obj: Any) -> str:
    """A short name for a callable as it was given (``functools.partial(send)``)."""
    if isinstance(obj, functools.partial):
        return f"functools.partial({describe(obj.func)})"
    if isinstance(obj, types.MethodType):
        return describe(obj.__func__)
    if isinstance(obj, (types.FunctionType, type, *BUILT_IN)):
        return str(obj.__qualname__)
    return f"a {type(obj).__qualname__} object"


def _call_method(obj: Any) -> Any:
    """``__call__`` as the object's class defines it (never its metaclass's), or None."""
    for klass in type(obj).__mro__:
        if "__call__" in vars(klass) and klass is not object:
            return vars(klass)["__call__"]
    return None


def _step(obj: Any, owner: object | None) -> tuple[Any, object | None] | Unreadable:
    """One wrapper taken off ``obj``: what it calls, and what that is bound to."""
    wrapped = inspect.getattr_static(obj, "__wrapped__", None)
    if wrapped is not None and not isinstance(obj, type):
        return wrapped, owner
    if isinstance(obj, functools.partial):
        return obj.func, owner
    if isinstance(obj, types.MethodType):
        return obj.__func__, obj.__self__
    if isinstance(obj, staticmethod):
        return obj.__func__, None
    if isinstance(obj, classmethod):
        return obj.__func__, owner
    module = str(getattr(obj, "__module__", "") or "")
    if isinstance(obj, BUILT_IN):
        return Unreadable(f"{describe(obj)} is built in, C code with no Python source", module)
    if isinstance(obj, type):
        return Unreadable(f"{describe(obj)} is a class: calling it only builds an instance", module)
    call = _call_method(obj)
    if call is None:
        return Unreadable(f"{describe(obj)} is neither a function nor an object with __call__")
    return call, obj


def target_of(obj: Any) -> Target | Unreadable:
    """The Python function ``obj`` runs when called, through its wrappers."""
    owner: object | None = None
    for _ in range(MAX_WRAPPERS):
        wrapped = inspect.getattr_static(obj, "__wrapped__", None)
        if isinstance(obj, types.FunctionType) and wrapped is None:
            return Target(obj, owner)
        step = _step(obj, owner)
        if isinstance(step, Unreadable):
            return step
        obj, owner = step
    return Unreadable(f"its wrappers do not end in a function after {MAX_WRAPPERS}")


def _lambda_in(module_tree: ast.Module, line: int) -> ast.Lambda | None:
    """The lambda that starts on ``line`` of its module (its own source is only a fragment of
    the statement it is in, which may not parse on its own)."""
    found = [n for n in ast.walk(module_tree) if isinstance(n, ast.Lambda) and n.lineno == line]
    return min(found, key=lambda n: n.col_offset) if found else None


@functools.lru_cache(maxsize=32)
def parsed(source: str) -> ast.Module:
    """``source`` parsed, once for as long as it stays among the last 32 sources read: the
    checks read one module's top level for each of its handlers, and the same helper for each
    handler that calls it. No rule changes a tree, so one tree serves them all."""
    return ast.parse(source)


def module_tree(func: types.FunctionType) -> ast.Module | None:
    """The parsed source of the module ``func`` is defined in, if it can be read."""
    try:
        return parsed(inspect.getsource(inspect.getmodule(func)))  # type: ignore[arg-type]
    except (OSError, TypeError, SyntaxError):
        return None


def source_of(func: types.FunctionType) -> tuple[ast.AST, int] | Unreadable:
    """``func``'s parsed source and the number to add to its line numbers for its file's;
    ``Unreadable`` when its code was not loaded from a file or the file cannot be read."""
    name, filename = func.__qualname__, func.__code__.co_filename
    module = str(func.__module__ or "")
    if filename.startswith("<") and filename.endswith(">"):
        return Unreadable(
            f"{name} was defined in {filename} (exec() or an interactive prompt), not in a "
            "source file",
            module,
        )
    try:
        lines, first = inspect.getsourcelines(func)
    except (OSError, TypeError):
        return Unreadable(f"the source file of {name}, {filename}, cannot be read", module)
    if func.__name__ == "<lambda>":
        tree = module_tree(func)
        node = _lambda_in(tree, func.__code__.co_firstlineno) if tree else None
        if node is not None:
            return node, 0
    try:
        return parsed(textwrap.dedent("".join(lines))), max(first - 1, 0)
    except SyntaxError:
        return Unreadable(f"the source of {name} in {filename} does not parse", module)
