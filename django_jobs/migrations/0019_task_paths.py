"""The task paths ``JobsBackend.enqueue`` records (issue #33, finding 1): the Tasks handler
imports a task's module only if its path was recorded for its alias at enqueue, never a path
read from an occurrence's arguments alone.

Nothing is backfilled: a task enqueued before this release, in a module the worker has not
imported, is refused (dead at once); enqueue it again, or import its module in an installed
app's ``tasks`` module.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_jobs", "0018_tenant_pause_mark"),
    ]

    operations = [
        migrations.CreateModel(
            name="TaskPath",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("alias", models.CharField(max_length=200)),
                ("path", models.CharField(max_length=500)),
                ("recorded_at", models.DateTimeField()),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(
                        fields=("alias", "path"), name="django_jobs_task_path_unique"
                    )
                ],
            },
        ),
    ]
