"""The checks of the environment: the database vendor and the settings (E001-E004); and
the date the other checks compare review and decide-by dates with."""

from __future__ import annotations

from datetime import date
from typing import Any

from django.core.checks import CheckMessage, Error, register
from django.core.exceptions import ImproperlyConfigured

from .. import clock, conf
from ..exceptions import ConfigurationError
from ..signals import on_dead_hook


@register()
def check_database(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """E001: the store is PostgreSQL only (leases need SKIP LOCKED and transactional DDL).

    Read from the configured ENGINE and its backend's vendor, without connecting, and run by
    every ``manage.py check`` and by the automatic checks of ``runworker`` and ``jobs``: a
    replica on SQLite is refused at start, not left waiting out a "store outage"."""
    engine = conf.database_engine()
    try:
        vendor = conf.database_vendor()
    except ImproperlyConfigured as exc:  # a backend that does not import
        vendor = f"not loadable ({exc})"
    if vendor == "postgresql":
        return []
    return [
        Error(
            f"DATABASES['default'] uses ENGINE {engine!r} (vendor {vendor}); django_jobs "
            "stores leases in PostgreSQL only.",
            hint="Point DATABASES['default'] (or DATABASE_URL) at PostgreSQL 14 or newer "
            "(ENGINE 'django.db.backends.postgresql').",
            id="django_jobs.E001",
        )
    ]


@register()
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """E002: USE_TZ must be on. E003: DJANGO_JOBS must be valid. E004: its ``ON_DEAD`` must
    import as a callable. E035: a ``JobsBackend`` alias's ``QUEUES`` holds only names a queue
    can have."""
    errors: list[CheckMessage] = _task_queue_names()
    if not conf.use_tz():
        errors.append(
            Error(
                "USE_TZ is False: django_jobs needs aware datetimes to compute schedules in UTC.",
                hint="Set USE_TZ = True in your settings.",
                id="django_jobs.E002",
            )
        )
    try:
        conf.get_settings()
    except ConfigurationError as exc:
        errors.append(Error(str(exc), hint="Fix the DJANGO_JOBS setting.", id="django_jobs.E003"))
        return errors
    try:
        on_dead_hook()
    except ConfigurationError as exc:
        errors.append(
            Error(
                str(exc),
                hint="Fix DJANGO_JOBS['ON_DEAD'], or remove it.",
                id="django_jobs.E004",
            )
        )
    return errors


def current_date() -> date:
    """Today, for review and decide-by dates: from ``clock.current()`` (a test injects one),
    unaligned with the database, which a check without ``--database`` must not touch (and a
    day does not depend on milliseconds of skew)."""
    return clock.current().now().date()


def _task_queue_names() -> list[CheckMessage]:
    """E035: a queue name the framework accepts in ``TASKS[alias]["QUEUES"]`` but no
    occurrence can be on: its tasks would be refused at enqueue (``InvalidTask``)."""
    from ..spec import queue_problem

    return [
        Error(
            f"TASKS[{alias!r}]['QUEUES']: a queue name {problem}",
            hint="Rename the queue: django_jobs keeps a task's queue_name as its occurrence's "
            "queue (docs/worker.md, Queues).",
            id="django_jobs.E035",
        )
        for alias, names in conf.tasks_queues().items()
        for name in names
        if (problem := queue_problem(name)) is not None
    ]
