"""What a refused call must leave unchanged: every row a service, a command or an admin page
could write."""

from __future__ import annotations

from typing import Any

from django.forms.models import model_to_dict

from django_jobs.models import Attempt, AuditRecord, Limit, Occurrence, Runbook, Schedule


def snapshot() -> tuple[Any, ...]:
    """Every Schedule, Limit, Runbook, Occurrence, Attempt and AuditRecord row, in key order,
    to compare before and after a call that must change nothing."""
    return (
        [model_to_dict(s) for s in Schedule.objects.order_by("pk")],
        list(Limit.objects.order_by("pk").values()),
        list(Runbook.objects.order_by("pk").values()),
        list(Occurrence.objects.order_by("pk").values()),
        list(Attempt.objects.order_by("pk").values()),
        list(AuditRecord.objects.order_by("pk").values()),
    )
