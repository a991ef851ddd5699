"""Schedules that run a ``@task`` of Django's Tasks framework: ``schedule(key, task=build_report,
args=[...], kwargs={...}, timing=...)`` (``declarations.schedule``).

Such a schedule names the job of the task's ``JobsBackend`` alias (``django_jobs.tasks:<alias>``)
and keeps, as its arguments, what ``JobsBackend.enqueue`` writes for a task: its path, its
alias, its positional and keyword arguments (JSON as the framework's ``normalize_json`` makes
them), its queue and priority. So each occurrence runs the task through the Tasks handler
(``tasks.run_task``), under the schedule's own policies (retry, timeout, overlap, misfire,
retention), and its result is the framework's (``get_result``). The handler trusts such a
schedule as code: it is declared in a ``schedules.py`` (origin ``code``); a run-time schedule
or a run-now with arguments never names the alias's job (``registry.runtime_problem``).

Checked when declared: the object is a ``Task`` of an alias ``TASKS`` sets to ``JobsBackend``,
its arguments are JSON within the bounds of a task's, and they bind to the task function's
parameters. A problem is ``(field, message)``; the declaration names the schedule.
"""

from __future__ import annotations

import inspect
from typing import Any

from . import conf
from .tasks import Task, TaskException, TaskLimitExceeded, _kept, job_name, normalize_json

Problem = tuple[str, str]


def task_schedule(
    task: Any,
    args: object,
    kwargs: object,
    queue: str | None = None,
    priority: int | None = None,
) -> tuple[str, dict[str, Any]]:
    """The job and the arguments of a schedule that runs ``task`` with ``args`` and
    ``kwargs``, on ``queue`` if given (the task as ``task.using(queue_name=queue)``), else on
    the task's own ``queue_name``, and at ``priority`` if given, else the task's own; raises
    ``TaskScheduleError`` with the field and what is wrong."""
    if not isinstance(task, Task):
        raise TaskScheduleError(
            "task",
            "a function decorated with Django's @task (django.tasks.task, or on Django 5.2 "
            f"django_tasks.task), got {type(task).__name__} {_named(task)}",
        )
    path, alias = task.module_path, task.backend
    if alias not in conf.tasks_backends():
        raise TaskScheduleError(
            "task",
            f"task {path} is of backend {alias!r}, and TASKS[{alias!r}] is not "
            "django_jobs.tasks.JobsBackend: only its tasks are run by runworker; "
            "@task(backend=...) names the alias",
        )
    if queue is not None and queue != task.queue_name:
        try:  # the framework checks the queue against the alias's QUEUES
            task = task.using(queue_name=queue)
        except TaskException as exc:  # its InvalidTask (InvalidTaskError in the backport)
            raise TaskScheduleError(
                "queue", f"task {path} cannot run on queue {queue!r}: {exc}"
            ) from None
    if priority is not None and priority != task.priority:
        try:  # the framework checks the priority's range
            task = task.using(priority=priority)
        except TaskException as exc:
            raise TaskScheduleError(
                "priority", f"task {path} cannot run at priority {priority!r}: {exc}"
            ) from None
    given_args = [] if args is None else args
    given_kwargs = {} if kwargs is None else kwargs
    if not isinstance(given_args, list | tuple):
        raise TaskScheduleError(
            "args",
            f"a task's positional arguments: a list, got {type(given_args).__name__}; its "
            "keyword arguments go in kwargs={...}",
        )
    if not isinstance(given_kwargs, dict):
        raise TaskScheduleError(
            "kwargs", f"a task's keyword arguments: a dict, got {type(given_kwargs).__name__}"
        )
    for field, value in (("args", given_args), ("kwargs", given_kwargs)):
        try:
            normalize_json(value)
        except (TypeError, ValueError) as exc:
            raise TaskScheduleError(field, f"{exc}; a task's arguments must be JSON") from None
    _check_binding(task, list(given_args), given_kwargs)
    try:
        payload = _kept(
            {
                "task": path,
                "backend": alias,
                "args": normalize_json(list(given_args)),
                "kwargs": normalize_json(dict(given_kwargs)),
                "queue": task.queue_name,
                "priority": int(task.priority),
            },
            f"task {path!r} (backend {alias!r})",
            arguments=True,
        )
    except TaskLimitExceeded as exc:
        raise TaskScheduleError("args", str(exc)) from None
    return job_name(alias), payload


class TaskScheduleError(ValueError):
    """What is wrong with a ``task=`` schedule: ``field`` and ``message``."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def _check_binding(task: Any, args: list[Any], kwargs: dict[str, Any]) -> None:
    """The arguments bind to the task function's parameters (after its context)."""
    try:
        signature = inspect.signature(task.func)
    except (TypeError, ValueError):  # no signature to read: the run will say
        return
    plain = [p.replace(annotation=inspect.Parameter.empty) for p in signature.parameters.values()]
    signature = signature.replace(parameters=plain, return_annotation=inspect.Signature.empty)
    context = [None] if task.takes_context else []
    try:
        signature.bind(*context, *args, **kwargs)
    except TypeError as exc:
        field = "kwargs" if kwargs and "keyword" in str(exc) else "args"
        raise TaskScheduleError(
            field, f"task {task.module_path}{signature} does not take them: {exc}"
        ) from None


def _named(value: object) -> str:
    name = getattr(value, "__qualname__", None) or getattr(value, "__name__", None)
    return repr(name) if name else repr(value)[:80]
