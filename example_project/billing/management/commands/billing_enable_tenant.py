"""``manage.py billing_enable_tenant TENANT``: a tenant turns on its nightly statements.

Creates a run-time, per-tenant schedule through django_jobs' service layer, validated and
audited like a declared one, as ``--actor``: a Django user who may create and change
schedules (``manage.py billing_operator`` makes the example's ``billing-admin``).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from django_jobs import InvalidSchedule, JobsError, Misfire, cron, schedule
from django_jobs.services import now, upsert_schedule


class Command(BaseCommand):
    help = "Turn on nightly statements for a tenant (a run-time schedule in its time zone)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("tenant")
        parser.add_argument("--zone", default="UTC", help="The tenant's IANA time zone.")
        parser.add_argument(
            "--actor",
            default="billing-admin",
            help="the Django user acting (its permission is checked; audited with its id)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        actor = get_user_model().objects.filter(username=options["actor"]).first()
        if actor is None:
            raise CommandError(
                f"--actor {options['actor']!r} is not a user of this project; create it with "
                f"manage.py billing_operator {options['actor']}"
            )
        try:
            declaration = schedule(
                "billing.tenant-statements",
                tenant=options["tenant"],
                job="billing.send_statements",
                timing=cron(
                    "0 9 * * *",
                    zone=options["zone"],
                    skipped="shift",
                    repeated="first",
                    reason=f"statements reach {options['tenant']} at 09:00 in its own zone",
                ),
                max_delay=timedelta(hours=1),
                misfire=Misfire.REPLAY_ONCE,
                retention=timedelta(days=90),
                operating_owner="team-billing",
                record_owner="billing-lead@example.com",
                status="active",
                register=False,
            )
        except InvalidSchedule as exc:
            raise CommandError(str(exc)) from exc
        try:
            row = upsert_schedule(
                declaration,
                actor=actor,
                reason=f"{options['tenant']} turned on nightly statements",
                now=now(),
            )
        except JobsError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(f"schedule {row} runs daily at 09:00 {row.time_zone}")
