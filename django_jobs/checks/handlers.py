"""The checks of job handlers and where things are declared (W020-W028, I021, I029): what a
handler does itself, what it dispatches, and the departures recorded from these rules.

Each reads the function a handler runs (through a partial, bound method, callable object or
``functools.wraps`` wrapper) and the helpers it calls: of its own module, and of the project's
other modules when the project names its commands (``source_rules.reach``). W025 says when a
handler's source cannot be read at all."""

from __future__ import annotations

import importlib
import pkgutil
import sys
from datetime import date
from typing import Any

from django.core.checks import CheckMessage, Error, Info, Warning, register

from .. import conf, conventions, source_rules
from ..declarations import Declaration, declared
from ..exceptions import ConfigurationError
from ..registry import RULES, Departure, JobHandler, registry
from ..suggest import did_you_mean
from .environment import current_date
from .schedules import declared_obj


def _reach() -> source_rules.Reach | None:
    try:
        return conventions.reach(conf.get_settings())
    except ConfigurationError:
        return None  # E003 reports the bad setting


def _obj(handler: JobHandler) -> str:
    """What a check message about a handler names first (Django prints ``str(obj)``)."""
    return f"job {handler.name!r}"


def _where(handler: JobHandler) -> str:
    return f"Job {handler.name!r} ({conventions.handler_module(handler.func)})"


