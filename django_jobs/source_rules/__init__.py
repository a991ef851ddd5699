"""Reading source code for what the specification forbids a job (or django_jobs) to do itself.

A job handler dispatches an application command; it does not write models or SQL directly,
call HTTP clients, or read machine-local time. These scanners read source text with ``ast``;
they report what they see in the code given, not in what it calls. ``handler_findings`` goes
further: it reads the function a handler runs through its wrappers (partials, bound methods,
callable objects, ``functools.wraps``) and the functions of its module it calls; given a
``Reach``, the functions of the project's other modules too, a bounded number of calls down.

One module per noun: ``findings`` (what a rule reports), ``names`` (what a name in the source
stands for), one per rule (``storage``, ``http``, ``local_time``), ``targets`` (the function a
callable runs, and its source), ``reach`` (which functions a handler's code calls, and which of
them are read), and ``handlers`` (a handler's own code, read by every rule). Every public name
is importable from here.
"""

from __future__ import annotations

from .findings import HTTP, LOCAL_TIME, SQL, STORAGE, Finding
from .handlers import RULES, HandlerCode, Unit, code_findings, handler_code, handler_findings
from .http import HTTP_MODULES, http_calls
from .local_time import (
    CALENDAR_BUILDERS,
    LOCAL_TIME_CALLS,
    LOCAL_ZONE_ATTRIBUTES,
    NUMERIC_CONVERSIONS,
    local_time_reads,
)
from .names import (
    CLOCK_READS,
    DATABASE_CONNECTS,
    DATABASE_NAMES,
    HTTP_CLIENTS,
    MANAGERS,
    QUERYSET_METHODS,
    imports_in,
)
from .reach import Reach, is_project_module
from .storage import (
    ASYNC_ORM_WRITES,
    EXECUTE_CALLS,
    ORM_WRITES,
    RELATED_WRITES,
    SQL_CALLS,
    storage_writes,
)
from .targets import Target, Unreadable, describe, target_of

__all__ = [
    "ASYNC_ORM_WRITES",
    "CALENDAR_BUILDERS",
    "CLOCK_READS",
    "DATABASE_CONNECTS",
    "DATABASE_NAMES",
    "EXECUTE_CALLS",
    "HTTP",
    "HTTP_CLIENTS",
    "HTTP_MODULES",
    "LOCAL_TIME",
    "LOCAL_TIME_CALLS",
    "LOCAL_ZONE_ATTRIBUTES",
    "MANAGERS",
    "NUMERIC_CONVERSIONS",
    "ORM_WRITES",
    "QUERYSET_METHODS",
    "RELATED_WRITES",
    "RULES",
    "SQL",
    "SQL_CALLS",
    "STORAGE",
    "Finding",
    "HandlerCode",
    "Reach",
    "Target",
    "Unit",
    "Unreadable",
    "code_findings",
    "describe",
    "handler_code",
    "handler_findings",
    "http_calls",
    "imports_in",
    "is_project_module",
    "local_time_reads",
    "storage_writes",
    "target_of",
]
