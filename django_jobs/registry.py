"""Job handlers, registered with ``@job("name")`` in the module that owns their behaviour.

``django_jobs`` autodiscovers each installed app's ``jobs`` module at start-up, the way
``django.contrib.admin`` finds ``admin`` modules.

A job is offered at run time (a run-time schedule, an operator's run-now with arguments of
its own) only if it says so: ``@job(..., runtime=True)``, or its name in
``DJANGO_JOBS["RUNTIME_JOBS"]``. A grant on a tenant or a schedule then never reaches a job
its code did not offer; the Tasks backend's jobs (``django_jobs.tasks:<alias>``) never are.
"""

from __future__ import annotations

import datetime as dt
import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from . import conf
from .exceptions import ConfigurationError, UnknownJob
from .parameters import Parameters
from .scheduling.policies import MAX_DURATION, Retry
from .spec import DEFAULT_QUEUE, NOT_GIVEN, RETRY_FIELDS, ScheduleSpec, completed
from .spec import MAX_KEEP_LAST as MAX_KEEP_LAST  # re-exported, where it was defined
from .suggest import did_you_mean

# A handler takes its run, its arguments by name, or both (``parameters``).
Handler = Callable[..., object]
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


# A job's enqueued work's ``max_delay`` when none is given: never too late to run.
NO_MAX_DELAY = MAX_DURATION
# The jobs of the Tasks backend's aliases (``tasks.job_name``): never offered at run time,
# whatever ``runtime=`` or ``RUNTIME_JOBS`` say (their arguments name the task to run).
TASKS_JOB_PREFIX = "django_jobs.tasks:"


# Where ``@job(...)`` names a column of its policy record: ``retry=Retry(...)``, ``owner=``
# for both owners.
_POLICY_FIELDS = {**RETRY_FIELDS, "operating_owner": "owner"}


@dataclass(frozen=True)
class JobPolicies:
    """The policies of a job's enqueued work (``enqueue()``), declared on ``@job(...)``: its
    tenant's policy record (origin ``enqueue``) holds them. ``owner`` answers for that record
    (operating and record owner): by default the top-level package of the handler's module.
    """

    retry: Retry = field(default_factory=Retry)
    timeout: dt.timedelta = dt.timedelta(minutes=15)
    retention: dt.timedelta | int = dt.timedelta(days=7)
    max_delay: dt.timedelta | None = None
    priority: int = 0
    owner: str = ""
    # The queue of its enqueued work (``enqueue(queue=)`` overrides it per call).
    queue: str = DEFAULT_QUEUE

    def problems(self) -> list[tuple[str, str]]:
        """(field, message) for each invalid policy, as the spec of its policy record says
        (``spec.py``: what it stores, ``max_delay`` None as ``NO_MAX_DELAY``); empty when
        valid. ``owner`` blank is the module's package (``record_fields``)."""
        owner = self.owner
        spec = ScheduleSpec.of(
            retry=self.retry,
            timeout=self.timeout,
            retention=self.retention,
            max_delay=NO_MAX_DELAY if self.max_delay is None else self.max_delay,
            priority=self.priority,
            queue=self.queue,
            operating_owner=owner if not isinstance(owner, str) or owner.strip() else NOT_GIVEN,
        )
        return [(_POLICY_FIELDS.get(name, name), message) for name, message in spec.problems()]

    def record_fields(self, module: str) -> dict[str, object]:
        """The policy record's columns these policies set."""
        owner = self.owner.strip() or module.partition(".")[0] or "?"
        return {
            "max_attempts": self.retry.max_attempts,
            "backoff": self.retry.backoff,
            "max_backoff": self.retry.max_backoff,
            "timeout": self.timeout,
            "max_delay": self.max_delay or NO_MAX_DELAY,
            "priority": self.priority,
            "queue": self.queue,
            "operating_owner": owner,
            "record_owner": owner,
        }

    @property
    def limit(self) -> dict[str, object]:
        """The policy record's retention ``Limit`` columns."""
        if isinstance(self.retention, dt.timedelta):
            return {"keep_for": self.retention, "keep_last": None}
        return {"keep_for": None, "keep_last": self.retention}