@register()
def check_job_handlers(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """W020: a handler (or a helper of its module or the project's it calls) writes storage,
    calls HTTP or reads local time itself. W025: its source cannot be read. I021: either,
    under a recorded departure. W022: that departure's review date passed."""
    today, reach = current_date(), _reach()
    found: list[CheckMessage] = []
    for handler in registry.all():
        code = source_rules.handler_code(handler.func, reach)
        if isinstance(code, source_rules.Unreadable):
            detail = f"its source cannot be read: {code.why}"
        else:
            detail = "; ".join(str(f) for f in source_rules.code_findings(code))
        if not detail:
            continue
        departure = handler.departure
        if departure is not None:
            found.append(_departed(handler, departure, detail, today))
        elif isinstance(code, source_rules.Unreadable):
            found.append(_unreadable(handler, code))
        else:
            found.append(
                Warning(
                    f"{_where(handler)} does itself what a job must leave to an application "
                    f"command: {detail}.",
                    hint="Move the writes, HTTP calls and clock reads into the command the handler "
                    "dispatches, or record a departure: @job(..., departure=Departure(reason=, "
                    "review_by=)).",
                    obj=_obj(handler),
                    id="django_jobs.W020",
                )
            )
    return found


def _unreadable(handler: JobHandler, code: source_rules.Unreadable) -> CheckMessage:
    return Warning(
        f"{_where(handler)}: the source of its handler {source_rules.describe(handler.func)} "
        "cannot be read, so no check can tell what it writes, calls or dispatches (W020, "
        f"W024): {code.why}.",
        hint="Register a function defined in a module file (a def in the app's jobs.py), or a "
        "partial, bound method, callable object or functools.wraps wrapper of one: those are "
        "read through to it. Or record a departure: @job(..., departure=Departure(reason=, "
        "review_by=)).",
        obj=_obj(handler),
        id="django_jobs.W025",
    )


def _departed(handler: JobHandler, departure: Departure, detail: str, today: date) -> CheckMessage:
    if departure.review_by < today:
        return Warning(
            f"{_where(handler)}: the departure recorded for it was due for review on "
            f"{departure.review_by} ({departure.reason}).",
            hint="Review it: remove the departure or set a new review_by.",
            obj=_obj(handler),
            id="django_jobs.W022",
        )
    return Info(
        f"{_where(handler)} departs from the job rules ({detail}) under a recorded departure "
        f"until {departure.review_by}: {departure.reason}",
        obj=_obj(handler),
        id="django_jobs.I021",
    )


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
                found.append(
                    _departure_message(f"Job {handler.name!r}", departure, today, _obj(handler))
                )
    for declaration in declared.all():
        found += _separation_problems(declaration, today)
    return found


@register()
def check_dispatch_paths(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """E034: a ``COMMANDS`` or ``APPROVED_PORTS`` entry that does not import, named with its
    import error (W024 would otherwise blame every handler for not dispatching it)."""
    try:
        settings = conf.get_settings()
    except ConfigurationError:
        return []  # E003 reports the bad setting
    found: list[CheckMessage] = []
    for key, paths in (
        ("COMMANDS", settings.COMMANDS),
        ("APPROVED_PORTS", settings.APPROVED_PORTS),
    ):
        for path in paths:
            problem = _import_problem(path)
            if problem is not None:
                found.append(
                    Error(
                        f"DJANGO_JOBS['{key}'] entry {path!r} does not import: {problem}.",
                        hint="Correct the entry to the dotted path of a module or callable of "
                        "your project, or fix the module; until then W024 cannot see a handler "
                        "dispatch it.",
                        obj=f"DJANGO_JOBS['{key}'] {path!r}",
                        id="django_jobs.E034",
                    )
                )
    return found


def _import_problem(path: str) -> str | None:
    """Why ``path`` (a module, or a module's attribute) does not import; None if it does."""
    try:
        importlib.import_module(path)
        return None
    except ModuleNotFoundError as exc:
        if exc.name != path:  # the module exists and its own imports fail
            return _described(exc)
    except Exception as exc:
        return _described(exc)
    module_path, _, attr = path.rpartition(".")
    if not module_path:
        top = {name for name in sys.modules if "." not in name}
        return f"no module named {path!r}{did_you_mean(path, top)}"
    try:
        module = importlib.import_module(module_path)
    except Exception as exc:
        return _described(exc)
    if not hasattr(module, attr):
        return (
            f"no module named {path!r}, and module {module_path!r} has no attribute {attr!r}"
            f"{did_you_mean(attr, _names_in(module))}"
        )
    return None


def _names_in(module: Any) -> set[str]:
    """The public names of ``module``, and its submodules when it is a package."""
    names = {name for name in vars(module) if not name.startswith("_")}
    if hasattr(module, "__path__"):
        names |= {info.name for info in pkgutil.iter_modules(module.__path__)}
    return names


def _described(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc).strip() or '(no message)'}"


def _dispatch_problems(handler: JobHandler, settings: Any, today: date) -> list[CheckMessage]:
    if getattr(handler.func, "django_jobs_dispatches_its_arguments", False):
        return []  # django_jobs.tasks.run_task: the task it runs is the command
    report = conventions.report(handler.func, settings)
    if not report.readable:
        return []
    where = _where(handler)
    found: list[CheckMessage] = []
    if not report.dispatches:
        departure = handler.departure_from("handler")
        if departure is not None:
            found.append(_departure_message(where, departure, today, _obj(handler)))
        else:
            found.append(
                Warning(
                    f"{where} calls no application command or approved port.",
                    hint="Dispatch one of DJANGO_JOBS['COMMANDS'] or ['APPROVED_PORTS'] (add "
                    "the module that holds the behaviour there), or record a departure: "
                    "@job(..., departure=Departure(reason=, review_by=)).",
                    obj=_obj(handler),
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
                obj=_obj(handler),
                id="django_jobs.W026",
            )
        )
    return found


def _separation_problems(declaration: Declaration, today: date) -> list[CheckMessage]:
    where = f"Schedule {declaration.label!r}"
    if declaration.departure is not None:
        return [_departure_message(where, declaration.departure, today, declared_obj(declaration))]
    if not declaration.module or declaration.module.rpartition(".")[2] == "schedules":
        return []
    return [
        Warning(
            f"{where} is declared in {declaration.module}, not in a schedules module: timing "
            "policy and behaviour change for different reasons.",
            hint="Move the schedule() call to the app's schedules.py, or record "
            "schedule(..., departure=Departure(reason=, review_by=, rule='separation')).",
            obj=declared_obj(declaration),
            id="django_jobs.W027",
        )
    ]


def _departure_message(where: str, departure: Departure, today: date, obj: str) -> CheckMessage:
    rule = f"{RULES[departure.rule]} (rule {departure.rule!r})"
    if departure.review_by < today:
        return Warning(
            f"{where}: the departure from {rule} was due for review on {departure.review_by} "
            f"({departure.reason}).",
            hint="Review it: remove the departure or set a new review_by.",
            obj=obj,
            id="django_jobs.W022",
        )
    return Info(
        f"{where} departs from {rule} under a recorded departure until "
        f"{departure.review_by}: {departure.reason}",
        obj=obj,
        id="django_jobs.I029",
    )
