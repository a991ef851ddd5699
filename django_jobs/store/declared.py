"""Rows written in bulk by ``jobs sync``: new schedules with their Limits, runbooks and audit
records, each kind in one ``COPY`` (an ``INSERT`` of thousands of rows costs several times
more, most of it in building and quoting its parameters).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import connection
from django.db.models import Field, Model
from psycopg import sql

from ..models import AuditRecord, Limit, Runbook, Schedule
from ._sql import TABLES, _rows, load_queries

# What each model's COPY writes: every concrete column, the primary key only where the
# caller assigned it (schedules: their Limits and runbooks refer to it).
_COPIED: dict[type[Model], tuple[str, bool]] = {
    Schedule: ("copy_schedules", True),
    Limit: ("copy_limits", False),
    Runbook: ("copy_runbooks", False),
    AuditRecord: ("copy_audit", False),
}


def _fields(model: type[Model]) -> list[Field[Any, Any]]:
    with_pk = _COPIED[model][1]
    return [f for f in model._meta.concrete_fields if with_pk or not f.primary_key]


def _columns(model: type[Model]) -> str:
    names = (sql.Identifier(f.column or f.attname) for f in _fields(model))
    return sql.SQL(", ").join(names).as_string(None)


QUERIES = load_queries(
    "declared",
    schedule_columns=_columns(Schedule),
    limit_columns=_columns(Limit),
    runbook_columns=_columns(Runbook),
    audit_columns=_columns(AuditRecord),
)


def reserve_schedule_ids(count: int) -> list[int]:
    """``count`` new primary keys of the schedule table."""
    if count == 0:
        return []
    return [
        r[0]
        for r in _rows(
            QUERIES["reserve_schedule_ids"], {"table": TABLES["schedule"], "count": count}
        )
    ]


def copy_in(objects: Sequence[Model]) -> None:
    """Insert ``objects`` (unsaved, of one model: ``Schedule`` with its primary key set,
    ``Limit``, ``Runbook`` or ``AuditRecord``) with one ``COPY``, each value prepared as the
    model's field prepares it for a save."""
    if not objects:
        return
    model = type(objects[0])
    fields = _fields(model)
    with connection.cursor() as cursor, cursor.cursor.copy(QUERIES[_COPIED[model][0]]) as copy:
        for obj in objects:
            copy.write_row(
                [f.get_db_prep_save(getattr(obj, f.attname), connection) for f in fields]
            )
