"""Shared SQL building blocks of the store: table names, the values statements bind, the
loader of the named queries in ``sql/``, row helpers and the guards several statements share.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from django.db import connection
from django.db.models import DateField, DateTimeField, DurationField
from psycopg import sql
from psycopg.rows import namedtuple_row

from ..models import (
    CLAIMABLE_STATES,
    Attempt,
    AttemptOutcome,
    AuditRecord,
    ConsumedOneOff,
    Limit,
    Occurrence,
    OccurrenceState,
    Origin,
    Replica,
    ReplicaState,
    RetentionState,
    Runbook,
    Schedule,
    ScheduleStatus,
    SkipReason,
    Step,
    TaskPath,
    Trigger,
)
from ..scheduling.policies import Overlap, TimingKind

# Table names come from the models' ``_meta``: a statement names ``{occurrence}``, never the
# table itself.
_MODELS = {
    "occurrence": Occurrence,
    "attempt": Attempt,
    "schedule": Schedule,
    "limit": Limit,
    "step": Step,
    "runbook": Runbook,
    "audit": AuditRecord,
    "consumed": ConsumedOneOff,
    "replica": Replica,
    "retention_state": RetentionState,
    "task_path": TaskPath,
}
TABLES = {name: model._meta.db_table for name, model in _MODELS.items()}

# The sequence every claim draws its fencing token from (migration 0016): one for all
# occurrences, so a token is never given twice to an occurrence's identity, even after
# retention deleted its row and a replay created it again. No table owns it, so nothing that
# truncates or resets a table's sequences (``flush``) can move it back.
FENCING_TOKENS = "django_jobs_fencing_token"

# ``last_error_type`` of an occurrence whose lost attempts used up its ``max_attempts``.
WORKER_LOST = "WorkerLost"
# ``last_error_type`` of an occurrence whose tenant is not its schedule's (never run).
TENANT_MISMATCH = "TenantMismatch"

# Every state, outcome and kind a statement compares with or writes, named in the statement
# after it (``%(processing)s``, ``%(terminal)s``) and filled in from the models' choices when
# the statement is loaded (``load_queries``): no state name is typed into SQL, and the server
# sees the literals themselves whatever the connection's binding mode, so the predicates of
# the partial indexes on ``state`` match even in a prepared (generic) plan.
VALUES: dict[str, Any] = {
    **{state.value: state.value for state in OccurrenceState},
    **{f"attempt_{o.value}": o.value for o in AttemptOutcome},
    **{f"status_{s.value}": s.value for s in ScheduleStatus},
    **{f"trigger_{t.value}": t.value for t in Trigger},
    **{f"origin_{o.value}": o.value for o in Origin},
    **{f"timing_{k.value}": k.value for k in TimingKind},
    **{f"overlap_{p.value}": p.value for p in Overlap},
    **{f"reason_{r.value}": r.value for r in SkipReason},
    **{f"replica_{s.value}": s.value for s in ReplicaState},
    "worker_lost": WORKER_LOST,
    "tenant_mismatch": TENANT_MISMATCH,
}

SQL_DIR = Path(__file__).with_name("sql")


def load_queries(concern: str, **fragments: str) -> dict[str, str]:
    """The named queries of ``sql/<concern>.sql``, each after a ``-- name: <query>`` line.

    Tables are written ``{occurrence}``, ``{schedule}``... and filled in from the models'
    ``_meta`` (quoted with ``psycopg.sql.Identifier``); ``fragments`` fill other ``{name}``
    placeholders with SQL the caller composed (guards shared by several statements). A
    placeholder naming a query earlier in the file is filled with that query, so a statement
    another one embeds is written once. Literal braces in a statement are doubled, as with
    ``str.format``. Last, each ``%(<name>)s`` of ``VALUES`` becomes that value's literal
    (``psycopg.sql.Literal``); the other ``%(...)s`` are the caller's parameters.
    """
    text = (SQL_DIR / f"{concern}.sql").read_text()
    tables = {name: sql.Identifier(table) for name, table in TABLES.items()}
    parts = {name: sql.SQL(fragment) for name, fragment in fragments.items()}
    queries: dict[str, str] = {}
    for block in re.split(r"^-- name: ", text, flags=re.MULTILINE)[1:]:
        name, _, body = block.partition("\n")
        earlier = {query: sql.SQL(composed) for query, composed in queries.items()}
        composed = sql.SQL(body.strip()).format(**tables, **earlier, **parts)
        queries[name.strip()] = _with_values(composed.as_string(None))
    return queries


_PARAMETER = re.compile(r"%\((\w+)\)s")


def _with_values(statement: str) -> str:
    """``statement`` with each ``%(<name>)s`` of ``VALUES`` replaced by its literal."""

    def literal(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in VALUES:
            return match.group(0)
        return sql.Literal(VALUES[name]).as_string(None)

    return _PARAMETER.sub(literal, statement)


def _named_rows(query: str, params: dict[str, Any]) -> list[Any]:
    """Run one statement with ``params``; its rows, each a named tuple whose fields are the
    statement's column names (psycopg's ``namedtuple_row``, which makes the type once per
    list of columns). The one way the store reads rows: by name, never by position, so
    reordering a statement's SELECT or RETURNING list swaps no value
    (tests/test_named_rows.py)."""
    with connection.cursor() as cursor:
        cursor.cursor.row_factory = namedtuple_row
        cursor.execute(query, params)
        return cursor.fetchall() if cursor.description else []


def _execute(query: str, params: dict[str, Any]) -> None:
    """Run one statement with ``params`` for what it does; any rows it returns go unread."""
    with connection.cursor() as cursor:
        cursor.execute(query, params)


def _one_of(values: Iterable[str]) -> str:
    """SQL: the literals of ``values`` (states from the models' choices), for ``IN (...)``:
    the list the partial indexes' predicates name (``state IN ('scheduled', ...)``), so a
    statement that says it uses those indexes."""
    return sql.SQL(", ").join(sql.Literal(str(value)) for value in values).as_string(None)


# The claimable states, for ``state IN ({claimable_states})``.
CLAIMABLE_IN = _one_of(CLAIMABLE_STATES)


def _not_paused(tenant: str, key: str) -> str:
    """SQL: the schedule is not named by the kill switch ``%(excluded)s`` (conf.py): a bare
    key in any tenant, ``'<tenant>/<key>'`` or ``'<tenant>/*'``. (``"*"`` is the caller's:
    nothing is planned or claimed then.)"""
    guard = sql.SQL(
        """NOT ({key} = ANY(%(excluded)s::text[])
                OR {tenant} || '/' || {key} = ANY(%(excluded)s::text[])
                OR {tenant} || '/*' = ANY(%(excluded)s::text[]))"""
    )
    return guard.format(tenant=sql.SQL(tenant), key=sql.SQL(key)).as_string(None)


# Values PostgreSQL stores and Python cannot hold, so psycopg refuses to load them: an interval
# beyond timedelta's 999,999,999 days, an instant before year 1 or after 9999 ('infinity'). A
# row holding one is written behind django_jobs' back; statements that load rows leave it out
# (and the planner parks it, ``park_unreadable``), so it cannot fail every pass of every
# replica.
# Under a billion days: psycopg loads up to 999,999,999 days, counting a year as 365 days where
# extract(epoch ...) counts 365.25, so this bound never admits what psycopg refuses.
_PY_SECONDS = 86_400_000_000_000
_LOADABLE = {
    "interval": "({column} IS NULL OR abs(extract(epoch FROM {column})) < {seconds})",
    "timestamptz": "({column} IS NULL OR {column} BETWEEN "
    "'0001-01-01 00:00:00+00' AND '9999-12-31 23:59:59.999999+00')",
    "date": "({column} IS NULL OR {column} BETWEEN '0001-01-01' AND '9999-12-31')",
}


def _loadable(column: str, kind: str) -> str:
    """SQL: ``column`` (of type ``kind``: interval, timestamptz or date) is NULL or loadable."""
    guard = sql.SQL(_LOADABLE.get(kind, _LOADABLE["date"]))
    return guard.format(column=sql.SQL(column), seconds=sql.Literal(_PY_SECONDS)).as_string(None)


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
    capped = sql.SQL("GREATEST(LEAST({max_delay}, interval '100000 days'), interval '0')")
    return capped.format(max_delay=sql.SQL(max_delay)).as_string(None)


def _all_loadable(alias: str, values: Sequence[tuple[str, str]]) -> str:
    """SQL: every column of ``values`` (``(column, kind)``, see ``_loadable``) of the row
    ``alias`` is NULL or loadable."""
    guards = (
        _loadable(sql.Identifier(alias, column).as_string(None), kind) for column, kind in values
    )
    return " AND ".join(guards)
