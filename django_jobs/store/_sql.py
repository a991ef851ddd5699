"""Shared SQL building blocks of the store: table names, row helpers and the guards several
statements share.
"""

from __future__ import annotations

import re
from collections import namedtuple
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from django.db import connection
from django.db.models import DateField, DateTimeField, DurationField
from psycopg import sql

from ..models import (
    CLAIMABLE_STATES,
    TERMINAL_STATES,
    Attempt,
    AttemptOutcome,
    AuditRecord,
    ConsumedOneOff,
    Limit,
    Occurrence,
    OccurrenceState,
    Origin,
    Runbook,
    Schedule,
    ScheduleStatus,
    Step,
    Trigger,
)
from ..scheduling.policies import TimingKind

# Table names come from the models' ``_meta``: a statement names ``{occurrence}``, never the
# table itself. (The short constants are kept for statements not yet moved to sql/.)
_MODELS = {
    "occurrence": Occurrence,
    "attempt": Attempt,
    "schedule": Schedule,
    "limit": Limit,
    "step": Step,
    "runbook": Runbook,
    "audit": AuditRecord,
    "consumed": ConsumedOneOff,
}
TABLES = {name: model._meta.db_table for name, model in _MODELS.items()}
OCC, ATT, SCH, LIM = TABLES["occurrence"], TABLES["attempt"], TABLES["schedule"], TABLES["limit"]
STEP, RUNBOOK, AUDIT, CONSUMED = (
    TABLES["step"],
    TABLES["runbook"],
    TABLES["audit"],
    TABLES["consumed"],
)

_TERMINAL = tuple(str(state) for state in TERMINAL_STATES)

# ``last_error_type`` of an occurrence whose lost attempts used up its ``max_attempts``.
WORKER_LOST = "WorkerLost"
# ``last_error_type`` of an occurrence whose tenant is not its schedule's (never run).
TENANT_MISMATCH = "TenantMismatch"

# Every state, outcome and kind a statement compares with or writes, bound as a parameter
# named after it (``%(processing)s``, ``%(terminal)s``): no state name is typed into SQL, so
# the models' choices are the only spelling. Django's psycopg backend binds client-side, so
# the server still sees literals and partial indexes on ``state`` keep matching.
VALUES: dict[str, Any] = {
    **{state.value: state.value for state in OccurrenceState},
    **{f"attempt_{o.value}": o.value for o in AttemptOutcome},
    **{f"status_{s.value}": s.value for s in ScheduleStatus},
    **{f"trigger_{t.value}": t.value for t in Trigger},
    **{f"origin_{o.value}": o.value for o in Origin},
    **{f"timing_{k.value}": k.value for k in TimingKind},
    "terminal": list(_TERMINAL),
    "claimable": [str(state) for state in CLAIMABLE_STATES],
    "one_off": [TimingKind.AT.value, TimingKind.AFTER.value],
    "worker_lost": WORKER_LOST,
    "tenant_mismatch": TENANT_MISMATCH,
}

SQL_DIR = Path(__file__).with_name("sql")


def load_queries(concern: str, **fragments: str) -> dict[str, str]:
    """The named queries of ``sql/<concern>.sql``, each after a ``-- name: <query>`` line.

    Tables are written ``{occurrence}``, ``{schedule}``... and filled in from the models'
    ``_meta`` (quoted with ``psycopg.sql.Identifier``); ``fragments`` fill other ``{name}``
    placeholders with SQL the caller composed (guards shared by several statements). Literal
    braces in a statement are doubled, as with ``str.format``.
    """
    text = (SQL_DIR / f"{concern}.sql").read_text()
    tables = {name: sql.Identifier(table) for name, table in TABLES.items()}
    parts = {name: sql.SQL(fragment) for name, fragment in fragments.items()}
    queries = {}
    for block in re.split(r"^-- name: ", text, flags=re.MULTILINE)[1:]:
        name, _, body = block.partition("\n")
        composed = sql.SQL(body.strip()).format(**tables, **parts)
        queries[name.strip()] = composed.as_string(None)
    return queries


