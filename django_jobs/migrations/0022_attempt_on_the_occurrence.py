"""The current attempt on the occurrence row (issue #38): a claim and a completion write one
row, and an ``Attempt`` row is history, inserted once when the attempt ends.

Adds ``Occurrence.attempt_started_at`` (when the current attempt started running; NULL while
it is claimed ahead of a free run thread): a nullable column, so no table rewrite. Then moves
what the open Attempt rows of processing occurrences said (``running`` since when, or only
``claimed``) onto their occurrence and deletes those rows; their history row is written when
they end, as for every attempt claimed from now on. Reversed, the open rows are written back.

A replica of the release before keeps working through a rolling upgrade: it inserts an open
row when it claims, which this release's ending write completes in place (``ON CONFLICT``),
and a takeover of such a lease counts it as started if its open row says so.
"""

from django.db import migrations, models

FORWARD = """
UPDATE django_jobs_occurrence o SET attempt_started_at = a.started_at
FROM django_jobs_attempt a
WHERE o.state = 'processing' AND a.occurrence_id = o.id
  AND a.fencing_token = o.fencing_token AND a.outcome = 'running';
DELETE FROM django_jobs_attempt a USING django_jobs_occurrence o
WHERE a.occurrence_id = o.id AND o.state = 'processing'
  AND a.fencing_token = o.fencing_token AND a.outcome IN ('running', 'claimed');
"""

BACKWARD = """
INSERT INTO django_jobs_attempt (occurrence_id, number, fencing_token, replica, trigger,
                                 started_at, outcome, error_type, error_message)
SELECT o.id, o.attempts, o.fencing_token, o.lease_owner, o.trigger,
       COALESCE(o.attempt_started_at, o.started_at),
       CASE WHEN o.attempt_started_at IS NULL THEN 'claimed' ELSE 'running' END, '', ''
FROM django_jobs_occurrence o
WHERE o.state = 'processing' AND o.attempts > 0
ON CONFLICT (occurrence_id, fencing_token) DO NOTHING;
"""


class Migration(migrations.Migration):
    dependencies = [("django_jobs", "0021_queue_indexes")]

    operations = [
        migrations.AddField(
            model_name="occurrence",
            name="attempt_started_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.RunSQL(FORWARD, BACKWARD),
    ]
