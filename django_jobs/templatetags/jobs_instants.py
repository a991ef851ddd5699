"""``{% load jobs_instants %}``: ``{{ instant|utc_text }}`` shows an instant as every admin
page of django_jobs does, ``2026-03-01 12:00:00 UTC`` (``django_jobs.admin_instants``)."""

from __future__ import annotations

from datetime import datetime

from django import template

from ..admin_instants import utc_text as _utc_text

register = template.Library()


@register.filter
def utc_text(moment: datetime | None) -> str:
    return _utc_text(moment)
