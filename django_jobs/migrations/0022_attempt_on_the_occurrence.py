"""The current attempt on the occurrence row (issue #38): a claim and a completion write one
row, and an ``Attempt`` row is history, inserted once when the attempt ends.

Adds ``Occurrence.attempt_started_at`` (when the current attempt started running; NULL while
it is claimed ahead of a free run thread): a nullable column, so no table rewrite. Then copies
what the open Attempt rows of processing occurrences say (``running`` since when) onto their
occurrence. The open rows stay: replicas of the release before may still be running them
(migrations run while they serve), and they read and end them by updating them. This
release ends them in place too (``ON CONFLICT``), and a takeover trusts an open row's
outcome over the occurrence's column; so does every reader (``attempts_so_far``).
Reversed, the open rows are written for the attempts that have none.
"""

from django.db import migrations, models

FORWARD = """
UPDATE django_jobs_occurrence o SET attempt_started_at = a.started_at
FROM django_jobs_attempt a
WHERE o.state = 'processing' AND a.occurrence_id = o.id
  AND a.fencing_token = o.fencing_token AND a.outcome = 'running';
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
