"""Enqueued work: the occurrence ``enqueue()`` writes, in the caller's transaction, and the
Tasks backend's task paths (``TaskPath``), recorded with the occurrences of their tasks."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from psycopg.types.json import Jsonb

from ..scheduling.timing import check_instant
from ._sql import _named_rows, load_queries
from .replicas import CHANNEL

QUERIES = load_queries("enqueue")


@dataclass(frozen=True)
class EnqueueWrite:
    """What one enqueue writes (``None``: nothing, there is no policy record yet)."""

    created: bool  # False: the identity existed already (a key enqueued before)


@dataclass(frozen=True)
class TaskPathRecord:
    """The path of a ``Task`` enqueued through ``JobsBackend`` (backend ``alias``), as the
    ``Task`` object reported it, recorded with its occurrence at ``at`` (the enqueue's
    instant)."""

    alias: str
    path: str
    at: datetime


def enqueue(
    occurrence_id: UUID,
    *,
    tenant: str,
    policy_key: str,
    at: datetime,
    args: dict[str, Any],
    priority: int | None,
    queue: str | None = None,
    task: TaskPathRecord | None = None,
) -> EnqueueWrite | None:
    """One occurrence of the policy record ``(tenant, policy_key)`` at ``at``, trigger
    ``enqueued``, on ``queue`` (``None``: the record's), and the NOTIFY that wakes replicas
    when the caller commits. One statement.
    ``None`` when there is no such record (the caller creates it and calls again); with an
    existing ``occurrence_id`` nothing changes (``created`` False). An ``at`` outside the
    window of instants (``timing.check_instant``) is refused (``InvalidTiming``), never
    written: a page renders every row. With ``task``, its path is recorded for its alias in
    the same statement (an existing row is left as it is), so it is recorded exactly when the
    occurrence may be: at the caller's commit."""
    params = {
        "id": occurrence_id,
        "tenant": tenant,
        "key": policy_key,
        "at": check_instant("at", at),
        "args": Jsonb(args),
        "priority": priority,
        "queue": queue,
        "channel": CHANNEL,
        "reason": "enqueue",
    }
    if task is not None:
        params |= {"task_alias": task.alias, "task_path": task.path, "at_enqueue": task.at}
    (row,) = _named_rows(QUERIES["enqueue" if task is None else "enqueue_task"], params)
    if not row.recorded:
        return None
    return EnqueueWrite(created=row.created)


def task_path_recorded(alias: str, path: str) -> bool:
    """Whether ``path`` was recorded for the Tasks backend alias ``alias`` (``enqueue`` with
    a ``task``): the only task paths the Tasks handler may import."""
    (row,) = _named_rows(QUERIES["task_path_recorded"], {"alias": alias, "path": path})
    return bool(row.recorded)
