"""Importing each installed app's ``schedules`` module, one app at a time, so that one that
fails does not take the process down.

``AppConfig.ready()`` imports every app's ``jobs`` module as Django's own autodiscovery does
(a failure propagates: those modules hold behaviour the web process calls too), then every
app's ``schedules`` module through ``discover_schedules``. A ``schedules`` module that raises
(an ``InvalidSchedule``, a ``SyntaxError``, any exception) is kept here as an
``ImportFailure``, with its file and line and, for an ``InvalidSchedule``, the schedule's key
and field. The web process starts; system check E033 names the failure, so ``manage.py
check``, ``runworker`` and ``jobs`` (which run the checks) refuse to go on; and no sync writes
the declared set while it is partial (``refuse_partial_set``): a sync retires what is not
declared, so the schedules the failed module declares would be retired.
"""

from __future__ import annotations

import importlib
import importlib.util
import traceback
from dataclasses import dataclass
from pathlib import Path

from django.apps import apps
from django.utils.module_loading import module_has_submodule

from .declarations import InvalidSchedule, declared
from .exceptions import ConfigurationError


@dataclass(frozen=True)
class ImportFailure:
    """A ``schedules`` module that raised when it was imported: where, and what."""

    module: str  # "billing.schedules"
    file: str
    line: int | None
    error: str  # "InvalidSchedule: schedule 'orders.sync': timing.cron: ..."
    key: str | None = None  # an InvalidSchedule's schedule key
    field: str | None = None  # an InvalidSchedule's field

    @property
    def where(self) -> str:
        return f"{self.file}, line {self.line}" if self.line else self.file

    @property
    def summary(self) -> str:
        """One sentence naming the module, its file and line and, for an invalid declaration,
        the schedule's key and field."""
        what = f"schedule {self.key!r}, field {self.field!r}: " if self.key is not None else ""
        return (
            f"The schedules module {self.module} ({self.where}) failed to import: {what}"
            f"{self.error}. Its schedules are left out of the declared set, so no sync "
            "writes the set until it imports"
        )


_failures: list[ImportFailure] = []


def discover_schedules() -> None:
    """Import each installed app's ``schedules`` module, keeping each failure."""
    _failures.clear()
    for config in apps.get_app_configs():
        name = f"{config.name}.schedules"
        if not module_has_submodule(config.module, "schedules"):
            continue
        before = {(d.tenant, d.key) for d in declared.all()}
        try:
            importlib.import_module(name)
        except Exception as exc:
            _failures.append(failure_of(name, exc))
            # As Python forgets the module, the set forgets what it declared before failing.
            for d in declared.all():
                if (d.tenant, d.key) not in before:
                    declared.remove(d.tenant, d.key)


def failure_of(module: str, exc: BaseException) -> ImportFailure:
    """What ``exc``, raised importing ``module``, says and where: the deepest line of the
    module's own file in its traceback (a ``SyntaxError``: the line it names)."""
    file = _file_of(module)
    line: int | None = None
    if isinstance(exc, SyntaxError) and exc.filename:
        file, line = exc.filename, exc.lineno
    else:
        frames = traceback.extract_tb(exc.__traceback__)
        own = [f for f in frames if file and Path(f.filename) == Path(file)]
        if own or frames:
            frame = (own or frames)[-1]
            file, line = (file or frame.filename), frame.lineno
    key: str | None = None
    field: str | None = None
    if isinstance(exc, InvalidSchedule):  # its key and field are said apart from its detail
        key, field, error = str(exc.key), str(exc.field), str(exc.detail)
    else:
        error = f"{type(exc).__name__}: {str(exc).strip() or '(no message)'}"
    return ImportFailure(
        module=module, file=file or module, line=line, error=error, key=key, field=field
    )


def _file_of(module: str) -> str:
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return ""
    return str(spec.origin) if spec is not None and spec.origin else ""


def failures() -> list[ImportFailure]:
    """The ``schedules`` modules that failed to import in this process."""
    return list(_failures)


def record_failure(failure: ImportFailure) -> None:
    """Keep ``failure`` (as ``discover_schedules`` does; for a test's own module)."""
    _failures.append(failure)


def forget_failures() -> None:
    _failures.clear()


def refuse_partial_set() -> None:
    """``ConfigurationError`` (check E033's text) when a ``schedules`` module failed to
    import: the declared set is partial, and syncing it would retire the schedules of the
    failed module. Called wherever the declared set is handed to a sync."""
    found = failures()
    if found:
        raise ConfigurationError(
            "; ".join(f.summary for f in found)
            + " (django_jobs.E033): fix the module and run the command again."
        )
