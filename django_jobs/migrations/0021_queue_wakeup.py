"""The wake-up lookup of a replica serving named queues (issue #36): its earliest claimable
``due_at`` per served queue, read from one range of ``django_jobs_occurrence_qdue`` each:
(queue, ``django_jobs_claim_order(due_at, 0)``, which is ``due_at``: an expression only this
index holds, so the walk cannot be planned on the due-at index filtered by queue), partial on
the claimable states. That walk read every other queue's claimable row due before the served
queue's first one (bench/perf ``queues``).
"""

from django.db import migrations, models
from django.db.models.functions import Cast

import django_jobs.models.occurrences


class Migration(migrations.Migration):
    dependencies = [
        ("django_jobs", "0020_queues"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="occurrence",
            index=models.Index(
                models.F("queue"),
                django_jobs.models.occurrences.ClaimOrder(
                    models.F("due_at"), Cast(models.Value(0), models.SmallIntegerField())
                ),
                condition=models.Q(("state__in", ("scheduled", "failed", "processing"))),
                name="django_jobs_occurrence_qdue",
            ),
        ),
    ]
