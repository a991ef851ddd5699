"""The Tasks framework's view of an occurrence of a ``JobsBackend`` alias's job (``TaskResult``),
and ``task_finished``, sent once the occurrence's end is stored.

A result is read from the occurrence and its attempts: its status from the occurrence's state,
one ``TaskError`` per failed attempt (the exception's importable class path and its stored,
redacted traceback), the return value the completion kept. ``task_finished`` is sent from the
alerts the worker sends after the write that recorded the end committed
(``occurrence_completed``, ``occurrence_dead``, ``occurrence_skipped``), with the result read
back: what it reports is what ``get_result`` returns.
"""

from __future__ import annotations

import builtins
import datetime as dt
from typing import Any
from uuid import UUID

from . import signals
from .registry import TASKS_JOB_PREFIX
from .tasks import (
    JobsBackend,
    TaskError,
    TaskResult,
    TaskResultDoesNotExist,
    TaskResultStatus,
    task_finished,
)

# Occurrence states as the framework's statuses.
_STATUS = {
    "scheduled": TaskResultStatus.READY,
    "failed": TaskResultStatus.READY,  # waiting for its next attempt
    "processing": TaskResultStatus.RUNNING,
    "completed": TaskResultStatus.SUCCESSFUL,
    "dead": TaskResultStatus.FAILED,
    "skipped": TaskResultStatus.FAILED,
    "cancelled": TaskResultStatus.FAILED,
}

# The error types the store records by a bare name of its own (``store.WORKER_LOST``,
# ``store.TENANT_MISMATCH``), as the classes that stand for them.
_RECORDED = {
    "WorkerLost": "django_jobs.exceptions.WorkerLost",
    "TenantMismatch": "django_jobs.exceptions.TenantMismatch",
}


def read_result(task: Any, occurrence_id: UUID, alias: str) -> Any:
    """The framework's view of the occurrence ``occurrence_id`` of ``alias``'s job (enqueued
    through the backend, or of a schedule declared with ``task=``); ``task`` is read from its
    arguments when not given."""
    from .models import Occurrence
    from .tasks import _task, job_name

    try:
        occurrence = Occurrence.objects.select_related("schedule").get(
            pk=occurrence_id, schedule__job=job_name(alias)
        )
    except Occurrence.DoesNotExist:
        raise TaskResultDoesNotExist(str(occurrence_id)) from None
    payload = occurrence.args
    attempts = occurrence.attempts_so_far()
    errors = [
        TaskError(exception_class_path=class_path(a.error_type), traceback=a.error_message)
        for a in attempts
        if a.error_type
    ]
    if occurrence.state == "dead" and (not errors or not attempts):
        errors.append(
            TaskError(
                exception_class_path=class_path(occurrence.last_error_type),
                traceback=occurrence.last_error_message,
            )
        )
    enqueued = payload.get("enqueued_at")
    result = TaskResult(
        task=task or _task(payload, alias),
        id=str(occurrence.pk),
        status=_STATUS[occurrence.state],
        # Work a schedule planned was put in line at its instant.
        enqueued_at=dt.datetime.fromisoformat(enqueued) if enqueued else occurrence.scheduled_at,
        started_at=attempts[0].started_at if attempts else None,
        last_attempted_at=attempts[-1].started_at if attempts else None,
        finished_at=occurrence.finished_at if occurrence.state != "failed" else None,
        args=payload.get("args", []),
        kwargs=payload.get("kwargs", {}),
        backend=alias,
        errors=errors,
        worker_ids=[a.replica for a in attempts],
    )
    object.__setattr__(result, "_return_value", occurrence.result)
    return result


def class_path(error_type: str) -> str:
    """A stored error type as a dotted path of an exception class the framework can import
    (``TaskError.exception_class``): builtins by their module, the store's own records by the
    classes of ``django_jobs.exceptions`` that stand for them; a bare name that is neither (a
    redacted one) as ``JobsError``."""
    if "." in error_type:
        return error_type
    if error_type in _RECORDED:
        return _RECORDED[error_type]
    found = getattr(builtins, error_type, None) if error_type else None
    if isinstance(found, type) and issubclass(found, BaseException):
        return f"builtins.{error_type}"
    return "django_jobs.exceptions.JobsError"


def _send_finished(sender: object, event: signals.OccurrenceEvent, **kwargs: object) -> None:
    """``task_finished`` for an occurrence of an alias's job whose end was stored."""
    if not event.job.startswith(TASKS_JOB_PREFIX) or not task_finished.has_listeners():
        return
    alias = event.job.removeprefix(TASKS_JOB_PREFIX)
    result = read_result(None, UUID(str(event.occurrence_id)), alias)
    if result.status in (TaskResultStatus.SUCCESSFUL, TaskResultStatus.FAILED):
        task_finished.send(sender=JobsBackend, task_result=result)


def connect_finished() -> None:
    """Send ``task_finished`` at each end of a task the worker stores (idempotent)."""
    for signal in (
        signals.occurrence_completed,
        signals.occurrence_dead,
        signals.occurrence_skipped,
    ):
        signal.connect(_send_finished, dispatch_uid="django_jobs.tasks.task_finished", weak=False)
