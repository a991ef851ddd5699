"""``manage.py billing_operator USERNAME``: the account billing's provisioning acts as.

``billing_enable_tenant`` creates schedules through ``django_jobs.services.upsert_schedule``,
which acts as a Django user whose permission it checks and whose id it audits. This command
makes that user: created if missing (without a password: it never logs in), given Django's
``add_schedule`` and ``change_schedule`` on django_jobs schedules and nothing more (not staff,
not superuser). Run again, it changes nothing.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.core.management.base import BaseCommand, CommandParser

NEEDED = ("add_schedule", "change_schedule")


class Command(BaseCommand):
    help = "Create (or keep) the user billing_enable_tenant acts as, with only what it needs."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username", nargs="?", default="billing-admin")

    def handle(self, *args: Any, **options: Any) -> None:
        user, created = get_user_model().objects.get_or_create(username=options["username"])
        if created:
            user.set_unusable_password()
            user.save(update_fields=["password"])
        user.user_permissions.add(
            *Permission.objects.filter(content_type__app_label="django_jobs", codename__in=NEEDED)
        )
        self.stdout.write(
            f"{user.get_username()} may create and change run-time schedules ({', '.join(NEEDED)})"
        )
