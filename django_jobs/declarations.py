"""Schedule declarations: ``schedule(...)`` in an app's ``schedules.py``, apart from the jobs.

A declaration names every field of the schedule record. It is validated when it is made, and
``manage.py jobs sync`` (also run by the worker at start) writes it to a ``Schedule`` row.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import sys
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from . import conf
from .exceptions import ConfigurationError
from .registry import Departure, registry
from .scheduling.policies import Misfire, Overlap, Retry
from .scheduling.timings import Timing
from .spec import DEFAULT_QUEUE, NOT_GIVEN, RETRY_FIELDS, ScheduleSpec, completed
from .spec import KEY_PATTERN as KEY_PATTERN
from .spec import STATUSES as STATUSES
from .spec import TENANT_PATTERN as TENANT_PATTERN
from .validation import arguments


class InvalidSchedule(ConfigurationError):
    """A schedule declaration or record is invalid. The message names the schedule and field."""

    def __init__(self, key: object, field_name: str, message: str) -> None:
        super().__init__(f"schedule {key!r}: {field_name}: {message}")
        self.key = key
        self.field = field_name
        self.detail = message


@dataclass(frozen=True)
class Declaration:
    """One schedule record as declared. Build it with ``schedule()``, which validates it."""

    key: str
    job: str
    timing: Timing
    operating_owner: str
    record_owner: str
    status: str
    retention: timedelta | int
    tenant: str = ""
    max_delay: timedelta = timedelta(minutes=5)
    misfire: Misfire = Misfire.SKIP
    max_catchup: int = 100
    overlap: Overlap = Overlap.SKIP
    retry: Retry = field(default_factory=Retry)
    timeout: timedelta = timedelta(minutes=15)
    decider: str = ""
    decide_by: dt.date | None = None
    # What the job is run for (``Run.args``): a JSON object, as the record keeps it. Not
    # hashed (a dict is not hashable); compared like every other field.
    args: dict[str, Any] = field(default_factory=dict, hash=False)
    # Claims take higher priority first (docs/enqueue.md#priority): -100 to 100.
    priority: int = 0
    # The queue its occurrences are claimed from (``runworker --queue``).
    queue: str = DEFAULT_QUEUE
    # Where it was declared (the module that called ``schedule()``), and a recorded departure
    # from keeping schedules apart from behaviour (rule ``separation``): not part of the record.
    module: str = field(default="", compare=False)
    departure: Departure | None = field(default=None, compare=False)

    @property
    def label(self) -> str:
        """How the schedule is named to people: ``tenant/key``, or the key alone."""
        return f"{self.tenant}/{self.key}" if self.tenant else self.key

    def spec(self) -> ScheduleSpec:
        """This declaration as the record it writes, for ``problems()`` (``spec.py``)."""
        return ScheduleSpec.of(
            key=self.key,
            tenant=self.tenant,
            job=self.job,
            timing=self.timing,
            operating_owner=self.operating_owner,
            record_owner=self.record_owner,
            decider=self.decider,
            status=self.status,
            decide_by=self.decide_by,
            max_delay=self.max_delay,
            timeout=self.timeout,
            misfire=self.misfire,
            overlap=self.overlap,
            max_catchup=self.max_catchup,
            priority=self.priority,
            queue=self.queue,
            retry=self.retry,
            retention=self.retention,
            args=self.args,
        )

    def problems(self, *, args: object = None) -> list[tuple[str, str]]:
        """(field, message) for each field the spec refuses, named as ``schedule(...)`` takes
        it (``retry.max_attempts``, ``retention``); ``args``: the arguments as given, when
        they are not yet those the declaration keeps."""
        spec = self.spec() if args is None else dataclasses.replace(self.spec(), args=args)
        return [(RETRY_FIELDS.get(name, name), message) for name, message in spec.problems()]

    def limit_fields(self) -> dict[str, Any]:
        if isinstance(self.retention, timedelta):
            return {"keep_for": self.retention, "keep_last": None}
        return {"keep_for": None, "keep_last": self.retention}

    def record_fields(self) -> dict[str, Any]:
        """The ``Schedule`` columns this declaration sets (timing included)."""
        return {
            "job": self.job,
            **self.timing.record_fields(),
            "max_delay": self.max_delay,
            "misfire": self.misfire.value,
            "max_catchup": self.max_catchup,
            "overlap": self.overlap.value,
            "max_attempts": self.retry.max_attempts,
            "backoff": self.retry.backoff,
            "max_backoff": self.retry.max_backoff,
            "timeout": self.timeout,
            "operating_owner": self.operating_owner,
            "record_owner": self.record_owner,
            "status": self.status,
            "decider": self.decider,
            "decide_by": self.decide_by,
            "args": self.args,
            "priority": self.priority,
            "queue": self.queue,
        }


SKIPPED_CHOICES = "'shift' (run at the first instant after the gap) or 'skip' (do not run that day)"
REPEATED_CHOICES = (
    "'first' (run once, at the first of the two), 'last' (once, at the second) or 'both' (twice)"
)


def local_time_gaps(timing: Timing) -> list[tuple[str, str]]:
    """What a business-local (non-UTC) wall-clock timing (``cron``, ``rrule``: any
    ``Timing.local``) leaves unsaid, as (field, message): its reason, and its explicit DST
    choices. Empty for UTC and for elapsed-time timings."""
    if not timing.local:
        return []
    gaps = []
    if not timing.reason:
        maker = timing.kind  # a wall-clock kind's maker is named for it: cron(), rrule()
        gaps.append(
            (
                "timing.reason",
                f"a schedule in {timing.zone} (not UTC) says why: {maker}(..., reason='...'), "
                "for example 'statements go out at 09:00 for readers in New York'",
            )
        )
    if "skipped" not in timing.chosen:
        gaps.append(
            (
                "timing.skipped",
                f"choose what a local time that does not exist in {timing.zone} (spring "
                f"forward) does: skipped={SKIPPED_CHOICES}",
            )
        )
    if "repeated" not in timing.chosen:
        gaps.append(
            (
                "timing.repeated",
                f"choose what a local time that occurs twice in {timing.zone} (fall back) "
                f"does: repeated={REPEATED_CHOICES}",
            )
        )
    return gaps


def _first_problem(d: Declaration, args: object) -> tuple[str, str] | None:
    """The first (field, message) wrong with ``d``: its departure, then its fields (``args``:
    as given), its timing's own and its arguments."""
    if d.departure is not None and (
        not isinstance(d.departure, Departure) or d.departure.rule != "separation"
    ):
        return (
            "departure",
            "a schedule records a Departure(..., rule='separation') from being declared "
            f"in a schedules module, got {d.departure!r}",
        )
    problems = d.problems(args=args)
    if problems:
        return problems[0]
    if d.job in registry.names():  # its handler is registered: its parameters take the args
        unfit = registry.get(d.job).parameters.problem(d.args)
        if unfit is not None:
            return ("args", unfit)
    return None


