"""Schedule records and what hangs off them, their retention ``Limit`` and their ``Runbook``s:
the one writer of those rows for the services. A service decides each change (the rows it
passes are model instances it built or locked and changed), checks the actor's permission
and audits it in the same transaction; it never writes the rows itself. (The planner's own
moves of the recovery point are ``planning``'s, a one-off's retirement ``retention``'s.)

New rows are copied in, each kind with one ``COPY``: a sync's thousands of records, Limits,
runbooks and their audit records (an ``INSERT`` of thousands of rows costs several times
more, most of it in building and quoting its parameters), and the one record of an upsert or
of a first enqueue. A change is one ``UPDATE ... FROM unnest(...)`` (or ``INSERT ... ON
CONFLICT``) whatever the number of rows: each statement names the columns it writes, and
``_columns`` reads their values from the rows, each prepared as the model's field prepares it
for a save.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from django.db import connection
from django.db.models import Field, Model
from psycopg import sql

from ..models import AuditRecord, Limit, Runbook, Schedule
from ._sql import TABLES, _named_rows, load_queries

# What each model's COPY writes: every concrete column, the primary key only where the
# caller assigned it (schedules: their Limits and runbooks refer to it).
_COPIED: dict[type[Model], tuple[str, bool]] = {
    Schedule: ("copy_schedules", True),
    Limit: ("copy_limits", False),
    Runbook: ("copy_runbooks", False),
    AuditRecord: ("copy_audit", False),
}


def _copied_fields(model: type[Model]) -> list[Field[Any, Any]]:
    with_pk = _COPIED[model][1]
    return [f for f in model._meta.concrete_fields if with_pk or not f.primary_key]


def _column_list(model: type[Model]) -> str:
    names = (sql.Identifier(f.column or f.attname) for f in _copied_fields(model))
    return sql.SQL(", ").join(names).as_string(None)


QUERIES = load_queries(
    "schedules",
    schedule_columns=_column_list(Schedule),
    limit_columns=_column_list(Limit),
    runbook_columns=_column_list(Runbook),
    audit_columns=_column_list(AuditRecord),
)

# The columns each ``write_*`` statement writes: its parameters, ``%(<column>)s`` (choices'
# values are literals by now, ``load_queries``).
COLUMNS = {
    name: tuple(dict.fromkeys(re.findall(r"%\((\w+)\)s", query)))
    for name, query in QUERIES.items()
    if name.startswith("write_")
}


def _columns(statement: str, rows: Sequence[Model]) -> dict[str, list[Any]]:
    """The parameters of ``statement``: for each column it names, the list of that column's
    values of ``rows`` (of one model), in their order, each prepared as a save prepares it."""
    meta = type(rows[0])._meta
    params = {}
    for name in COLUMNS[statement]:
        field = meta.get_field(name)
        assert isinstance(field, Field), name  # a column, never a relation's other side
        params[name] = [
            field.get_db_prep_save(getattr(row, field.attname), connection) for row in rows
        ]
    return params


def _write(statement: str, rows: Sequence[Model]) -> None:
    """Run ``statement`` once for all of ``rows`` (nothing when there are none)."""
    if rows:
        with connection.cursor() as cursor:
            cursor.execute(QUERIES[statement], _columns(statement, rows))


def _copy(rows: Sequence[Model]) -> None:
    """Insert ``rows`` (unsaved, of one model of ``_COPIED``) with one ``COPY``. A refused row
    (a key taken, a constraint) raises Django's ``IntegrityError``, as a save would."""
    if not rows:
        return
    model = type(rows[0])
    fields = _copied_fields(model)
    with (
        connection.wrap_database_errors,
        connection.cursor() as cursor,
        cursor.cursor.copy(QUERIES[_COPIED[model][0]]) as copy,
    ):
        for row in rows:
            copy.write_row(
                [f.get_db_prep_save(getattr(row, f.attname), connection) for f in fields]
            )


def _reserve_ids(count: int) -> list[int]:
    """``count`` new primary keys of the schedule table."""
    if count == 0:
        return []
    params = {"table": TABLES["schedule"], "count": count}
    return [row.id for row in _named_rows(QUERIES["reserve_schedule_ids"], params)]


def insert_schedules(schedules: Sequence[Schedule]) -> None:
    """Insert new ``schedules`` as their caller built them (their first ``next_due_at``
    included) with one ``COPY``; those without a primary key get one here. They are saved
    instances afterwards, as after ``save()``."""
    unnumbered = [s for s in schedules if s.pk is None]
    for schedule, pk in zip(unnumbered, _reserve_ids(len(unnumbered)), strict=True):
        schedule.pk = pk
    _copy(schedules)
    for schedule in schedules:
        schedule._state.adding, schedule._state.db = False, connection.alias


def insert_limits(limits: Sequence[Limit]) -> None:
    """Insert the Limits of new schedules with one ``COPY``."""
    _copy(limits)


def insert_runbooks(runbooks: Sequence[Runbook]) -> None:
    """Insert the runbooks of new schedules with one ``COPY``."""
    _copy(runbooks)


def copy_audit(records: Sequence[AuditRecord]) -> None:
    """Insert audit records with one ``COPY`` (``audit.record_all``'s ``insert``): those of a
    sync of thousands of schedules."""
    _copy(records)


def write_records(schedules: Sequence[Schedule]) -> None:
    """Write the record of each of ``schedules``, changed by a sync, an upsert or the
    alignment of a policy record: the columns a declaration sets (``queue`` included),
    ``origin``, ``status`` and ``retired_at``, the recovery point (``next_due_at``,
    ``parked_*``) and ``updated_at``. A schedule whose queue changes takes its occurrences
    that wait to start (scheduled, or failed waiting for a retry) to the new queue; a
    running one, and a policy record's enqueued work, keep theirs. The caller locked each
    row and read it after the lock. One statement."""
    _write("write_records", schedules)


def write_status(schedules: Sequence[Schedule]) -> None:
    """Write ``status``, ``retired_at`` and ``updated_at`` of ``schedules`` (retired by a
    sync, or a retired one-off active again for its replay). One statement."""
    _write("write_status", schedules)


def write_disabled(schedule: Schedule) -> None:
    """Write what ``schedule`` holds about being disabled (``enabled``, ``disabled_by``,
    ``disabled_reason``, ``disabled_at``, ``paused_by_tenant``) and ``updated_at``."""
    _write("write_disabled", [schedule])


def write_enabled(schedule: Schedule) -> None:
    """Write ``schedule`` enabled: what it holds about being disabled, its parked columns and
    its ``next_due_at`` (unparked and due), and ``updated_at``."""
    _write("write_enabled", [schedule])


def write_limits(limits: Sequence[Limit]) -> None:
    """Create each of ``limits`` or change its schedule's Limit in place (``keep_for``,
    ``keep_last``). One statement."""
    _write("write_limits", limits)


def write_runbooks(runbooks: Sequence[Runbook]) -> None:
    """Create each of ``runbooks`` or bring its schedule's runbook of its kind to its texts.
    One statement."""
    _write("write_runbooks", runbooks)