def _rows(query: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
    """Run one statement with ``params`` (and the ``VALUES`` of every state); its rows."""
    with connection.cursor() as cursor:
        cursor.execute(query, {**VALUES, **params})
        return list(cursor.fetchall()) if cursor.description else []


def _named_rows(query: str, params: dict[str, Any]) -> list[Any]:
    """Rows as named tuples, their fields named by the statement's column names."""
    with connection.cursor() as cursor:
        cursor.execute(query, {**VALUES, **params})
        row = namedtuple("row", [column.name for column in cursor.description])  # type: ignore[misc]
        return [row(*values) for values in cursor.fetchall()]


def _not_paused(tenant: str, key: str) -> str:
    """SQL: the schedule is not named by the kill switch ``%(excluded)s`` (conf.py): a bare
    key in any tenant, ``'<tenant>/<key>'`` or ``'<tenant>/*'``. (``"*"`` is the caller's:
    nothing is planned or claimed then.)"""
    return f"""NOT ({key} = ANY(%(excluded)s::text[])
                OR {tenant} || '/' || {key} = ANY(%(excluded)s::text[])
                OR {tenant} || '/*' = ANY(%(excluded)s::text[]))"""


# Values PostgreSQL stores and Python cannot hold, so psycopg refuses to load them: an interval
# beyond timedelta's 999,999,999 days, an instant before year 1 or after 9999 ('infinity'). A
# row holding one is written behind django_jobs' back; statements that load rows leave it out
# (and the planner parks it, ``park_unreadable``), so it cannot fail every pass of every
# replica.
# Under a billion days: psycopg loads up to 999,999,999 days, counting a year as 365 days where
# extract(epoch ...) counts 365.25, so this bound never admits what psycopg refuses.
_PY_SECONDS = 86_400_000_000_000


def _loadable(column: str, kind: str) -> str:
    """SQL: ``column`` (of type ``kind``: interval, timestamptz or date) is NULL or loadable."""
    if kind == "interval":
        return f"({column} IS NULL OR abs(extract(epoch FROM {column})) < {_PY_SECONDS})"
    if kind == "timestamptz":
        bounds = "'0001-01-01 00:00:00+00' AND '9999-12-31 23:59:59.999999+00'"
    else:
        bounds = "'0001-01-01' AND '9999-12-31'"
    return f"({column} IS NULL OR {column} BETWEEN {bounds})"


def _sql_kind(field: Any) -> str | None:
    if isinstance(field, DurationField):
        return "interval"
    if isinstance(field, DateTimeField):
        return "timestamptz"
    if isinstance(field, DateField):
        return "date"
    return None


# (column, kind) of every Schedule column whose value Python may fail to hold.
_SCHEDULE_VALUES: list[tuple[str, str]] = [
    (str(f.column), kind)
    for f in Schedule._meta.concrete_fields
    if (kind := _sql_kind(f)) is not None
]
# Those the claim loads (RUN_FIELDS) or computes with.
_RUN_VALUES = [
    (c, k) for c, k in _SCHEDULE_VALUES if c in {"timeout", "backoff", "max_backoff", "max_delay"}
]


def _capped(max_delay: str) -> str:
    """SQL: ``max_delay`` within 0 and 100,000 days, so that an instant minus it never leaves
    the calendar (a row's value may be anything): a longer one never makes a run missed."""
    return f"GREATEST(LEAST({max_delay}, interval '100000 days'), interval '0')"


def _all_loadable(alias: str, values: Sequence[tuple[str, str]]) -> str:
    return " AND ".join(_loadable(f"{alias}.{c}", k) for c, k in values)


# The costs of disabled plan types would also push the statement past ``jit_above_cost``,
# and compiling it takes half a second: JIT goes off with them.
_ORDERED_WALK = ("enable_sort", "enable_bitmapscan", "enable_seqscan", "jit")


def _walk_the_due_index() -> list[str]:
    """Turn off, for the rest of the transaction, the plans that read every due row; return
    the settings they had (the target list is evaluated left to right)."""
    reads = ", ".join(f"current_setting('{name}')" for name in _ORDERED_WALK)
    sets = ", ".join(f"set_config('{name}', 'off', true)" for name in _ORDERED_WALK)
    return list(_rows(f"SELECT {reads}, {sets}", {})[0][: len(_ORDERED_WALK)])


def _restore_planner(previous: list[str]) -> None:
    sets = ", ".join(
        f"set_config('{name}', %(p{n})s, true)" for n, name in enumerate(_ORDERED_WALK)
    )
    _rows(f"SELECT {sets}", {f"p{n}": value for n, value in enumerate(previous)})
