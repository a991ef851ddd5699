"""The index of processing occurrences by schedule (issue #38), built ``CONCURRENTLY`` as
0021's are (replicas keep claiming and completing while it is built; not atomic; a build that
fails leaves an INVALID index behind: drop it and run ``migrate`` again).

- ``django_jobs_occurrence_holding``: whether a schedule has an occurrence processing, the
  overlap check a claim makes for every row of a skip/queue schedule it takes. Planned on
  ``django_jobs_occurrence_running`` (queue, lease_expires_at) filtered by schedule, each
  check read every entry of that index, the dead entries a burst leaves too: 16 of a 26 ms
  claim of 24 rows in the user's-path burst (auto_explain, docs/performance.md).
"""

from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("django_jobs", "0022_attempt_on_the_occurrence"),
    ]

    operations = [
        AddIndexConcurrently(
            model_name="occurrence",
            index=models.Index(
                condition=models.Q(("state", "processing")),
                fields=["schedule"],
                name="django_jobs_occurrence_holding",
            ),
        ),
    ]
