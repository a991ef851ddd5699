"""The logging scope of a run: the keys the worker binds for it, and a structlog processor that
keeps them the worker's in the lines a job handler writes itself.

The worker binds a run's ``schedule``, ``occurrence``, ``attempt``, ``tenant`` and ``token``
(the *reserved keys*) to structlog's context while it runs and records the occurrence. The
handler runs in a copy of that context (``worker/invoke.py``), so what it binds stays in its
own run: the worker's lines about the outcome carry the worker's context only, whether or not
the processor below is configured.

Inside the handler's copy, a handler can still rebind a reserved key (``tenant="globex"``) or
pass one to a log call. ``keep_run_keys`` puts the run's values back into such a line and keeps
the handler's differing value under ``handler_<key>``: nothing the handler said is lost, and
nothing it said can pass for the worker's word about which run the line belongs to. Configure
it right after ``structlog.contextvars.merge_contextvars``::

    structlog.configure(processors=[
        structlog.contextvars.merge_contextvars,
        django_jobs.logging.keep_run_keys,
        ...
    ])
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from types import MappingProxyType

import structlog
from structlog.typing import EventDict, WrappedLogger

RESERVED_KEYS = ("schedule", "occurrence", "attempt", "tenant", "token")

# Where a handler's differing value of a reserved key goes in its own lines.
HANDLER_PREFIX = "handler_"

# The run's reserved values, apart from structlog's context: a handler can rebind structlog's
# keys in its copy of the context, but not this.
_run_keys: ContextVar[Mapping[str, object] | None] = ContextVar(
    "django_jobs.run_keys", default=None
)


@contextmanager
def run_scope(
    *, schedule: str, occurrence: str, attempt: int, tenant: str, token: int
) -> Iterator[None]:
    """Bind a run's reserved keys to structlog's context for the lines logged inside; on exit,
    restore what those keys were before (an inline run keeps its caller's context)."""
    values = {
        "schedule": schedule,
        "occurrence": occurrence,
        "attempt": attempt,
        "tenant": tenant,
        "token": token,
    }
    reset = _run_keys.set(MappingProxyType(values))
    try:
        with structlog.contextvars.bound_contextvars(**values):
            yield
    finally:
        _run_keys.reset(reset)


def keep_run_keys(logger: WrappedLogger, method_name: str, event_dict: EventDict) -> EventDict:
    """A structlog processor: in a line logged during a run, each reserved key has the run's
    value; a handler's different value for it (bound to the context or to its logger, or passed
    in the call) is kept under ``handler_<key>``. Outside a run, lines pass unchanged."""
    run = _run_keys.get()
    if run is None:
        return event_dict
    for key, value in run.items():
        theirs = event_dict.get(key, value)
        if not _same(theirs, value):
            event_dict[HANDLER_PREFIX + key] = theirs
        event_dict[key] = value
    return event_dict


def _same(theirs: object, ours: object) -> bool:
    # Compared only within one type: a handler's object may define == as anything, or raise.
    return theirs is ours or (type(theirs) is type(ours) and theirs == ours)


def log_to_stderr_unless_configured(level: int = logging.INFO) -> bool:
    """What ``runworker`` and ``manage.py jobs`` log in a project that has not configured
    structlog: structlog's own default, printed lines, but on stderr and at info and above,
    never on stdout (which holds a command's output) nor at debug. The handlers' own structlog
    lines go the same way. A project that calls ``structlog.configure`` keeps its own
    configuration (to route the lines through ``LOGGING``, see docs/worker.md); the standard
    library's logging is never touched. ``level``: the least a line needs (``testing`` asks
    for warnings, so a test run's output is not a worker's log). Returns whether it
    configured structlog.
    """
    if structlog.is_configured():
        return False
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            keep_run_keys,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="%Y-%m-%d %H:%M:%S", utc=True),
            structlog.processors.StackInfoRenderer(),
            structlog.dev.set_exc_info,
            structlog.dev.ConsoleRenderer(colors=False),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        cache_logger_on_first_use=False,
    )
    return True


__all__ = [
    "HANDLER_PREFIX",
    "RESERVED_KEYS",
    "keep_run_keys",
    "log_to_stderr_unless_configured",
    "run_scope",
]
