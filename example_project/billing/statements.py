"""The billing application's commands. Job handlers dispatch these; they own the writes."""

from __future__ import annotations

from datetime import date, datetime

import structlog

from .models import Heartbeat, Statement

log = structlog.get_logger("billing")


def send_for(for_date: date, *, idempotency_key: str, tenant: str = "") -> Statement:
    """Send the statements of ``for_date`` once per idempotency key, however often called."""
    statement, _ = Statement.objects.get_or_create(
        idempotency_key=idempotency_key, defaults={"for_date": for_date, "tenant": tenant}
    )
    return statement


def beat(at: datetime, *, idempotency_key: str) -> Heartbeat:
    heartbeat, _ = Heartbeat.objects.get_or_create(
        idempotency_key=idempotency_key, defaults={"beat_at": at}
    )
    return heartbeat


def notify_accountant(at: datetime, *, idempotency_key: str) -> None:
    """Stands in for a call to a mail or chat service, which takes the idempotency key."""
    log.info("billing.accountant_notified", at=at.isoformat(), idempotency_key=idempotency_key)
