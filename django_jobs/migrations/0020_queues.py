"""Queues (issue #36): the queue of each schedule's planned work (``Schedule.queue``) and of
each occurrence (``Occurrence.queue``), both "default" for existing rows (a database default:
no table rewrite, and rows an older release inserts during a rolling deploy get it too); the
queues each replica serves (``Replica.queues``, [] = every queue); the index a claim of named
queues walks, one range per queue in claim order (``django_jobs_occurrence_queue``), and the
one a queue's fleet-wide limit counts its running occurrences with
(``django_jobs_occurrence_running``, partial on ``processing``: small).
"""

from django.db import migrations, models

import django_jobs.models.occurrences


class Migration(migrations.Migration):
    dependencies = [
        ("django_jobs", "0019_task_paths"),
    ]

    operations = [
        migrations.AddField(
            model_name="occurrence",
            name="queue",
            field=models.CharField(db_default="default", default="default", max_length=100),
        ),
        migrations.AddField(
            model_name="replica",
            name="queues",
            field=models.JSONField(
                blank=True, db_default=models.Value([], models.JSONField()), default=list
            ),
        ),
        migrations.AddField(
            model_name="schedule",
            name="queue",
            field=models.CharField(db_default="default", default="default", max_length=100),
        ),
        migrations.AddIndex(
            model_name="occurrence",
            index=models.Index(
                models.F("queue"),
                django_jobs.models.occurrences.ClaimOrder(models.F("due_at"), models.F("priority")),
                condition=models.Q(("state__in", ("scheduled", "failed", "processing"))),
                name="django_jobs_occurrence_queue",
            ),
        ),
        migrations.AddIndex(
            model_name="occurrence",
            index=models.Index(
                condition=models.Q(("state", "processing")),
                fields=["queue", "lease_expires_at"],
                name="django_jobs_occurrence_running",
            ),
        ),
    ]
