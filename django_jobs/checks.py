"""System checks with stable ids. Each message names the object and the field; each hint says
what to do."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date
from typing import Any

from django.core.checks import CheckMessage, Error, Info, Tags, Warning, register
from django.db.models import Count

from . import conf, conventions, source_rules
from .clock import SystemClock
from .declarations import Declaration, declared, local_time_gaps
from .exceptions import ConfigurationError
from .registry import RULES, Departure, registry
from .scheduling import cron, rrules, zones
from .scheduling.timings import InvalidTiming, is_utc


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
        found += _zone_problem(record, name)
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
    if record.timing_kind == "rrule":
        found += _rule_problems(record, name)
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


def _zone_problem(record: Any, name: str) -> list[CheckMessage]:
    """E013: a wall-clock timing's zone that is not an IANA identifier."""
    if record.time_zone in zones.iana_names():
        return []
    return [
        Error(
            f"{name}: time zone {record.time_zone!r} is not an IANA identifier.",
            obj=record.obj,
            id="django_jobs.E013",
            hint="Use a name such as 'UTC' or 'Europe/London'.",
        )
    ]


def _rule_problems(record: Any, name: str) -> list[CheckMessage]:
    """E013 for an unknown zone; E030: a calendar rule (``rrule``) or its business calendar
    that cannot be evaluated (a rule this version refuses, a country or subdivision the
    installed ``holidays`` package does not know)."""
    unknown_zone = _zone_problem(record, name)
    if unknown_zone:
        return unknown_zone
    try:
        rrules.from_fields(record).validate()
    except (InvalidTiming, ValueError) as exc:
        return [
            Error(
                f"{name}: {exc}.",
                obj=record.obj,
                id="django_jobs.E030",
                hint="Correct the rule or the calendar (exclude=) in its declaration, or the "
                "holidays country/subdivision to one the installed package knows.",
            )
        ]
    return []


def _local_time_problems(record: Any, name: str) -> list[CheckMessage]:
    """E018/E019: a declared business-local schedule without its reason or its explicit DST
    choices. W023: a database record of one without a reason (written before reasons were
    required, or not through a declaration): a warning, so ``migrate`` is not blocked."""
    if record.timing_kind not in ("cron", "rrule") or is_utc(record.time_zone):
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
                hint="Declare it with cron() or rrule() and reason='...', and run jobs sync, or "
                "save the run-time schedule again through services.upsert_schedule with a reason.",
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
    # A calendar rule's columns (timing ``rrule``).
    rrule: str = ""
    skipped_time: str = "shift"
    repeated_time: str = "first"
    calendar: dict[str, Any] = field(default_factory=dict)
    on_excluded: str = "skip"
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
        rrule=fields.get("rrule", ""),
        skipped_time=fields["skipped_time"],
        repeated_time=fields["repeated_time"],
        calendar=fields.get("calendar", {}),
        on_excluded=fields.get("on_excluded", "skip"),
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
        rrule=s.rrule,
        skipped_time=s.skipped_time,
        repeated_time=s.repeated_time,
        calendar=s.calendar,
        on_excluded=s.on_excluded,
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
    """What a handler (and the same-module helpers it calls) does that the specification
    forbids a job to do itself; None if its source cannot be read."""
    found = source_rules.handler_findings(func)
    return None if found is None else [str(f) for f in found]


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


@register()
def check_conventions(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """W024: a handler dispatches no application command or approved port. W026: it lives
    outside the app that owns the commands it dispatches. W027: a schedule is declared outside
    a ``schedules`` module. W028: the project names no commands or ports, so W024 and W026
    cannot run. I029: a recorded departure from one of these (W022 once past its review)."""
    try:
        settings = conf.get_settings()
    except ConfigurationError:
        return []  # E003 reports the bad setting
    today = SystemClock().now().date()
    found: list[CheckMessage] = []
    handlers = registry.all()
    named = bool(settings.COMMANDS or settings.APPROVED_PORTS)
    if handlers and not named:
        found.append(
            Warning(
                "DJANGO_JOBS names no application commands or approved ports, so no check "
                "can tell a handler's dispatch from any other call.",
                hint="Set DJANGO_JOBS['COMMANDS'] (and APPROVED_PORTS) to the modules or "
                "callables your handlers dispatch, e.g. ['billing.commands'].",
                id="django_jobs.W028",
            )
        )
    for handler in handlers if named else []:
        found += _dispatch_problems(handler, settings, today)
    for handler in handlers:
        for departure in handler.departures:
            if departure.rule in ("placement", "scope"):
                found.append(_departure_message(f"Job {handler.name!r}", departure, today))
    for declaration in declared.all():
        found += _separation_problems(declaration, today)
    return found


def _dispatch_problems(handler: Any, settings: Any, today: date) -> list[CheckMessage]:
    report = conventions.report(handler.func, settings)
    if not report.readable:
        return []
    where = f"Job {handler.name!r} ({handler.module})"
    found: list[CheckMessage] = []
    if not report.dispatches:
        departure = handler.departure_from("handler")
        if departure is not None:
            found.append(_departure_message(where, departure, today))
        else:
            found.append(
                Warning(
                    f"{where} calls no application command or approved port.",
                    hint="Dispatch one of DJANGO_JOBS['COMMANDS'] or ['APPROVED_PORTS'] (add "
                    "the module that holds the behaviour there), or record a departure: "
                    "@job(..., departure=Departure(reason=, review_by=)).",
                    obj=handler.func,
                    id="django_jobs.W024",
                )
            )
    if report.misplaced and handler.departure_from("placement") is None:
        owners = sorted({d.app or "(no app)" for d in report.commands})
        found.append(
            Warning(
                f"{where} lives in app {report.app or '(no app)'!r} but dispatches commands of "
                f"app {', '.join(repr(o) for o in owners)}: "
                f"{', '.join(d.path for d in report.commands)}.",
                hint="Move the handler to the jobs.py of the app that owns the command, or "
                "record Departure(reason=, review_by=, rule='placement').",
                obj=handler.func,
                id="django_jobs.W026",
            )
        )
    return found


def _separation_problems(declaration: Declaration, today: date) -> list[CheckMessage]:
    where = f"Schedule {declaration.label!r}"
    if declaration.departure is not None:
        return [_departure_message(where, declaration.departure, today)]
    if not declaration.module or declaration.module.rpartition(".")[2] == "schedules":
        return []
    return [
        Warning(
            f"{where} is declared in {declaration.module}, not in a schedules module: timing "
            "policy and behaviour change for different reasons.",
            hint="Move the schedule() call to the app's schedules.py, or record "
            "schedule(..., departure=Departure(reason=, review_by=, rule='separation')).",
            obj=declaration,
            id="django_jobs.W027",
        )
    ]


def _departure_message(where: str, departure: Departure, today: date) -> CheckMessage:
    rule = f"{RULES[departure.rule]} (rule {departure.rule!r})"
    if departure.review_by < today:
        return Warning(
            f"{where}: the departure from {rule} was due for review on {departure.review_by} "
            f"({departure.reason}).",
            hint="Review it: remove the departure or set a new review_by.",
            id="django_jobs.W022",
        )
    return Info(
        f"{where} departs from {rule} under a recorded departure until "
        f"{departure.review_by}: {departure.reason}",
        id="django_jobs.I029",
    )