@dataclass(frozen=True)
class JobHandler:
    name: str
    func: Handler
    departures: tuple[Departure, ...] = ()
    policies: JobPolicies = field(default_factory=JobPolicies)
    runtime: bool = False  # offered at run time (``@job(..., runtime=True)``)
    # What it takes: the run, the occurrence's arguments by name, or both (``parameters``).
    parameters: Parameters = field(default_factory=Parameters)

    @property
    def module(self) -> str:
        return getattr(self.func, "__module__", "?")

    @property
    def policy_record_fields(self) -> dict[str, object]:
        """The columns of its policy record of enqueued work (``JobPolicies.record_fields``)."""
        return self.policies.record_fields(self.module)

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
        policies: JobPolicies | None = None,
        runtime: bool = False,
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
        policies = policies or JobPolicies()
        problems = policies.problems()
        if problems:
            field, message = problems[0]
            raise ConfigurationError(f"job {name!r}: {field}: {message}")
        if not isinstance(runtime, bool):
            raise ConfigurationError(f"job {name!r}: runtime: True or False, got {runtime!r}")
        handler = JobHandler(
            name=name,
            func=func,
            departures=_departures(name, departure),
            policies=policies,
            runtime=runtime,
            parameters=Parameters.of(name, func),
        )
        self._handlers[name] = handler
        return handler

    def unregister(self, name: str) -> None:
        self._handlers.pop(name, None)

    def get(self, name: str) -> JobHandler:
        try:
            return self._handlers[name]
        except KeyError:
            raise UnknownJob(
                f"no handler is registered for job {name!r}"
                f"{did_you_mean(name, self._handlers)}; register one with "
                f'@job("{name}") in the jobs.py module of the app that owns it'
            ) from None

    def of(self, func: Callable[..., object]) -> JobHandler | None:
        """The handler registered for ``func`` (the decorated function), if any."""
        return next((h for h in self._handlers.values() if h.func is func), None)

    def names(self) -> list[str]:
        return sorted(self._handlers)

    def all(self) -> list[JobHandler]:
        return [self._handlers[name] for name in self.names()]

    def runtime_names(self) -> list[str]:
        """The jobs offered at run time (see the module): what a run-time schedule may run,
        and what an operator's run-now may give arguments of its own."""
        listed = conf.get_settings().RUNTIME_JOBS
        return [name for name in self.names() if self._runtime_problem(name, listed) is None]

    def runtime_problem(self, name: str) -> str | None:
        """Why job ``name`` is not offered at run time, or None: the caller names the object
        and the field (``job``)."""
        return self._runtime_problem(name, conf.get_settings().RUNTIME_JOBS)

    def _runtime_problem(self, name: str, listed: tuple[str, ...]) -> str | None:
        handler = self._handlers.get(name)
        if handler is None:
            return (
                f"no handler is registered for job {name!r} in this process; register one "
                f'with @job("{name}") in the jobs.py of the app that owns it'
            )
        if name.startswith(TASKS_JOB_PREFIX):
            return (
                f"job {name!r} runs the Tasks backend's tasks and is never offered at run "
                "time: enqueue a task from code (task.enqueue(...))"
            )
        if not handler.runtime and name not in listed:
            return (
                f"job {name!r} is not offered at run time; its code opts in with "
                f'@job("{name}", runtime=True) or DJANGO_JOBS["RUNTIME_JOBS"] lists it'
            )
        return None


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


def job(
    name: str,
    *,
    departure: Departure | Sequence[Departure] | None = None,
    retry: Retry | None = None,
    timeout: dt.timedelta = NOT_GIVEN,
    retention: dt.timedelta | int = NOT_GIVEN,
    max_delay: dt.timedelta | None = None,
    priority: int = NOT_GIVEN,
    owner: str = "",
    runtime: bool = False,
    queue: str = DEFAULT_QUEUE,
) -> Callable[[H], H]:
    """Register the decorated function as the handler of the job called ``name``.

    A handler dispatches an application command or approved port, and lives in the app that
    owns it; ``departure`` (one, or one per rule) records why one does not. ``retry``,
    ``timeout``, ``retention``, ``max_delay``, ``priority``, ``owner`` and ``queue`` (the queue
    its enqueued work is claimed from: 1-100 letters, digits and _ . -; default
    ``"default"``; ``enqueue(queue=)`` overrides it per call) are the policies of its
    enqueued work (``enqueue()``; ``JobPolicies``); a schedule's own are on the schedule.
    Those left out come from ``DJANGO_JOBS["DEFAULTS"]`` (``owner`` from its
    ``operating_owner``; ``max_delay`` never: enqueued work is never too late unless its job
    says so), then from ``JobPolicies``. ``runtime=True`` offers it at run time: to run-time
    schedules (``upsert_schedule``, the console's form) and to an operator's run-now with
    arguments (see the module).
    """
    if callable(name):
        raise ConfigurationError(
            f"@job on {getattr(name, '__qualname__', name)!s} names no job: write "
            f'@job("<app>.<job>") (the name schedules and enqueue() use), not a bare @job'
        )
    given, _ = completed(
        {
            "retry": NOT_GIVEN if retry is None else retry,
            "timeout": timeout,
            "retention": retention,
            "priority": priority,
            "operating_owner": owner or NOT_GIVEN,
        },
        conf.record_defaults(),
    )
    chosen = {k: v for k, v in given.items() if v is not NOT_GIVEN}
    policies = JobPolicies(
        retry=chosen.get("retry", Retry()),
        timeout=chosen.get("timeout", JobPolicies.timeout),
        retention=chosen.get("retention", JobPolicies.retention),
        max_delay=max_delay,
        priority=chosen.get("priority", JobPolicies.priority),
        owner=chosen.get("operating_owner", ""),
        queue=queue,
    )

    def decorate(func: H) -> H:
        registry.register(name, func, departure=departure, policies=policies, runtime=runtime)
        return func

    return decorate
