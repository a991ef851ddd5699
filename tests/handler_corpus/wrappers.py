"""Handlers given to the registry wrapped: a ``functools.partial``, a bound method, an object
with ``__call__``, a ``functools.wraps`` decorator, a lambda; and handlers whose helper lives
in another module (of the project: tests/handler_corpus/project_helpers.py; or Django's).

Each wrapper kind wraps three functions: one that ``writes`` a model itself (W020), one that
``counts`` and dispatches nothing (W024), one that ``sends`` through the billing command (no
warning). Only their source is read; none of them is run.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable

from django.contrib.auth.models import User, update_last_login

from django_jobs import Run
from example_project.billing import statements
from example_project.billing.models import Statement

from . import project_helpers
from .project_helpers import save_it, send_it

logger = logging.getLogger(__name__)


def writes(run: Run, tenant: str = "") -> None:
    Statement.objects.filter(idempotency_key=run.occurrence_key).update(tenant=tenant)


def counts(run: Run, n: int = 10) -> int:
    return sum(range(n))


def sends(run: Run, tenant: str = "") -> None:
    with run.atomic():
        statements.send_for(
            run.scheduled_at.date(), idempotency_key=run.occurrence_key, tenant=tenant
        )


# Partials ---------------------------------------------------------------------------------

WRITES_FOR_ACME = functools.partial(writes, tenant="acme")
COUNTS_TO_FIVE = functools.partial(counts, n=5)
SENDS_FOR_ACME = functools.partial(sends, tenant="acme")


# Bound methods ----------------------------------------------------------------------------


class Exporter:
    """Its methods, bound to an instance, are the handlers."""

    def __init__(self, tenant: str) -> None:
        self.tenant = tenant

    def writes(self, run: Run) -> None:
        Statement.objects.filter(idempotency_key=run.occurrence_key).update(tenant=self.tenant)

    def counts(self, run: Run) -> int:
        return len(self.tenant)

    def sends(self, run: Run) -> None:
        self._send(run)

    def _send(self, run: Run) -> None:
        """A helper reached through ``self``: it dispatches the command."""
        statements.send_for(
            run.scheduled_at.date(), idempotency_key=run.occurrence_key, tenant=self.tenant
        )


EXPORTER = Exporter("acme")


# Callable objects -------------------------------------------------------------------------


class Writer:
    def __call__(self, run: Run) -> None:
        self._save(run)

    def _save(self, run: Run) -> None:
        Statement.objects.filter(idempotency_key=run.occurrence_key).update(tenant="")


class Counter:
    def __call__(self, run: Run) -> int:
        return 1


class Sender:
    def __call__(self, run: Run) -> None:
        statements.send_for(run.scheduled_at.date(), idempotency_key=run.occurrence_key)


# functools.wraps decorators ---------------------------------------------------------------


def logged(func: Callable[[Run], object]) -> Callable[[Run], object]:
    @functools.wraps(func)
    def wrapper(run: Run) -> object:
        logger.info("running %s", run.occurrence_key)
        return func(run)

    return wrapper


@logged
def writes_logged(run: Run) -> None:
    Statement.objects.filter(idempotency_key=run.occurrence_key).update(tenant="")


@logged
def counts_logged(run: Run) -> int:
    return 1


@logged
def sends_logged(run: Run) -> None:
    statements.send_for(run.scheduled_at.date(), idempotency_key=run.occurrence_key)


# A lambda in the middle of a statement: its own source is a fragment that does not parse.
WRITES_IN_A_LAMBDA = functools.partial(
    lambda run, tenant: Statement.objects.filter(tenant=tenant).update(tenant=""),
    tenant="acme",
)


# Helpers in other modules -----------------------------------------------------------------


def saves_through_a_project_helper(run: Run) -> None:
    save_it(run)


def sends_through_a_project_helper(run: Run) -> None:
    send_it(run)


def saves_two_calls_down(run: Run) -> None:
    project_helpers.save_later(run)


def saves_past_the_bound(run: Run) -> None:
    project_helpers.first(run)


def saves_through_django(run: Run) -> None:
    """Django's helper writes the user (``user.save()``): third-party code is not read."""
    update_last_login(User, User.objects.get(username=run.tenant))
