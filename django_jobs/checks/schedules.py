"""The checks of schedule records, declared in code and in the database (E010-E019, E030,
E032, W023, W032). A declaration and a row are checked alike, through one view of a record; what
a record's fields may hold is the spec's to say (``spec.py``)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from datetime import date
from typing import Any

from django.core.checks import CheckMessage, Error, Tags, Warning, register
from django.db.models import Count

from .. import conf, discovery
from ..declarations import Declaration, declared, local_time_gaps
from ..registry import registry
from ..scheduling import cron, rrules, timings, zones
from ..scheduling.timings import InvalidTiming
from ..spec import NOT_GIVEN, RETRY_FIELDS, ScheduleSpec
from ..suggest import did_you_mean
from ..validation import draft_gaps, draft_overdue
from .environment import current_date


def _record_problems(
    record: Any, *, has_limit: bool, today: date, jobs: frozenset[str] | None = None
) -> list[CheckMessage]:
    """Problems of one schedule record (a ``Schedule`` row or a declaration's view of one);
    ``jobs``: the registered job names, when the caller checks many records."""
    name = f"Schedule {record.label!r}"
    found = _field_problems(record, name) + _draft_problems(record, name, today)
    if record.timing_kind == "cron":
        found += _zone_problem(record, name) + _cron_problem(record, name)
    if record.timing_kind == "rrule":
        found += _rule_problems(record, name)
    found += _local_time_problems(record, name)
    known = jobs if jobs is not None else frozenset(registry.names())
    if record.job not in known:
        found.append(
            Error(
                f"{name}: no handler is registered for job {record.job!r}.",
                obj=record.obj,
                id="django_jobs.E014",
                hint=_unknown_job_hint(record.job, known),
            )
        )
    return found + _keeping_problems(record, name, has_limit=has_limit)


def _unknown_job_hint(job: str, known: frozenset[str]) -> str:
    """Register the job, or, when a registered job's name is close, correct it."""
    register = f'register one with @job("{job}") in the jobs.py of the app that owns the behaviour.'
    close = did_you_mean(job, sorted(known))
    if close:
        return f"No job is registered as {job!r}{close}: correct job=, or {register}"
    return register[0].upper() + register[1:]


_OWNERS = ("operating_owner", "record_owner")


def _field_problems(record: Any, name: str) -> list[CheckMessage]:
    """What the spec of a record refuses in its fields: E010 for who runs it and who answers
    for it; any other field is E032 in a declaration and W032 in a stored row (written by
    hand or by an older release: a warning, so ``migrate`` is not blocked, and the planner
    parks the row). A draft's missing decider or date is E011's to say."""
    gaps = draft_gaps(record.status, record.decider, record.decide_by)
    found: list[CheckMessage] = []
    for field_name, message in record.spec.problems():
        if (field_name, message) in gaps:
            continue
        # A row is named by its column (max_attempts), a declaration as schedule() takes it.
        shown = field_name if record.stored else RETRY_FIELDS.get(field_name, field_name)
        text = f"{name}: {shown}: {message}."
        if field_name in _OWNERS:
            found.append(Error(text, obj=record.obj, id="django_jobs.E010", hint=_OWNER_HINT))
        elif record.stored:
            found.append(Warning(text, obj=record.obj, id="django_jobs.W032", hint=_ROW_HINT))
        else:
            found.append(Error(text, obj=record.obj, id="django_jobs.E032", hint=_CODE_HINT))
    return found


_OWNER_HINT = (
    "Name who runs it in production (operating_owner) and who answers for the record "
    "(record_owner)."
)
_CODE_HINT = "Correct it in its schedules.py and run manage.py jobs sync."
_ROW_HINT = (
    "Correct it in its schedules.py and run manage.py jobs sync, or save the run-time "
    "schedule again through services.upsert_schedule; until then the planner parks it if it "
    "plans with that field (its delay, policies or catch-up cap)."
)


def _draft_problems(record: Any, name: str, today: date) -> list[CheckMessage]:
    """E011: a draft without a decider and a decide-by date. E012: one past that date."""
    if draft_gaps(record.status, record.decider, record.decide_by):
        return [
            Error(
                f"{name} is a draft without a decider and a decide-by date.",
                obj=record.obj,
                id="django_jobs.E011",
                hint="Set decider= and decide_by= on the draft.",
            )
        ]
    if draft_overdue(record.status, record.decide_by, today):
        return [
            Error(
                f"{name} is a draft whose decide-by date {record.decide_by} has passed.",
                obj=record.obj,
                id="django_jobs.E012",
                hint="Decide: make it active or retired, or set a new decide_by.",
            )
        ]
    return []


def _cron_problem(record: Any, name: str) -> list[CheckMessage]:
    """E015: a cron expression that is not five valid fields."""
    try:
        cron.normalise(record.cron)
    except cron.InvalidCron as exc:
        return [
            Error(
                f"{name}: {exc}.",
                obj=record.obj,
                id="django_jobs.E015",
                hint="Use five fields: minute hour day-of-month month weekday.",
            )
        ]
    return []


def _keeping_problems(record: Any, name: str, *, has_limit: bool) -> list[CheckMessage]:
    """E017: an active record without its three runbooks. E016: without a retention Limit."""
    found: list[CheckMessage] = []
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
    if not timings.is_local(record):
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
    stored: bool = False  # a database record (its field problems are warnings: W032)
    # The record's fields as the spec checks them (not its timing: E013, E015, E030 do).
    spec: ScheduleSpec = field(default_factory=ScheduleSpec)


def declared_obj(d: Declaration) -> str:
    """What a check message about a declaration names first (Django prints ``str(obj)``
    before the message): its key and module, not the declaration's long repr."""
    return f"schedule {d.label!r} ({d.module})" if d.module else f"schedule {d.label!r}"


def _view_of_declaration(d: Declaration) -> _RecordView:
    fields = d.timing.record_fields()  # the columns of the timing: all a view reads
    return _RecordView(
        label=d.label,
        obj=declared_obj(d),
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
        spec=dataclasses.replace(d.spec(), timing=NOT_GIVEN),
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
        stored=True,
        spec=_spec_of_row(s),
    )


def _spec_of_row(s: Any) -> ScheduleSpec:
    """A stored record's fields as the spec checks them: not its identity (a job's policy
    record has a key no declaration may take), job (E014) or timing (E013, E015, E030); its
    retention when it has a Limit (E016 says when it has none)."""
    limit = getattr(s, "limit", None)
    return ScheduleSpec(
        operating_owner=s.operating_owner,
        record_owner=s.record_owner,
        decider=s.decider,
        status=s.status,
        decide_by=s.decide_by,
        max_delay=s.max_delay,
        timeout=s.timeout,
        misfire=s.misfire,
        overlap=s.overlap,
        max_catchup=s.max_catchup,
        priority=s.priority,
        max_attempts=s.max_attempts,
        backoff=s.backoff,
        max_backoff=s.max_backoff,
        keep_for=NOT_GIVEN if limit is None else limit.keep_for,
        keep_last=NOT_GIVEN if limit is None else limit.keep_last,
        args=s.args,
    )


@register()
def check_schedules_modules(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """E033: an app's ``schedules`` module failed to import (``discovery``): its file and
    line and, for an invalid declaration, the schedule's key and field."""
    return [
        Error(
            f"{failure.summary}.",
            obj=f"{failure.module} ({failure.where})",
            id="django_jobs.E033",
            hint=_E033_HINT,
        )
        for failure in discovery.failures()
    ]


_E033_HINT = (
    "Correct the module at that line. Until it imports, runworker and manage.py jobs refuse to "
    "start (and runserver, which stops on any check error; a WSGI or ASGI server still serves), "
    "and no sync runs (it would retire the schedules the module declares)."
)


@register()
def check_declared_schedules(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """E010-E016 over the schedules declared in ``schedules.py`` modules."""
    today, jobs = current_date(), frozenset(registry.names())
    found: list[CheckMessage] = []
    for declaration in declared.all():
        view = _view_of_declaration(declaration)
        found += _record_problems(view, has_limit=True, today=today, jobs=jobs)
    return found


@register(Tags.database)
def check_schedule_records(
    app_configs: Any = None, databases: Any = None, **kwargs: Any
) -> list[CheckMessage]:
    """E010-E016 over the schedule records in the database (run with ``--database``)."""
    if not databases or "default" not in databases or conf.database_vendor() != "postgresql":
        return []
    from ..models import Schedule
    from .migrated import migrated

    if not migrated():
        return []  # not migrated yet (migrate runs the database checks first)
    today, jobs = current_date(), frozenset(registry.names())
    found: list[CheckMessage] = []
    rows = (
        Schedule.objects.exclude(status="retired")
        .select_related("limit")
        .annotate(runbook_count=Count("runbooks"))
    )
    for row in rows:
        has_limit = hasattr(row, "limit")
        view = _view_of_row(row)
        found += _record_problems(view, has_limit=has_limit, today=today, jobs=jobs)
    return found
