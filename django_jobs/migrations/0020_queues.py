"""Queues (issue #36): the queue of each schedule's planned work (``Schedule.queue``) and of
each occurrence (``Occurrence.queue``), both "default" for existing rows (a database default:
on PostgreSQL 11+ only the catalog changes, no table rewrite, so the ``ACCESS EXCLUSIVE``
lock is held for an instant; rows an older release inserts during a rolling deploy get it
too); the queues each replica serves (``Replica.queues``, [] = every queue).

Atomic, and only the columns: the occurrence indexes on them are built ``CONCURRENTLY`` by
0021_queue_indexes, which cannot run in a transaction. Kept apart, a concurrent build that
fails leaves this migration applied and 0021 to run again, never a half-applied one.
"""

from django.db import migrations, models


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
    ]
