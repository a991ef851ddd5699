"""Django's Tasks framework on django_jobs: ``TASKS = {"default": {"BACKEND":
"django_jobs.tasks.JobsBackend"}}`` makes ``@task`` functions run on ``runworker``.

Works with Django 6's ``django.tasks`` and, on Django 5.2, with the ``django-tasks`` backport
(the ``tasks`` extra). Each backend alias has a job of its own, ``django_jobs.tasks:<alias>``
(registered at start-up when ``TASKS`` names this backend), whose enqueued work
(``services.enqueue``) carries the task's path, arguments, queue and enqueue instant as its
arguments. So a task gets what every occurrence gets: a fenced lease, bounded retries with
backoff, a dead letter, audited replay, retention, and the admin. Its policies are the
alias's ``OPTIONS`` (``TaskOptions``).

A task enqueued inside a transaction exists only if that transaction commits (no
``transaction.on_commit`` needed), and the NOTIFY that wakes the replicas is sent at the
commit. The result id is the occurrence's identity.

The handler trusts an occurrence's arguments only as far as their writer: it runs only the
occurrences of its alias's policy record (what ``JobsBackend.enqueue`` writes) and of
schedules declared in code with ``task=`` (``task_schedules``); a run-time schedule or run-now
with arguments can never name the alias's job (``registry.runtime_problem``). And the
task path it reads selects a ``Task`` object of this backend alias that the process defined,
or whose path ``JobsBackend.enqueue`` recorded for the alias (``TaskPath``: the path the
``Task`` object reported, never one read from arguments). It never imports any other path
(``known_task``).
"""

from __future__ import annotations

import datetime as dt
import importlib
import json
import math
import sys
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from uuid import UUID

from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.dispatch import receiver
from django.utils.module_loading import autodiscover_modules

from . import conf, validation
from .exceptions import ConfigurationError, JobsError, PermanentFailure
from .registry import TASKS_JOB_PREFIX, JobPolicies, registry
from .scheduling.policies import Retry
from .spec import queue_problem

if TYPE_CHECKING:
    from .worker.run import Run


def _framework() -> tuple[str, dict[str, Any]]:
    """Django 6's own ``django.tasks``, else the ``django_tasks`` backport: its name, and the
    names this module uses from it."""
    names = {
        ".base": ("Task", "TaskContext", "TaskError", "TaskResult", "TaskResultStatus"),
        ".backends.base": ("BaseTaskBackend",),
        ".exceptions": ("TaskException", "TaskResultDoesNotExist"),
        ".signals": ("task_enqueued", "task_finished", "task_started"),
    }
    # Where each keeps normalize_json (the JSON normalisation of arguments and results).
    for root, utils in (
        ("django.tasks", "django.utils.json"),
        ("django_tasks", "django_tasks.utils"),
    ):
        try:
            modules = {part: importlib.import_module(f"{root}{part}") for part in names}
            normalize = importlib.import_module(utils).normalize_json
        except (ImportError, AttributeError):
            continue
        found = {n: getattr(modules[part], n) for part, ns in names.items() for n in ns}
        # The backport names it InvalidTaskError.
        exceptions = modules[".exceptions"]
        invalid = getattr(exceptions, "InvalidTask", None) or exceptions.InvalidTaskError
        return root, {**found, "InvalidTask": invalid, "normalize_json": normalize}
    raise ImproperlyConfigured(
        "django_jobs.tasks.JobsBackend needs Django's Tasks framework: Django 6 "
        "(django.tasks), or on Django 5.2 the backport: pip install 'django-fenced-jobs[tasks]'"
    )


FRAMEWORK, _names = _framework()
Task: Any = _names["Task"]
TaskContext: Any = _names["TaskContext"]
TaskError: Any = _names["TaskError"]
TaskResult: Any = _names["TaskResult"]
TaskResultStatus: Any = _names["TaskResultStatus"]
BaseTaskBackend: Any = _names["BaseTaskBackend"]
TaskResultDoesNotExist: Any = _names["TaskResultDoesNotExist"]
TaskException: Any = _names["TaskException"]
InvalidTask: Any = _names["InvalidTask"]
task_enqueued: Any = _names["task_enqueued"]
task_finished: Any = _names["task_finished"]
task_started: Any = _names["task_started"]
normalize_json: Any = _names["normalize_json"]