def _job_and_args(
    key: str, job: str, task: Any, args: Any, kwargs: Any, queue: str, priority: int
) -> tuple[str, dict[str, Any] | None, str, int]:
    """The job a declaration names, its arguments, its queue and its priority: ``job``,
    ``args``, ``queue`` (else ``"default"``) and ``priority`` as given (``NOT_GIVEN``: the
    record defaults decide), or, for a ``task=`` schedule, the Tasks backend's job, the task's
    arguments, and ``queue`` and ``priority``, else the task's own (``task_schedules``)."""
    if task is None:
        if kwargs is not None:
            raise InvalidSchedule(
                key, "kwargs", "only a task= schedule takes kwargs=; a job's are args={...}"
            )
        if job is NOT_GIVEN:
            raise InvalidSchedule(key, "job", "name the job to run (job=...) or a task (task=...)")
        return job, args, DEFAULT_QUEUE if queue is NOT_GIVEN else queue, priority
    if job is not NOT_GIVEN:
        raise InvalidSchedule(key, "task", "give job= or task=, not both")
    from .task_schedules import TaskScheduleError, task_schedule

    try:
        job, task_args = task_schedule(
            task,
            args,
            kwargs,
            None if queue is NOT_GIVEN else queue,
            None if priority is NOT_GIVEN else priority,
        )
    except TaskScheduleError as exc:
        raise InvalidSchedule(key, exc.field, exc.message) from None
    return job, task_args, task_args["queue"], task_args["priority"]


