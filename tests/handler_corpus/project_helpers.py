"""Helpers in a module of the project's own, apart from the handlers that call them
(tests/handler_corpus/wrappers.py): the checks read them as they read the handler."""

from __future__ import annotations

from django_jobs import Run
from example_project.billing import statements
from example_project.billing.models import Statement


def save_it(run: Run) -> None:
    Statement.objects.create(idempotency_key=run.occurrence_key, for_date=run.scheduled_at)


def send_it(run: Run) -> None:
    with run.atomic():
        statements.send_for(run.scheduled_at.date(), idempotency_key=run.occurrence_key)


def save_later(run: Run) -> None:
    """Two calls down from a handler: still read."""
    _save_here(run)


def _save_here(run: Run) -> None:
    Statement.objects.filter(idempotency_key=run.occurrence_key).delete()


def first(run: Run) -> None:
    second(run)


def second(run: Run) -> None:
    third(run)


def third(run: Run) -> None:
    fourth(run)


def fourth(run: Run) -> None:
    """Four calls down from a handler: past the bound (three), never read."""
    Statement.objects.filter(idempotency_key=run.occurrence_key).delete()
