"""Job handlers, registered with ``@job("name")`` in the module that owns their behaviour.

``django_jobs`` autodiscovers each installed app's ``jobs`` module at start-up, the way
``django.contrib.admin`` finds ``admin`` modules.
"""

from __future__ import annotations

import datetime as dt
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from .exceptions import ConfigurationError, UnknownJob

if TYPE_CHECKING:
    from .worker.run import Run

Handler = Callable[["Run"], object]
H = TypeVar("H", bound=Handler)


@dataclass(frozen=True)
class Departure:
    """A recorded departure from the specification's rules for job handlers (its Exception
    record): why this handler writes storage, calls HTTP or reads local time itself, and when
    the decision is reviewed. The system check reports it instead of warning, until
    ``review_by`` passes."""

    reason: str
    review_by: dt.date

    def __post_init__(self) -> None:
        if not isinstance(self.reason, str) or not self.reason.strip():
            raise ConfigurationError("Departure.reason: say why the handler departs")
        if not isinstance(self.review_by, dt.date):
            raise ConfigurationError("Departure.review_by: a date on which it is reviewed")


@dataclass(frozen=True)
class JobHandler:
    name: str
    func: Handler
    departure: Departure | None = None

    @property
    def module(self) -> str:
        return getattr(self.func, "__module__", "?")


class Registry:
    """Job names to handlers. A name may be registered once."""

    def __init__(self) -> None:
        self._handlers: dict[str, JobHandler] = {}

    def register(
        self, name: str, func: Handler, *, departure: Departure | None = None
    ) -> JobHandler:
        if not name or name != name.strip():
            raise ConfigurationError(f"@job name {name!r} must be a non-empty name without spaces")
        if inspect.isgeneratorfunction(func) or inspect.isasyncgenfunction(func):
            # Calling one only builds a generator: the body would never run, yet the
            # occurrence would be recorded completed.
            kind = "an async generator" if inspect.isasyncgenfunction(func) else "a generator"
            raise ConfigurationError(
                f"job {name!r}: {getattr(func, '__qualname__', func)!s} is {kind} function; "
                "a handler must run to completion and return, not yield. Remove the yield "
                "(act on each item in the handler, or collect them in a list)"
            )
        existing = self._handlers.get(name)
        if existing is not None and existing.func is not func:
            raise ConfigurationError(
                f"job {name!r} is registered twice: in {existing.module} and in "
                f"{getattr(func, '__module__', '?')}; give one of them another name"
            )
        handler = JobHandler(name=name, func=func, departure=departure)
        self._handlers[name] = handler
        return handler

    def unregister(self, name: str) -> None:
        self._handlers.pop(name, None)

    def get(self, name: str) -> JobHandler:
        try:
            return self._handlers[name]
        except KeyError:
            raise UnknownJob(
                f"no handler is registered for job {name!r}; register one with "
                f'@job("{name}") in the jobs.py module of the app that owns it'
            ) from None

    def names(self) -> list[str]:
        return sorted(self._handlers)

    def all(self) -> list[JobHandler]:
        return [self._handlers[name] for name in self.names()]


registry = Registry()


def job(name: str, *, departure: Departure | None = None) -> Callable[[H], H]:
    """Register the decorated function as the handler of the job called ``name``.

    A handler dispatches an application command; ``departure`` records why one does not.
    """

    def decorate(func: H) -> H:
        registry.register(name, func, departure=departure)
        return func

    return decorate
