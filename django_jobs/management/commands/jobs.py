"""``manage.py jobs``: operate scheduled jobs. Thin: parse, call a service, print."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ...clock import SystemClock
from ...declarations import declared
from ...exceptions import JobsError
from ...services import sync_schedules


class Command(BaseCommand):
    help = "Operate scheduled jobs: sync declared schedules to the database."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="subcommand", required=True, metavar="SUBCOMMAND")
        sync = sub.add_parser(
            "sync",
            help="Write the schedules declared in schedules.py modules to the database.",
            description=(
                "Create new declared schedules, update changed ones (timing changes are "
                "audited) and retire ones no longer declared. The worker also runs this at start."
            ),
        )
        sync.add_argument("--json", action="store_true", help="Print the report as JSON.")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            if options["subcommand"] == "sync":
                self._sync(as_json=options["json"])
        except JobsError as exc:
            raise CommandError(str(exc)) from exc

    def _sync(self, *, as_json: bool) -> None:
        report = sync_schedules(declared.all(), now=SystemClock().now())
        if as_json:
            self.stdout.write(json.dumps(report.__dict__, indent=2))
            return
        for label in ("created", "updated", "retired"):
            for key in getattr(report, label):
                self.stdout.write(f"{label}: {key}")
        self.stdout.write(f"schedules synced: {report}")