def schedule(
    key: str,
    *,
    job: str = NOT_GIVEN,
    timing: Timing,
    operating_owner: str = NOT_GIVEN,
    record_owner: str = NOT_GIVEN,
    status: str = NOT_GIVEN,
    retention: timedelta | int = NOT_GIVEN,
    tenant: str = "",
    max_delay: timedelta = NOT_GIVEN,
    misfire: Misfire | str = NOT_GIVEN,
    max_catchup: int = NOT_GIVEN,
    overlap: Overlap | str = NOT_GIVEN,
    retry: Retry | None = None,
    timeout: timedelta = NOT_GIVEN,
    decider: str = NOT_GIVEN,
    decide_by: dt.date | None = None,
    args: dict[str, Any] | list[Any] | tuple[Any, ...] | None = None,
    priority: int = NOT_GIVEN,
    queue: str = NOT_GIVEN,
    register: bool = True,
    departure: Departure | None = None,
    task: Any = None,
    kwargs: dict[str, Any] | None = None,
) -> Declaration:
    """Declare a schedule record; see docs/schedules.md for every field and its default.

    A field left out is taken from ``DJANGO_JOBS["DEFAULTS"]``, then from the built-in
    default; the owners, the status and the retention have none built in. Raises
    ``InvalidSchedule`` naming the schedule and the first invalid field, or every required
    field that neither the declaration nor the defaults give. With ``register`` (the default,
    for ``schedules.py`` modules) the declaration is added to the set that ``manage.py jobs
    sync`` writes.

    ``task=`` (instead of ``job=``) runs a ``@task`` of Django's Tasks framework with ``args``
    (a list) and ``kwargs`` (a dict), on ``queue`` if given, else on the task's ``queue_name``,
    at ``priority`` if given, else the task's: see ``task_schedules``.
    """
    job, args, queue, priority = _job_and_args(key, job, task, args, kwargs, queue, priority)
    given, missing = completed(
        {
            "operating_owner": operating_owner,
            "record_owner": record_owner,
            "status": status,
            "retention": retention,
            "decider": decider,
            "max_delay": max_delay,
            "misfire": misfire,
            "max_catchup": max_catchup,
            "overlap": overlap,
            "retry": NOT_GIVEN if retry is None else retry,
            "timeout": timeout,
            "priority": priority,
        },
        conf.record_defaults(),
    )
    if missing:
        raise InvalidSchedule(
            key,
            ", ".join(missing),
            "not given, and DJANGO_JOBS['DEFAULTS'] gives no default for "
            f"{'it' if len(missing) == 1 else 'them'}: pass "
            f"{', '.join(f'{name}=' for name in missing)} to schedule(...) or set them in "
            "DJANGO_JOBS['DEFAULTS'] (docs/schedules.md, Record defaults)",
        )
    fields = {name: value for name, value in given.items() if value is not NOT_GIVEN}
    misfire, overlap = fields.get("misfire", Misfire.SKIP), fields.get("overlap", Overlap.SKIP)
    # An unknown policy value stays as given and is reported below with the other problems.
    with contextlib.suppress(ValueError):
        misfire = Misfire(misfire)
    with contextlib.suppress(ValueError):
        overlap = Overlap(overlap)
    kept_args, _ = arguments(args)  # as the record keeps them; the spec says what is wrong
    declaration = Declaration(
        key=key,
        job=job,
        timing=timing,
        operating_owner=fields["operating_owner"],
        record_owner=fields["record_owner"],
        status=fields["status"],
        retention=fields["retention"],
        tenant=tenant,
        max_delay=fields.get("max_delay", Declaration.max_delay),
        misfire=misfire,  # type: ignore[arg-type]
        max_catchup=fields.get("max_catchup", Declaration.max_catchup),
        overlap=overlap,  # type: ignore[arg-type]
        retry=fields["retry"] if "retry" in fields else Retry(),
        timeout=fields.get("timeout", Declaration.timeout),
        decider=fields.get("decider", Declaration.decider),
        decide_by=decide_by,
        args=kept_args if kept_args is not None else {},
        priority=fields.get("priority", Declaration.priority),
        queue=queue,
        module=sys._getframe(1).f_globals.get("__name__", ""),
        departure=departure,
    )
    problem = _first_problem(declaration, args)
    if problem is not None:
        raise InvalidSchedule(key, *problem)
    if register:
        declared.add(declaration)
    return declaration


class Declared:
    """The declarations made by ``schedules.py`` modules, by (tenant, key)."""

    def __init__(self) -> None:
        self._items: dict[tuple[str, str], Declaration] = {}

    def add(self, declaration: Declaration) -> None:
        ident = (declaration.tenant, declaration.key)
        existing = self._items.get(ident)
        if existing is not None and existing != declaration:
            raise InvalidSchedule(
                declaration.key, "key", "is declared twice with different fields; keys are unique"
            )
        self._items[ident] = declaration

    def remove(self, tenant: str, key: str) -> None:
        self._items.pop((tenant, key), None)

    def all(self) -> list[Declaration]:
        return [self._items[k] for k in sorted(self._items)]

    def get(self, tenant: str, key: str) -> Declaration | None:
        """The declaration of (tenant, key) this process imported, if any."""
        return self._items.get((tenant, key))


declared = Declared()
