"""Job handlers, registered with ``@job("name")`` in the module that owns their behaviour.

``django_jobs`` autodiscovers each installed app's ``jobs`` module at start-up, the way
``django.contrib.admin`` finds ``admin`` modules.
"""

from __future__ import annotations

import datetime as dt
import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from .exceptions import ConfigurationError, UnknownJob

if TYPE_CHECKING:
    from .worker.run import Run

Handler = Callable[["Run"], object]
H = TypeVar("H", bound=Handler)


# The conventions a departure may be recorded from, and what each departure means.
RULES = {
    "handler": "dispatching a command or approved port and nothing else (W020, W024)",
    "placement": "living in the app that owns its command (W026)",
    "scope": "resolving its dependencies in its run's execution scope",
    "separation": "being declared apart from behaviour, in a schedules module (W027)",
}
JOB_RULES = ("handler", "placement", "scope")


@dataclass(frozen=True)
class Departure:
    """A recorded departure from one of the specification's rules or conventions (its
    Exception record): which ``rule`` (see ``RULES``; ``handler`` by default), why, and when
    the decision is reviewed. The system checks report it (info) instead of warning, until
    ``review_by`` passes (then warning W022); ``manage.py jobs departures`` lists them all."""

    reason: str
    review_by: dt.date
    rule: str = "handler"

    def __post_init__(self) -> None:
        if not isinstance(self.reason, str) or not self.reason.strip():
            raise ConfigurationError("Departure.reason: say why the handler departs")
        if not isinstance(self.review_by, dt.date):
            raise ConfigurationError("Departure.review_by: a date on which it is reviewed")
        if self.rule not in RULES:
            raise ConfigurationError(
                f"Departure.rule: one of {', '.join(RULES)}, got {self.rule!r}"
            )


@dataclass(frozen=True)
class JobHandler:
    name: str
    func: Handler
    departures: tuple[Departure, ...] = ()

    @property
    def module(self) -> str:
        return getattr(self.func, "__module__", "?")

    @property
    def departure(self) -> Departure | None:
        """The departure from the handler rules (W020/W024), if one is recorded."""
        return self.departure_from("handler")

    def departure_from(self, rule: str) -> Departure | None:
        return next((d for d in self.departures if d.rule == rule), None)


class Registry:
    """Job names to handlers. A name may be registered once."""

    def __init__(self) -> None:
        self._handlers: dict[str, JobHandler] = {}

    def register(
        self,
        name: str,
        func: Handler,
        *,
        departure: Departure | Sequence[Departure] | None = None,
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
        handler = JobHandler(name=name, func=func, departures=_departures(name, departure))
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


def _departures(name: str, given: Departure | Sequence[Departure] | None) -> tuple[Departure, ...]:
    departures = (given,) if isinstance(given, Departure) else tuple(given or ())
    for departure in departures:
        if not isinstance(departure, Departure):
            raise ConfigurationError(f"job {name!r}: departure: a Departure, got {departure!r}")
        if departure.rule not in JOB_RULES:
            raise ConfigurationError(
                f"job {name!r}: a departure from {departure.rule!r} is recorded on its "
                f"schedule, not its handler; a job departs from {', '.join(JOB_RULES)}"
            )
    rules = [d.rule for d in departures]
    if len(set(rules)) != len(rules):
        raise ConfigurationError(f"job {name!r}: one departure per rule, got {rules}")
    return departures


def job(name: str, *, departure: Departure | Sequence[Departure] | None = None) -> Callable[[H], H]:
    """Register the decorated function as the handler of the job called ``name``.

    A handler dispatches an application command or approved port, and lives in the app that
    owns it; ``departure`` (one, or one per rule) records why one does not.
    """

    def decorate(func: H) -> H:
        registry.register(name, func, departure=departure)
        return func

    return decorate
