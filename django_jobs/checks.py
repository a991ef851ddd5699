"""System checks with stable ids. Each message names the object and the field; each hint says
what to do."""

from __future__ import annotations

import inspect
import textwrap
from dataclasses import dataclass
from datetime import date
from typing import Any

from django.core.checks import CheckMessage, Error, Info, Tags, Warning, register
from django.db.models import Count

from . import conf, source_rules
from .clock import SystemClock
from .declarations import Declaration, declared, local_time_gaps
from .exceptions import ConfigurationError
from .registry import registry
from .scheduling import cron, zones
from .scheduling.timings import is_utc


@register(Tags.database, deploy=False)
def check_database(
    app_configs: Any = None, databases: Any = None, **kwargs: Any
) -> list[CheckMessage]:
    """E001: the store is PostgreSQL only (leases need SKIP LOCKED and transactional DDL)."""
    if not databases or "default" not in databases:
        return []
    vendor = conf.database_vendor()
    if vendor == "postgresql":
        return []
    return [
        Error(
            f"The default database is {vendor}; django_jobs stores leases in PostgreSQL only.",
            hint="Point DATABASES['default'] (or DATABASE_URL) at PostgreSQL 14 or newer.",
            id="django_jobs.E001",
        )
    ]


@register()
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """E002: USE_TZ must be on. E003: DJANGO_JOBS must be valid."""
    errors: list[CheckMessage] = []
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


def _record_problems(record: Any, *, has_limit: bool, today: date) -> list[CheckMessage]:
    """Problems of one schedule record (a ``Schedule`` row or a declaration's view of one)."""
    name = f"Schedule {record.label!r}"
    found: list[CheckMessage] = []
    for owner in ("operating_owner", "record_owner"):
        if not (getattr(record, owner) or "").strip():
            found.append(
                Error(
                    f"{name} has no {owner}.",
                    obj=record.obj,
                    id="django_jobs.E010",
                    hint="Name who runs it in production (operating_owner) and who "
                    "answers for the record (record_owner).",
                )
            )
    if record.status == "draft":
        if not (record.decider or "").strip() or record.decide_by is None:
            found.append(
                Error(
                    f"{name} is a draft without a decider and a decide-by date.",
                    obj=record.obj,
                    id="django_jobs.E011",
                    hint="Set decider= and decide_by= on the draft.",
                )
            )
        elif record.decide_by < today:
            found.append(
                Error(
                    f"{name} is a draft whose decide-by date {record.decide_by} has passed.",
                    obj=record.obj,
                    id="django_jobs.E012",
                    hint="Decide: make it active or retired, or set a new decide_by.",
                )
            )
    if record.timing_kind == "cron":
        if record.time_zone not in zones.iana_names():
            found.append(
                Error(
                    f"{name}: time zone {record.time_zone!r} is not an IANA identifier.",
                    obj=record.obj,
                    id="django_jobs.E013",
                    hint="Use a name such as 'UTC' or 'Europe/London'.",
                )
            )
        try:
            cron.normalise(record.cron)
        except cron.InvalidCron as exc:
            found.append(
                Error(
                    f"{name}: {exc}.",
                    obj=record.obj,
                    id="django_jobs.E015",
                    hint="Use five fields: minute hour day-of-month month weekday.",
                )
            )
    found += _local_time_problems(record, name)
    if record.job not in registry.names():
        found.append(
            Error(
                f"{name}: no handler is registered for job {record.job!r}.",
                obj=record.obj,
                id="django_jobs.E014",
                hint=f'Register one with @job("{record.job}") in the jobs.py of the '
                "app that owns the behaviour.",
            )
        )
    if record.status == "active" and record.runbooks is not None and record.runbooks < 3:
        found.append(
            Error(
                f"{name} lacks its inspection, replay and disable Runbook records.",
                obj=record.obj,
                id="django_jobs.E017",
                hint=(
                    "jobs sync and services.upsert_schedule write them when they create or "
                    "change a schedule. For a schedule written some other way: run manage.py "
                    "jobs sync (declared in code) or save it again with "
                    "services.upsert_schedule (created at run time)."
                ),
            )
        )
    if record.status == "active" and not has_limit:
        found.append(
            Error(
                f"{name} has no retention Limit.",
                obj=record.obj,
                id="django_jobs.E016",
                hint="Declare retention= (keep for a duration, or keep the last N).",
            )
        )
    return found


def _local_time_problems(record: Any, name: str) -> list[CheckMessage]:
    """E018/E019: a declared business-local schedule without its reason or its explicit DST
    choices. W023: a database record of one without a reason (written before reasons were
    required, or not through a declaration): a warning, so ``migrate`` is not blocked."""
    if record.timing_kind != "cron" or is_utc(record.time_zone):
        return []
    if record.time_zone not in zones.iana_names():
        return []  # E013 says what is wrong with it
    if record.local_gaps is None:
        if record.zone_reason.strip():
            return []
        return [
            Warning(
                f"{name} runs in {record.time_zone}, not UTC, and its record gives no reason.",
                obj=record.obj,
                id="django_jobs.W023",
                hint="Declare it with cron(..., reason='...') and run jobs sync, or save the "
                "run-time schedule again through services.upsert_schedule with a reason.",
            )
        ]
    found: list[CheckMessage] = []
    for field_name, message in record.local_gaps:
        found.append(
            Error(
                f"{name}: {field_name}: {message}.",
                obj=record.obj,
                id="django_jobs.E018" if field_name == "timing.reason" else "django_jobs.E019",
                hint="A business-local schedule is a documented deviation from UTC: say why, "
                "and choose what its DST transitions do.",
            )
        )
    return found


