"""Audit records carry the schedule they concern and the acting user's id.

The admin scopes and filters records by ``schedule_id`` instead of matching ``target_id``
against lists of schedule and occurrence ids; ``actor_id`` keeps who acted when a username is
renamed or reused. Existing records get their schedule back where it can still be known:

- a record that targets a schedule: that schedule's id (even when retention removed it);
- a record that targets an occurrence: that occurrence's schedule, where the occurrence
  still exists (a purged one's record keeps ``schedule_id`` null, and stays visible through
  its tenant).

``actor_id`` is not backfilled: the user who now holds a username need not be the one who
acted, which is the very thing the column fixes.
"""

from django.db import migrations, models

BACKFILL_SCHEDULES = r"""
UPDATE django_jobs_auditrecord SET schedule_id = target_id::bigint
WHERE target_type = 'schedule' AND target_id ~ '^[0-9]{1,18}$'
"""

BACKFILL_OCCURRENCES = r"""
UPDATE django_jobs_auditrecord a SET schedule_id = o.schedule_id
FROM django_jobs_occurrence o
WHERE a.target_type = 'occurrence'
  AND a.target_id ~* '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$'
  AND o.id = a.target_id::uuid
"""


class Migration(migrations.Migration):
    dependencies = [
        ("django_jobs", "0005_zone_reason"),
    ]

    operations = [
        migrations.AddField(
            model_name="auditrecord",
            name="actor_id",
            field=models.CharField(blank=True, max_length=100, null=True),
        ),
        migrations.AddField(
            model_name="auditrecord",
            name="schedule_id",
            field=models.BigIntegerField(blank=True, null=True),
        ),
        # Before the indexes: the backfill does not update them row by row.
        migrations.RunSQL(BACKFILL_SCHEDULES, reverse_sql=migrations.RunSQL.noop),
        migrations.RunSQL(BACKFILL_OCCURRENCES, reverse_sql=migrations.RunSQL.noop),
        migrations.AddIndex(
            model_name="auditrecord",
            index=models.Index(fields=["-at", "-id"], name="django_jobs_audit_newest"),
        ),
        migrations.AddIndex(
            model_name="auditrecord",
            index=models.Index(
                fields=["schedule_id", "-at", "-id"], name="django_jobs_audit_schedule"
            ),
        ),
        migrations.AddIndex(
            model_name="auditrecord",
            index=models.Index(fields=["tenant", "-at", "-id"], name="django_jobs_audit_tenant"),
        ),
    ]
