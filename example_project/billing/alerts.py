"""The example's dead-letter alert: an e-mail to the schedule's record owner.

Wired by ``DJANGO_JOBS["ON_DEAD"] = "example_project.billing.alerts.email_record_owner"``
(example_project/settings.py), sent after the write that made the occurrence dead committed.
Whom it goes to: the schedule's ``record_owner`` when it is an e-mail address; otherwise the
address ``TEAM_EMAILS`` gives that owner (a team name such as ``team-billing``); otherwise
``<owner>@example.com``. The e-mail carries the stored, redacted error (``event.error``),
never the exception itself.
"""

from __future__ import annotations

from django.conf import settings
from django.core.mail import send_mail

from django_jobs import services, words
from django_jobs.models import Schedule
from django_jobs.signals import OccurrenceEvent

FALLBACK_DOMAIN = "example.com"


def owner_address(owner: str) -> str:
    """The address of a schedule's record owner (see the module docstring)."""
    if "@" in owner:
        return owner
    teams: dict[str, str] = getattr(settings, "TEAM_EMAILS", {})
    return teams.get(owner, f"{owner}@{FALLBACK_DOMAIN}")


def email_record_owner(event: OccurrenceEvent) -> None:
    """Tell the record owner of ``event``'s schedule that one of its occurrences is dead."""
    schedule = Schedule.objects.filter(pk=event.schedule_id).first()
    if schedule is None:  # the schedule was removed since: nobody to tell
        return
    subject = f"[jobs] {event.schedule}: occurrence {event.occurrence_id} is dead"
    body = "\n".join(
        [
            f"Schedule: {event.schedule} (job {event.job})",
            f"Occurrence: {event.occurrence_id}, scheduled at {words.instant(event.scheduled_at)}",
            f"Attempts: {event.attempt}",
            f"Error: {event.error_type}: {event.error}",
            "",
            "It will not run again unless replayed: manage.py jobs replay "
            f"{event.occurrence_id} --actor <you> --reason '...'",
            f"A replay runs it as attempt {event.attempt + 1} with a fresh retry budget: "
            f"{services.consequences.retry_budget(schedule, event.attempt + 1)}.",
        ]
    )
    send_mail(subject, body, None, [owner_address(schedule.record_owner)])