class TaskArgumentsError(JobsError, TypeError, ValueError):
    """A task's arguments the framework's ``normalize_json`` refuses: a ``TypeError`` (an
    unsupported type) and a ``ValueError`` (bytes that are not UTF-8), as it raises either."""


class TaskLimitExceeded(JobsError, ValueError):
    """A task's arguments (at enqueue) or return value (after it ran) that the framework would
    take but django_jobs cannot keep: over its size (``validation.ARGS_MAX_BYTES``,
    ``RESULT_MAX_BYTES``) or nesting bound, a number JSON has no text for, a NUL character. A
    ``ValueError``, as the framework raises for a value it cannot take; the message says the
    limit."""


class TaskRefused(PermanentFailure):
    """An occurrence the handler does not run (dead at once, no retry): not of its alias's
    policy record, or naming no task of the alias that the process defined or whose path was
    recorded at enqueue."""


def job_name(alias: str) -> str:
    """The job that runs the tasks of backend ``alias``."""
    return f"{TASKS_JOB_PREFIX}{alias}"


@dataclass(frozen=True)
class TaskOptions:
    """A ``JobsBackend`` alias's ``OPTIONS``: the policies of its tasks (see docs/enqueue.md,
    "Django's Tasks framework").

    ``MAX_ATTEMPTS`` (3), ``BACKOFF_SECONDS`` (30), ``MAX_BACKOFF_SECONDS`` (600),
    ``TIMEOUT_SECONDS`` (900), ``RETENTION_DAYS`` (7), ``MAX_DELAY_SECONDS`` (none: never
    too late), ``OWNER`` (who answers for the alias's policy record; ``tasks``)."""

    policies: JobPolicies

    @classmethod
    def parse(cls, alias: str, options: dict[str, Any]) -> TaskOptions:
        known = {
            "MAX_ATTEMPTS": 3,
            "BACKOFF_SECONDS": 30,
            "MAX_BACKOFF_SECONDS": 600,
            "TIMEOUT_SECONDS": 900,
            "RETENTION_DAYS": 7,
            "MAX_DELAY_SECONDS": None,
            "OWNER": "tasks",
        }
        unknown = sorted(set(options) - set(known))
        if unknown:
            raise ConfigurationError(
                f"TASKS[{alias!r}]['OPTIONS']: unknown key(s) {', '.join(unknown)}; known: "
                f"{', '.join(known)}"
            )
        values = {**known, **options}
        where = f"TASKS[{alias!r}]['OPTIONS']"
        for key, value in values.items():
            numeric = key != "OWNER" and not (key == "MAX_DELAY_SECONDS" and value is None)
            if numeric and (
                not isinstance(value, int | float)
                or isinstance(value, bool)
                or not 0 <= value < math.inf
            ):
                raise ConfigurationError(f"{where}[{key!r}]: a number of 0 or more, got {value!r}")

        def duration(key: str, unit: str) -> Any:
            try:
                return dt.timedelta(**{unit: values[key]})
            except OverflowError:  # longer than any timedelta: the spec refuses it as given
                return values[key]

        delay = values["MAX_DELAY_SECONDS"]
        policies = JobPolicies(
            retry=Retry(
                max_attempts=int(values["MAX_ATTEMPTS"]),
                backoff=duration("BACKOFF_SECONDS", "seconds"),
                max_backoff=duration("MAX_BACKOFF_SECONDS", "seconds"),
            ),
            timeout=duration("TIMEOUT_SECONDS", "seconds"),
            retention=duration("RETENTION_DAYS", "days"),
            max_delay=None if delay is None else duration("MAX_DELAY_SECONDS", "seconds"),
            owner=str(values["OWNER"]),
        )
        # The bounds are the policy record's (``spec.py``); a problem is named by its key.
        problems = policies.problems()
        if problems:
            name, message = problems[0]
            raise ConfigurationError(f"{where}[{_OPTION_OF.get(name, name)!r}]: {message}")
        return cls(policies)


