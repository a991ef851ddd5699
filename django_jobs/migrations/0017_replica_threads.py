"""Each replica's threads and their status on its heartbeat row (``worker.supervision``)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("django_jobs", "0016_fencing_never_repeats")]

    operations = [
        migrations.AddField(
            model_name="replica",
            name="threads",
            field=models.JSONField(
                blank=True,
                db_default=models.Value({}, models.JSONField()),
                default=dict,
            ),
        ),
    ]