@dataclass(frozen=True)
class _RecordView:
    label: str
    obj: Any
    job: str
    status: str
    operating_owner: str
    record_owner: str
    decider: str
    decide_by: date | None
    timing_kind: str
    cron: str
    time_zone: str
    zone_reason: str = ""
    # The DST choices given explicitly, and what the timing leaves unsaid (declarations only:
    # a database record holds concrete choices, so None).
    local_gaps: list[tuple[str, str]] | None = None
    runbooks: int | None = None  # how many Runbook rows exist (None: not a database record)


def _view_of_declaration(d: Declaration) -> _RecordView:
    fields = d.record_fields()
    return _RecordView(
        label=f"{d.tenant}/{d.key}" if d.tenant else d.key,
        obj=d,
        job=d.job,
        status=d.status,
        operating_owner=d.operating_owner,
        record_owner=d.record_owner,
        decider=d.decider,
        decide_by=d.decide_by,
        timing_kind=fields["timing_kind"],
        cron=fields["cron"],
        time_zone=fields["time_zone"],
        zone_reason=fields.get("zone_reason", ""),
        local_gaps=local_time_gaps(d.timing),
    )


def _view_of_row(s: Any) -> _RecordView:
    return _RecordView(
        label=str(s),
        obj=s,
        job=s.job,
        status=s.status,
        operating_owner=s.operating_owner,
        record_owner=s.record_owner,
        decider=s.decider,
        decide_by=s.decide_by,
        timing_kind=s.timing_kind,
        cron=s.cron,
        time_zone=s.time_zone,
        zone_reason=s.zone_reason,
        runbooks=getattr(s, "runbook_count", None),
    )


@register()
def check_declared_schedules(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """E010-E016 over the schedules declared in ``schedules.py`` modules."""
    today = SystemClock().now().date()
    found: list[CheckMessage] = []
    for declaration in declared.all():
        found += _record_problems(_view_of_declaration(declaration), has_limit=True, today=today)
    return found


@register(Tags.database)
def check_schedule_records(
    app_configs: Any = None, databases: Any = None, **kwargs: Any
) -> list[CheckMessage]:
    """E010-E016 over the schedule records in the database (run with ``--database``)."""
    if not databases or "default" not in databases or conf.database_vendor() != "postgresql":
        return []
    from django.db import connection

    from .models import Schedule

    if Schedule._meta.db_table not in connection.introspection.table_names():
        return []  # not migrated yet (migrate runs database checks first)
    today = SystemClock().now().date()
    found: list[CheckMessage] = []
    rows = (
        Schedule.objects.exclude(status="retired")
        .select_related("limit")
        .annotate(runbook_count=Count("runbooks"))
    )
    for row in rows:
        has_limit = hasattr(row, "limit")
        found += _record_problems(_view_of_row(row), has_limit=has_limit, today=today)
    return found


def _handler_findings(func: Any) -> list[str] | None:
    """What a handler's own source does that the specification forbids; None if unreadable."""
    try:
        source = textwrap.dedent(inspect.getsource(func))
    except (OSError, TypeError):
        return None
    rules = (source_rules.storage_writes, source_rules.http_calls, source_rules.local_time_reads)
    return [str(f) for rule in rules for f in rule(source)]


@register()
def check_job_handlers(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """W020: a handler writes storage, calls HTTP or reads local time itself.
    I021: it does, under a recorded departure. W022: that departure's review date passed."""
    today = SystemClock().now().date()
    found: list[CheckMessage] = []
    for handler in registry.all():
        findings = _handler_findings(handler.func)
        if not findings:
            continue
        where = f"Job {handler.name!r} ({handler.module})"
        detail = "; ".join(findings)
        departure = handler.departure
        if departure is None:
            found.append(
                Warning(
                    f"{where} does itself what a job must leave to an application command: "
                    f"{detail}.",
                    hint="Move the writes, HTTP calls and clock reads into the command the handler "
                    "dispatches, or record a departure: @job(..., departure=Departure(reason=, "
                    "review_by=)).",
                    obj=handler.func,
                    id="django_jobs.W020",
                )
            )
        elif departure.review_by < today:
            found.append(
                Warning(
                    f"{where}: the departure recorded for it was due for review on "
                    f"{departure.review_by} ({departure.reason}).",
                    hint="Review it: remove the departure or set a new review_by.",
                    obj=handler.func,
                    id="django_jobs.W022",
                )
            )
        else:
            found.append(
                Info(
                    f"{where} departs from the job rules ({detail}) under a recorded departure "
                    f"until {departure.review_by}: {departure.reason}",
                    obj=handler.func,
                    id="django_jobs.I021",
                )
            )
    return found