# The ``OPTIONS`` key that sets each field of the alias's policies (``JobPolicies``).
_OPTION_OF = {
    "retry.max_attempts": "MAX_ATTEMPTS",
    "retry.backoff": "BACKOFF_SECONDS",
    "retry.max_backoff": "MAX_BACKOFF_SECONDS",
    "timeout": "TIMEOUT_SECONDS",
    "retention": "RETENTION_DAYS",
    "max_delay": "MAX_DELAY_SECONDS",
    "owner": "OWNER",
}


def register_task_jobs() -> None:
    """Register the job of each alias of ``TASKS`` that names ``JobsBackend``: at start-up, at
    each enqueue (an alias added since), and when ``TASKS`` changes (``override_settings``,
    which also drops the jobs of the aliases it removed). Invalid ``OPTIONS`` raise
    ``ConfigurationError`` naming the alias and the key."""
    from .task_results import connect_finished

    connect_finished()
    for alias, options in conf.tasks_backends().items():
        name = job_name(alias)
        if name in registry.names():
            continue
        registry.register(name, run_task, policies=TaskOptions.parse(alias, options).policies)


@receiver(setting_changed)
def _tasks_changed(*, setting: str, **kwargs: Any) -> None:
    """``TASKS`` changed at run time: the jobs follow its ``JobsBackend`` aliases."""
    if setting != "TASKS":
        return
    aliases = {job_name(alias) for alias in conf.tasks_backends()}
    for name in registry.names():
        if name.startswith(TASKS_JOB_PREFIX) and name not in aliases:
            registry.unregister(name)
    register_task_jobs()


def run_task(run: Run) -> object:
    """The handler of every alias's job: calls the task the occurrence names with its
    arguments (and, for ``takes_context``, a ``TaskContext`` whose ``attempt`` is this run's
    attempt), and returns its return value made JSON (kept as the occurrence's result)."""
    alias = _own_alias(run)
    payload = run.args
    if payload.get("backend") != alias:
        raise TaskRefused(
            f"occurrence {run.occurrence_key} of backend {alias!r}'s job names backend "
            f"{payload.get('backend')!r}: not written by this backend's enqueue"
        )
    task = _task(payload, alias)
    args, kwargs = payload.get("args", []), payload.get("kwargs", {})
    wants_result = task.takes_context or task_started.has_listeners()
    result = _result(task, UUID(run.occurrence_key), alias) if wants_result else None
    if result is not None:
        task_started.send(sender=JobsBackend, task_result=result)
    if task.takes_context:
        value = task.call(TaskContext(task_result=result), *args, **kwargs)
    else:
        value = task.call(*args, **kwargs)
    # task_finished is sent once the worker stored the outcome (``task_results``).
    try:
        return _kept(normalize_json(value), f"task {task.module_path!r} (backend {alias!r})")
    except (TypeError, ValueError) as exc:  # normalize_json's refusal, or TaskLimitExceeded
        setattr(exc, _RESULT_NOT_KEPT, True)
        raise


# Set on the error of a return value that cannot be kept (``run_task``).
_RESULT_NOT_KEPT = "django_jobs_result_not_kept"


def _ends_at_once(exc: BaseException) -> bool:
    """Whether a task's failure makes it FAILED at once, never retried: it exited (``exit()``,
    ``SystemExit``) or was interrupted, or it returned a value that cannot be kept (another
    attempt would run the task, and its side effects, only to fail the same way)."""
    return isinstance(exc, SystemExit | KeyboardInterrupt) or getattr(exc, _RESULT_NOT_KEPT, False)


# django_jobs' own conventions checks (W024): the task function is the command it dispatches.
run_task.django_jobs_dispatches_its_arguments = True  # type: ignore[attr-defined]
# A task's failures are stored with their traceback (``TaskError.traceback``).
run_task.django_jobs_keeps_traceback = True  # type: ignore[attr-defined]
# Which of a task's failures end it at once (``_ends_at_once``).
run_task.django_jobs_final_errors = _ends_at_once  # type: ignore[attr-defined]


