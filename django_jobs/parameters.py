"""What a job handler takes: its run, the occurrence's arguments by name, or both.

A handler is called ``handler(run)``, ``handler(run, **arguments)`` or ``handler(**arguments)``:

- its first parameter takes the ``Run`` when it is named ``run`` (or starts with ``_``:
  ``_run``), is annotated ``Run``, or is positional-only or ``*args``;
- each other parameter takes the argument of its name (``Run.args``, which a schedule's
  ``args=`` or ``enqueue(args=...)`` gives); ``**kwargs`` takes every argument.

So ``def send_confirmation(order_id)`` and ``def send_confirmation(run, *, order_id)`` both get
``order_id`` from ``args={"order_id": 42}``, and a handler that takes only ``run`` reads
``run.args`` itself, as before. ``Parameters.of`` reads the signature once, when ``@job``
registers the handler, and refuses what could not be called that way (a positional-only
parameter after the run, without a default); a later ``*args`` receives nothing, and a
signature of only ``(*args, **kwargs)`` (a decorator without ``functools.wraps``) is called
with the run alone. ``problem(args)`` says which parameter or argument does not fit, for
``schedule(args=...)``, ``enqueue(args=...)``, a run-now's and a run-time schedule's.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .exceptions import ConfigurationError


@dataclass(frozen=True)
class Parameters:
    """How one handler is called: whether it takes the run, and which arguments by name."""

    takes_run: bool = True
    names: frozenset[str] = frozenset()
    required: tuple[str, ...] = ()
    any_name: bool = False  # ``**kwargs``
    shown: str = "handler(run)"  # the handler and its parameters, for messages

    @classmethod
    def of(cls, job: str, func: Callable[..., object]) -> Parameters:
        """The parameters of ``func``, the handler of ``job``; ``ConfigurationError`` naming
        the job and the parameter for a signature no call by name can fill."""
        try:
            signature = inspect.signature(func)
        except (TypeError, ValueError):  # a builtin or C callable: called with the run
            return cls()
        params = list(signature.parameters.values())
        bare = signature.replace(
            parameters=[p.replace(annotation=inspect.Parameter.empty) for p in params],
            return_annotation=inspect.Signature.empty,
        )
        shown = f"{_name(func)}{bare}"
        kinds = [p.kind for p in params]
        if kinds == [inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD]:
            # An opaque wrapper (a decorator without functools.wraps, a mock): it passes the
            # run on, as every handler was called before arguments could be named.
            return cls(shown=shown)
        takes_run = bool(params) and _is_run(params[0])
        rest = params[1:] if takes_run else params
        names, required, any_name = [], [], False
        for param in rest:
            if param.kind is inspect.Parameter.VAR_KEYWORD:
                any_name = True
            elif param.kind is inspect.Parameter.VAR_POSITIONAL:
                continue  # receives nothing
            elif param.kind is inspect.Parameter.POSITIONAL_ONLY:
                if param.default is inspect.Parameter.empty:
                    raise ConfigurationError(
                        f"job {job!r}: handler {shown}: parameter {param.name!r} cannot be "
                        "given by name; a handler takes its run as `run` and each argument by "
                        "name (def handler(run, *, order_id) or def handler(order_id))"
                    )
            else:
                names.append(param.name)
                if param.default is inspect.Parameter.empty:
                    required.append(param.name)
        return cls(takes_run, frozenset(names), tuple(required), any_name, shown)

    def problem(self, args: Mapping[str, Any]) -> str | None:
        """Which parameter has no argument in ``args``, or which argument the handler could
        not receive; None when they fit. A handler that takes the run reads every argument
        through ``run.args``, so only its named parameters must be filled."""
        missing = [name for name in self.required if name not in args]
        if missing:
            given = ", ".join(sorted(args)) or "none"
            hint = (
                ""
                if self.takes_run
                else f"; if {missing[0]!r} is meant to receive the run, name it `run` or "
                "annotate it `Run`"
            )
            return (
                f"handler {self.shown}: parameter {missing[0]!r} has no argument "
                f"(the arguments given: {given}){hint}"
            )
        if not self.takes_run and not self.any_name:
            extra = sorted(set(args) - self.names)
            if extra:
                return (
                    f"handler {self.shown}: argument {extra[0]!r} matches no parameter; "
                    "name it in the handler, or take the run (def handler(run, ...)) and "
                    "read run.args"
                )
        return None

    def call(self, func: Callable[..., object], run: Any) -> object:
        """``func`` called with ``run`` and its arguments, as its parameters take them."""
        if self.takes_run and not self.names and not self.any_name:
            return func(run)
        args = run.args
        named = dict(args) if self.any_name else {k: v for k, v in args.items() if k in self.names}
        return func(run, **named) if self.takes_run else func(**named)


def _name(func: Callable[..., object]) -> str:
    """How a handler is named in messages: its qualified name, a partial's function's, a
    callable object's class's (never a repr with an address)."""
    if isinstance(func, functools.partial):
        return f"partial({_name(func.func)})"
    named = getattr(func, "__qualname__", None)
    return named if isinstance(named, str) else type(func).__qualname__


def _is_run(param: inspect.Parameter) -> bool:
    """Whether a handler's first parameter takes its run."""
    # Positional-only or ``*args``, it could not take an argument by name (``list.append``,
    # ``print``: a builtin, or a wrapper that passes its arguments on).
    if param.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.VAR_POSITIONAL):
        return True
    if param.kind is not inspect.Parameter.POSITIONAL_OR_KEYWORD:
        return False
    if param.name == "run" or param.name.startswith("_"):
        return True
    annotation = param.annotation
    name = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", "")
    return name.rpartition(".")[2] == "Run"
