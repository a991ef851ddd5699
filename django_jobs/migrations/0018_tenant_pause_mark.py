"""Tenant pauses are marked by a field, not by the disabled reason's text (issue #33,
finding 6): ``resume_tenant`` enables only the schedules ``pause_tenant`` marked.

Nothing is backfilled from the reason's text, which is what the finding refused to trust: a
schedule paused before this release stays disabled when its tenant is resumed; enable it on
its own (``jobs enable``, the admin's action).
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("django_jobs", "0017_replica_threads")]

    operations = [
        migrations.AddField(
            model_name="schedule",
            name="paused_by_tenant",
            field=models.BooleanField(db_default=False, default=False),
        ),
    ]
