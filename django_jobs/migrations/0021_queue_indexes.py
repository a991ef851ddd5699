"""The occurrence indexes of queues (issue #36), built ``CONCURRENTLY``: replicas keep
claiming and completing while they are built (each reads the whole occurrence table, about
10 s at 10 million rows; a plain ``CREATE INDEX`` would block every write to it for that
long, and leases would lapse). Not atomic, as ``CREATE INDEX CONCURRENTLY`` cannot run in a
transaction; only index builds, so a build that fails (it leaves an INVALID index behind:
drop it) is retried by running ``migrate`` again.

- ``django_jobs_occurrence_queue``: the claim of a replica serving named queues walks one
  range per queue in claim order (queue, ``django_jobs_claim_order(due_at, (priority +
  0)::smallint)``, the claim order written so that no other index holds it:
  ``models.occurrences.QUEUE_CLAIM_ORDER``), partial on the claimable states.
- ``django_jobs_occurrence_running``: a queue's fleet-wide limit counts its running
  occurrences with it (queue, lease_expires_at; partial on ``processing``: small).
- ``django_jobs_occurrence_qdue``: the wake-up lookup of such a replica, its earliest
  claimable ``due_at`` per served queue from one range each (queue,
  ``django_jobs_claim_order(due_at, 0)``, which is ``due_at``: an expression only this index
  holds, so the walk cannot be planned on the due-at index filtered by queue, which read
  every other queue's claimable row due before the served queue's first one; bench/perf
  ``queues``).
"""

from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models
from django.db.models.functions import Cast

import django_jobs.models.occurrences


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("django_jobs", "0020_queues"),
    ]

    operations = [
        AddIndexConcurrently(
            model_name="occurrence",
            index=models.Index(
                models.F("queue"),
                django_jobs.models.occurrences.ClaimOrder(
                    models.F("due_at"),
                    Cast(models.F("priority") + models.Value(0), models.SmallIntegerField()),
                ),
                condition=models.Q(("state__in", ("scheduled", "failed", "processing"))),
                name="django_jobs_occurrence_queue",
            ),
        ),
        AddIndexConcurrently(
            model_name="occurrence",
            index=models.Index(
                condition=models.Q(("state", "processing")),
                fields=["queue", "lease_expires_at"],
                name="django_jobs_occurrence_running",
            ),
        ),
        AddIndexConcurrently(
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