def _kept(value: Any, what: str, *, arguments: bool = False) -> Any:
    """``value``, made JSON by the framework (``normalize_json``), as the database keeps it
    (object keys as JSON writes them: ``{1: "one"}`` is ``{"1": "one"}``); or
    ``TaskLimitExceeded`` naming ``what`` and the limit."""
    if value is None:
        return None
    try:
        stored = json.loads(json.dumps(value, ensure_ascii=False))
    except (TypeError, ValueError, RecursionError) as exc:
        raise TaskLimitExceeded(f"{what}: {exc}") from None
    kept, problem = (validation.arguments if arguments else validation.result)(stored)
    if problem is not None:
        field = "its arguments" if arguments else "its return value"
        raise TaskLimitExceeded(f"{what}: {field}: {problem}")
    return kept


def _own_alias(run: Run) -> str:
    """The alias whose job the occurrence ``run`` runs, from its schedule: the alias's policy
    record, the only record ``JobsBackend.enqueue`` writes into (the default tenant, key
    ``@django_jobs.tasks:<alias>``, origin ``enqueue``), or a schedule declared in code with
    ``task=`` (origin ``code``: ``task_schedules``). Anything else naming the job (a run-time
    schedule, which ``registry.runtime_problem`` keeps from naming it anyway) is refused
    (``TaskRefused``)."""
    from .models import Origin
    from .services.enqueue import ScheduleOf, policy_key, schedule_of

    record = schedule_of(run.occurrence_key) or ScheduleOf(tenant="", key="", job="", origin="")
    tenant, key, job, origin = record.tenant, record.key, record.job, record.origin
    alias = job.removeprefix(TASKS_JOB_PREFIX)
    enqueued = tenant == "" and key == policy_key(job) and origin == Origin.ENQUEUE
    declared = origin == Origin.CODE and not key.startswith("@")
    if (
        not job.startswith(TASKS_JOB_PREFIX)
        or not (enqueued or declared)
        or alias not in conf.tasks_backends()
    ):
        raise TaskRefused(
            f"occurrence {run.occurrence_key} is not enqueued work of a Tasks backend alias "
            f"(schedule {tenant + '/' if tenant else ''}{key or '?'}, job {job or '?'}, origin "
            f"{origin or '?'}): the Tasks handler runs only what JobsBackend.enqueue wrote and "
            "schedules declared in code with task="
        )
    return alias


_discovery = threading.Lock()
_discovered = False


def known_task(path: object, alias: str) -> Any:
    """The ``Task`` of backend ``alias`` at ``path`` (its ``module_path``), or ``TaskRefused``.

    ``path`` is read from arguments, so it is imported only if ``JobsBackend.enqueue`` recorded
    it for ``alias``:

    1. A module the process has already imported is looked up (after importing, once, each
       installed app's ``tasks`` module, as ``jobs`` modules are found).
    2. Otherwise, if the path is recorded for ``alias`` (``TaskPath``, written at enqueue from
       the ``Task`` object itself), its module is imported: a task may live in any module, one
       the worker never imports on its own included. An unrecorded path is never imported.
    3. The object found must be a ``Task`` at that very path, of this alias, or of another
       whose path ``JobsBackend.enqueue`` recorded for this one (``using(backend=alias)``).
    """
    found = _defined(path)
    if found is None:
        _discover()
        found = _defined(path)
    if found is None and isinstance(path, str) and _recorded(path, alias):
        found = _imported(path)
    if not isinstance(found, Task) or found.module_path != path:
        raise TaskRefused(
            f"{str(path)[:200]!r} is not a task this process defined or JobsBackend.enqueue "
            f"recorded for backend {alias!r}: enqueue @task functions through the backend"
        )
    if found.backend != alias and not _recorded(str(path), alias):  # using(backend=alias)
        raise TaskRefused(f"task {path} belongs to backend {found.backend!r}, not {alias!r}")
    return found


def _discover() -> None:
    """Import each installed app's ``tasks`` module, once per process."""
    global _discovered
    if _discovered:
        return
    with _discovery:
        if not _discovered:
            autodiscover_modules("tasks")
            _discovered = True


def _recorded(path: str, alias: str) -> bool:
    from .services.enqueue import task_path_recorded

    return task_path_recorded(alias, path)


