"""Schedules the planner refuses are parked with the field and the reason."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("django_jobs", "0006_audit_schedule")]

    operations = [
        migrations.AddField(
            model_name="schedule",
            name="parked_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="schedule",
            name="parked_field",
            field=models.CharField(blank=True, default="", max_length=50),
        ),
        migrations.AddField(
            model_name="schedule",
            name="parked_reason",
            field=models.TextField(blank=True, default=""),
        ),
        migrations.AddIndex(
            model_name="schedule",
            index=models.Index(
                condition=models.Q(("parked_field", "job")),
                fields=["job"],
                name="django_jobs_parked_job",
            ),
        ),
    ]
