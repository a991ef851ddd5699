"""``manage.py jobs``: operate scheduled jobs. Thin: parse, call a service, print.

Operator subcommands take ``--actor``, a Django username whose permissions apply (object and
tenant permissions included) and who is named in the audit record. It is self-asserted:
whoever can run ``manage.py`` holds the database credentials and is trusted in full.
``DJANGO_JOBS["CLI_ACTOR_RULES"]`` narrows whom it may name (the OS user's own name, no
superuser), so the audit trail says who ran the command, not merely who they claimed to be.

The subcommands live in ``django_jobs.cli``, one function each.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ...cli import SUBCOMMANDS, Invocation
from ...cli.arguments import add_subcommands, check_texts
from ...exceptions import JobsError


class Command(BaseCommand):
    help = (
        "Operate scheduled jobs: list, inspect, replay, disable, enable, run-now, purge, "
        "handlers, departures, runbooks, sync, health."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        add_subcommands(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        check_texts(options)
        try:
            SUBCOMMANDS[options["subcommand"]](Invocation(options, self.stdout))
        except JobsError as exc:
            raise CommandError(str(exc)) from exc