def _imported(path: str) -> object:
    """The object at the recorded ``path``, its module imported; None if there is no such
    module (any more: the refusal names the path). Any other error importing it is the
    module's own (a dependency it imports is missing, say): the run fails and is retried as
    any run's."""
    module_name, _, name = path.rpartition(".")
    if not module_name:
        return None
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if module_name == missing or module_name.startswith(f"{missing}."):
            return None
        raise
    return vars(module).get(name)


def _defined(path: object) -> object:
    """The object at ``path`` in a module already imported, or None (nothing is imported)."""
    if not isinstance(path, str):
        return None
    module_name, _, name = path.rpartition(".")
    module = sys.modules.get(module_name)
    return None if module is None else vars(module).get(name)


def _task(payload: dict[str, Any], alias: str) -> Any:
    task = known_task(payload.get("task"), alias)
    run_after = payload.get("run_after")
    return task.using(
        priority=payload.get("priority", task.priority),
        queue_name=payload.get("queue", task.queue_name),
        run_after=dt.datetime.fromisoformat(run_after) if run_after else None,
        backend=alias,
    )


def _result(task: Any, occurrence_id: UUID, alias: str) -> Any:
    from .task_results import read_result

    return read_result(task, occurrence_id, alias)


class JobsBackend(BaseTaskBackend):  # type: ignore[misc]
    """Tasks run by ``runworker`` replicas, fenced, retried and recorded as occurrences."""

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def validate_task(self, task: Any) -> None:
        """The framework's checks (as each ``Task`` is made, and at enqueue), and that its
        queue's name is one django_jobs can keep: a name the alias's ``QUEUES`` lists may be
        one ``runworker --queue`` and the occurrence's column cannot take (``a:b``)."""
        super().validate_task(task)
        problem = queue_problem(task.queue_name)
        if problem is not None:
            raise InvalidTask(
                f"Queue {task.queue_name!r} cannot be a queue of django_jobs.tasks.JobsBackend "
                f"(backend {self.alias!r}): a queue's name {problem}"
            )

    def enqueue(self, task: Any, args: Any, kwargs: Any) -> Any:
        """One occurrence of this alias's job, in the caller's transaction (see the module)."""
        from .services import now
        from .services.enqueue import enqueue_task

        self.validate_task(task)
        register_task_jobs()  # an alias added since start-up (override_settings(TASKS=...))
        enqueued_at = now()
        what = f"task {task.module_path!r} (backend {self.alias!r})"
        try:
            args, kwargs = normalize_json(list(args)), normalize_json(dict(kwargs))
        except (TypeError, ValueError) as exc:
            raise TaskArgumentsError(
                f"{what}: args: {exc}; a task's arguments must be JSON"
            ) from exc
        # The framework accepts a whole float (3.0); the record keeps the int.
        priority = int(task.priority)
        payload = _kept(
            {
                "task": task.module_path,
                "backend": self.alias,
                "args": args,
                "kwargs": kwargs,
                "queue": task.queue_name,
                "priority": priority,
                "run_after": task.run_after.isoformat() if task.run_after else None,
                "enqueued_at": enqueued_at.isoformat(),
            },
            what,
            arguments=True,
        )
        done = enqueue_task(
            job_name(self.alias),
            alias=self.alias,
            path=task.module_path,
            args=payload,
            at=task.run_after,
            priority=priority,
            queue=task.queue_name,
        )
        result = TaskResult(
            task=task,
            id=str(done.id),
            status=TaskResultStatus.READY,
            enqueued_at=enqueued_at,
            started_at=None,
            last_attempted_at=None,
            finished_at=None,
            args=payload["args"],
            kwargs=payload["kwargs"],
            backend=self.alias,
            errors=[],
            worker_ids=[],
        )
        task_enqueued.send(sender=type(self), task_result=result)
        return result

    def get_result(self, result_id: str) -> Any:
        try:
            occurrence_id = UUID(str(result_id))
        except ValueError:
            raise TaskResultDoesNotExist(str(result_id)) from None
        return _result(None, occurrence_id, self.alias)
