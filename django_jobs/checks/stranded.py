"""W031: active schedule records that nothing will run (``services.stranded_schedules``).

A warning, not an error: the record is not invalid input, and ``migrate`` (which runs the
database checks) must not be blocked by it. Run with ``manage.py check --database default``.
"""

from __future__ import annotations

from typing import Any

from django.core.checks import CheckMessage, Tags, Warning, register

from .. import clock, conf


@register(Tags.database)
def check_stranded_schedules(
    app_configs: Any = None, databases: Any = None, **kwargs: Any
) -> list[CheckMessage]:
    """W031 over the schedule records in the database: each stranded one, named by key and
    tenant, with what to do."""
    if not databases or "default" not in databases or conf.database_vendor() != "postgresql":
        return []
    from ..services import stranded_schedules
    from .migrated import migrated

    if not migrated():
        return []  # not migrated yet (migrate runs the database checks first)
    return [
        Warning(
            f"Schedule {s.name!r} (key {s.key!r}, tenant {s.tenant!r}) is stranded: it is "
            f"active but has no next due instant and no occurrence that will run, so nothing "
            f"will run it ({s.why}).",
            obj=s.name,
            id="django_jobs.W031",
            hint=s.what_to_do,
        )
        for s in stranded_schedules(now=clock.current().now())
    ]
