"""The one writer of audit records.

Every action that must be answerable later (an operator's replay, disable or purge, a sync's
changes, the planner's misfire summaries) is recorded through :func:`record`, in the caller's
transaction. A project that names ``DJANGO_JOBS["AUDIT_LOG"]`` receives every record there;
otherwise records are ``AuditRecord`` rows.

Arguments are kept as the pages show them: ``before`` and ``after`` (a run-now's arguments, a
schedule's before and after a change, ...) are redacted (``safe_error.redacted_json``, with the
project's ``REDACT_PATTERNS``) before a record is written or handed to ``AUDIT_LOG``, so a
record, which retention never purges, holds no secret the pages would hide.

Actors are either users (named, and identified by primary key, which a renamed or reused
username cannot take over) or one of the system's own names (``django_jobs.sync``,
``django_jobs.planner``), which have no id.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Any, cast

from django.utils.module_loading import import_string

from .conf import get_settings
from .exceptions import JobsError
from .models import AuditRecord
from .safe_error import redacted_json
from .validation import printable

# The system's own actors (no user id): the plan pass and automatic retention.
PLANNER = "django_jobs.planner"
RETENTION = "django_jobs.retention"
# Rows per INSERT when records are written in bulk (a sync of thousands of schedules).
BULK_BATCH = 2000


@dataclass(frozen=True)
class Actor:
    """Who an audit record names: the username when it acted and the user's primary key
    (None for the system's own names)."""

    name: str
    id: str | None


def actor_of(actor: Any) -> Actor:
    """The audit identity of a user or a system name; refuses a name a record cannot hold."""
    if isinstance(actor, str):  # the system's own actors: django_jobs.sync, ...
        return Actor(actor_name(actor), None)
    pk = getattr(actor, "pk", None)
    return Actor(actor_name(actor), None if pk is None else str(pk))


def actor_name(actor: Any) -> str:
    """The name an audit record keeps for ``actor``: 1-200 printable characters."""
    name = str(actor.get_username() if hasattr(actor, "get_username") else actor)
    if not name.strip() or len(name) > 200 or not printable(name):
        raise JobsError(
            f"actor: a name of 1-200 printable characters is needed for the audit record, "
            f"got {name[:50]!r}{'...' if len(name) > 50 else ''}"
        )
    return name


def _jsonable(value: Any) -> Any:
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    return value


def _redacted(change: Mapping[str, Any] | None, patterns: tuple[str, ...]) -> dict[str, Any]:
    """A record's ``before`` or ``after``, JSON-ready and redacted as the pages show it."""
    shown = redacted_json({k: _jsonable(v) for k, v in (change or {}).items()}, patterns)
    return cast(dict[str, Any], shown)  # a dict with str keys stays one


def entry(
    *,
    at: datetime,
    actor: Any,
    action: str,
    tenant: str,
    schedule_id: int | None,
    reason: str,
    target_type: str = "schedule",
    target_id: str | None = None,
    before: Mapping[str, Any] | None = None,
    after: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The fields of one audit record: the target is the schedule itself unless
    ``target_type`` and ``target_id`` name something of it (an occurrence)."""
    who = actor_of(actor)
    patterns = get_settings().REDACT_PATTERNS
    return {
        "at": at,
        "actor": who.name,
        "actor_id": who.id,
        "action": action,
        "tenant": tenant,
        "schedule_id": schedule_id,
        "target_type": target_type,
        "target_id": target_id if target_id is not None else str(schedule_id),
        "reason": reason,
        "before": _redacted(before, patterns),
        "after": _redacted(after, patterns),
    }


def record(**fields: Any) -> None:
    """Record one action (the keyword arguments of :func:`entry`) in the caller's
    transaction, in the project's audit log when ``DJANGO_JOBS["AUDIT_LOG"]`` names one
    (called with the record's fields, ``actor_id`` among them), otherwise as an
    ``AuditRecord``."""
    record_all([entry(**fields)])


def record_all(
    entries: Sequence[dict[str, Any]],
    *,
    insert: Callable[[Sequence[AuditRecord]], object] | None = None,
) -> None:
    """Record every one of ``entries`` (each made by :func:`entry`) in the caller's
    transaction: one call of the project's audit log each, or ``AuditRecord`` rows inserted
    together (by ``insert``, the store's bulk writer for a sync of thousands; by default one
    bulk INSERT)."""
    audit_log = get_settings().AUDIT_LOG
    if audit_log:
        write = import_string(audit_log)
        for fields in entries:
            write(**fields)
        return
    rows = [AuditRecord(**fields) for fields in entries]
    if insert is not None:
        insert(rows)
    else:
        AuditRecord.objects.bulk_create(rows, batch_size=BULK_BATCH)
