"""``manage.py jobs``: operate scheduled jobs. Thin: parse, call a service, print.

Operator subcommands take ``--actor``, a Django username whose permissions apply (object and
tenant permissions included) and who is named in the audit record; without it they act as
``DJANGO_JOBS["CLI_ACTOR"]``, else as the Django user named as the OS user. It is self-asserted:
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
from ...logging import log_to_stderr_unless_configured


class Command(BaseCommand):
    help = (
        "Operate scheduled jobs: list, inspect, replay, cancel, disable, enable, run-now, purge, "
        "handlers, departures, runbooks, sync, health, top."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        add_subcommands(parser)

    def run_from_argv(self, argv: list[str]) -> None:
        # Started from the command line (not call_command): in a project that configures no
        # logging, its lines go to stderr at info (django_jobs.logging).
        log_to_stderr_unless_configured()
        super().run_from_argv(argv)

    def handle(self, *args: Any, **options: Any) -> None:
        check_texts(options)
        try:
            SUBCOMMANDS[options["subcommand"]](Invocation(options, self.stdout))
        except JobsError as exc:
            raise CommandError(str(exc)) from exc
