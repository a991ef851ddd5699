"""``manage.py jobs``: operate scheduled jobs. Thin: parse, call a service, print."""

from __future__ import annotations

import json
import socket
from datetime import timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ...clock import SystemClock
from ...conf import get_settings
from ...declarations import declared
from ...exceptions import JobsError
from ...services import replica_health, sync_schedules


class Command(BaseCommand):
    help = "Operate scheduled jobs: sync declared schedules, check replica health."

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
        health = sub.add_parser(
            "health",
            help="Exit non-zero unless every runworker replica on this host heartbeated recently.",
            description=(
                "For a process manager or a Kubernetes liveness probe: exits 1 when a replica "
                "on this host has not heartbeated within --max-age seconds, or when none runs."
            ),
        )
        health.add_argument(
            "--max-age",
            type=float,
            default=None,
            help="Seconds without a heartbeat that count as dead (default: 3 x HEARTBEAT_SECONDS).",
        )
        health.add_argument("--host", default=None, help="Check this host (default: this one).")
        health.add_argument("--json", action="store_true", help="Print the replicas as JSON.")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            if options["subcommand"] == "sync":
                self._sync(as_json=options["json"])
            elif options["subcommand"] == "health":
                self._health(options)
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

    def _health(self, options: dict[str, Any]) -> None:
        settings = get_settings()
        max_age = options["max_age"] or 3 * settings.HEARTBEAT_SECONDS
        report = replica_health(
            host=options["host"] or socket.gethostname(),
            now=SystemClock().now(),
            max_age=timedelta(seconds=max_age),
        )
        if options["json"]:
            self.stdout.write(json.dumps(report.as_dict(), indent=2))
        else:
            for replica in report.replicas:
                self.stdout.write(
                    f"{replica.id}: {replica.state}, heartbeat {replica.heartbeat_at.isoformat()}"
                    f" ({'stale' if replica.id in report.stale else 'ok'})"
                )
        if not report.healthy:
            raise CommandError(report.problem)
        self.stdout.write(f"healthy: {len(report.replicas)} replica(s) on {report.host}")
