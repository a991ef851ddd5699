"""The Tasks framework the suite runs on, by one set of names: Django 6's ``django.tasks``,
or on Django 5.2 the ``django_tasks`` backport, whichever ``django_jobs.tasks`` found
(``FRAMEWORK``). The backport names two exceptions differently (``InvalidTaskError``,
``InvalidTaskBackendError``), logs as ``django_tasks`` and lacks a few later additions
(``DJANGO_6`` says which framework this is)."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any, overload

from django_jobs.tasks import FRAMEWORK

_root: Any = importlib.import_module(FRAMEWORK)
_base: Any = importlib.import_module(f"{FRAMEWORK}.base")
_exceptions: Any = importlib.import_module(f"{FRAMEWORK}.exceptions")

DJANGO_6 = FRAMEWORK == "django.tasks"
# The logger the framework's signal receivers write to.
LOGGER = "django.tasks" if DJANGO_6 else "django_tasks"

task_backends: Any = _root.task_backends
default_task_backend: Any = _root.default_task_backend
DEFAULT_TASK_QUEUE_NAME: str = _root.DEFAULT_TASK_QUEUE_NAME
Task: Any = _base.Task
TaskContext: Any = _base.TaskContext
TaskResultStatus: Any = _base.TaskResultStatus
TASK_MIN_PRIORITY: int = _base.TASK_MIN_PRIORITY
TASK_MAX_PRIORITY: int = _base.TASK_MAX_PRIORITY
BaseTaskBackend: Any = importlib.import_module(f"{FRAMEWORK}.backends.base").BaseTaskBackend
InvalidTask: Any = getattr(_exceptions, "InvalidTask", None) or _exceptions.InvalidTaskError
InvalidTaskBackend: Any = (
    getattr(_exceptions, "InvalidTaskBackend", None) or _exceptions.InvalidTaskBackendError
)
TaskResultDoesNotExist: Any = _exceptions.TaskResultDoesNotExist
TaskResultMismatch: Any = _exceptions.TaskResultMismatch


@overload
def task(function: Callable[..., Any], /) -> Any: ...
@overload
def task(**options: Any) -> Callable[[Callable[..., Any]], Any]: ...
def task(function: Callable[..., Any] | None = None, /, **options: Any) -> Any:
    """The framework's ``@task`` and ``@task(...)``."""
    return _root.task(function, **options)
