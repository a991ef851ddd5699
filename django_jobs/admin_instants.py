"""Instants on the admin's pages: each one in UTC, and said to be (``2026-03-01 12:00:00 UTC``).

Django's own display of a ``DateTimeField`` converts it to ``TIME_ZONE`` first
(``timezone.localtime``), and that fails for an instant near either end of the calendar:
9999-12-31 23:59:59 UTC is in year 10000 in any zone east of UTC, 0001-01-01 00:00 UTC in year
0 in any zone west of it, and neither is a Python ``datetime``. One such row, written behind the
service layer (the ORM, SQL, an older release), made the Schedules list fail for every user.
Shown in UTC, every instant PostgreSQL and Python hold is shown, and nothing on a page depends
on a configured zone (django_jobs reads none).

``utc_text`` is the one formatting; ``ShowsInstantsInUtc`` applies it to every
``DateTimeField`` a ModelAdmin or inline would show through Django's display (list columns,
read-only fields), keeping each field's name, label, ordering and CSS class, and shows every
``DurationField`` in words the same way (``words.duration``: ``5 min``, never ``0:05:00``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from django.contrib import admin
from django.db import models
from django.http import HttpRequest

from . import words

EMPTY = "-"


def utc_text(moment: datetime | None, empty: str = EMPTY) -> str:
    """``moment`` as ``YYYY-MM-DD HH:MM:SS UTC`` (``django_jobs.words.instant``)."""
    return words.instant(moment, empty)


Column = Callable[[Any], str]


@functools.cache
def utc_column(field: models.DateTimeField) -> Column:  # type: ignore[type-arg]
    """What shows ``field`` in a list column or a read-only field: ``utc_text`` of its value,
    under the field's own name (a page's ``field-<name>`` class) and label, ordered by it.
    One object per field, so ``sortable_by`` and ``list_display_links`` can name it."""

    def show(obj: Any) -> str:
        return utc_text(getattr(obj, field.attname))

    show.__name__ = show.__qualname__ = field.name
    return admin.display(description=str(field.verbose_name), ordering=field.name)(show)


@functools.cache
def words_column(field: models.DurationField) -> Column:  # type: ignore[type-arg]
    """What shows a ``DurationField`` in words (``5 min``, ``30 s``: ``words.duration``), not
    as ``0:05:00``, under the field's own name and label, ordered by it."""

    def show(obj: Any) -> str:
        return words.duration(getattr(obj, field.attname))

    show.__name__ = show.__qualname__ = field.name
    return admin.display(description=str(field.verbose_name), ordering=field.name)(show)


def instant_fields(model: type[models.Model]) -> dict[str, Column]:
    """Each ``DateTimeField`` of ``model`` by name, with the column that shows it in UTC, and
    each ``DurationField`` with the column that shows it in words."""
    shown: dict[str, Column] = {}
    for field in model._meta.get_fields():
        if isinstance(field, models.DateTimeField):
            shown[field.name] = utc_column(field)
        elif isinstance(field, models.DurationField):
            shown[field.name] = words_column(field)
    return shown


class ShowsInstantsInUtc:
    """For a ``ModelAdmin`` or an inline: every ``DateTimeField`` named in its list columns,
    fields, read-only fields and ``sortable_by`` is shown by ``utc_column`` instead of by
    Django's display, and every ``DurationField`` by ``words_column`` (``5 min``, not
    ``0:05:00``). Each one is read-only (out of the form, among the read-only fields):
    no page of django_jobs edits an instant or a duration through Django's form (run-time
    schedules are edited in the console's own form)."""

    # Each method returns Any: django-stubs types fields and read-only fields as names, and
    # Django takes callables there too (its documented ``readonly_fields``).
    model: type[models.Model]

    def _in_utc(self, names: Sequence[Any]) -> list[Any]:
        columns = instant_fields(self.model)
        return [columns.get(name, name) if isinstance(name, str) else name for name in names]

    def get_list_display(self, request: HttpRequest) -> Any:
        return self._in_utc(super().get_list_display(request))  # type: ignore[misc]

    def get_sortable_by(self, request: HttpRequest) -> Any:
        return self._in_utc(super().get_sortable_by(request))  # type: ignore[misc]

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return self._in_utc(super().get_fields(request, obj))  # type: ignore[misc]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        shown = self._in_utc(super().get_readonly_fields(request, obj))  # type: ignore[misc]
        return [*shown, *(c for c in instant_fields(self.model).values() if c not in shown)]

    def get_exclude(self, request: HttpRequest, obj: Any = None) -> Any:
        # Both the names (the form Django builds) and the columns (what ``fields`` name now).
        excluded = list(super().get_exclude(request, obj) or ())  # type: ignore[misc]
        columns = instant_fields(self.model)
        return [*excluded, *columns, *columns.values()]
