"""The checks of job handlers and where things are declared (W020-W028, I021, I029): what a
handler does itself, what it dispatches, and the departures recorded from these rules."""

from __future__ import annotations

from datetime import date
from typing import Any

from django.core.checks import CheckMessage, Info, Warning, register

from .. import conf, conventions, source_rules
from ..declarations import Declaration, declared
from ..exceptions import ConfigurationError
from ..registry import RULES, Departure, registry
from .environment import current_date


def _handler_findings(func: Any) -> list[str] | None:
    """What a handler (and the same-module helpers it calls) does that the specification
    forbids a job to do itself; None if its source cannot be read."""
    found = source_rules.handler_findings(func)
    return None if found is None else [str(f) for f in found]


@register()
def check_job_handlers(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """W020: a handler writes storage, calls HTTP or reads local time itself.
    I021: it does, under a recorded departure. W022: that departure's review date passed."""
    today = current_date()
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
    today = current_date()
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
    if getattr(handler.func, "django_jobs_dispatches_its_arguments", False):
        return []  # django_jobs.tasks.run_task: the task it runs is the command
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
