"""``{% load jobs_instants %}``: durations and instants as every admin page of django_jobs
shows them (``django_jobs.words``).

- ``{{ instant|utc_text }}``: ``2026-03-01 12:00:00 UTC``, to the second, in UTC
  (``django_jobs.admin_instants``); ``-`` for None.
- ``{{ timedelta|duration_words }}``: ``43 ms``, ``2.5 s``, ``1 min 26 s``, never Python's
  ``0:01:25.681976``; ``-`` for None.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django import template

from .. import words
from ..admin_instants import utc_text as _utc_text

register = template.Library()


@register.filter
def utc_text(moment: datetime | None) -> str:
    return _utc_text(moment)


@register.filter
def duration_words(value: timedelta | float | None) -> str:
    return words.duration(value)
