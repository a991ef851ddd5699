# Fencing values never repeat for an occurrence identity (issue #32, item 7). A claim counted
# its token per row (fencing_token + 1), so once retention purged a finished occurrence and a
# replay created the same identity again (UUIDv5 of tenant, key and instant), its next claim
# got token 1 a second time. Claims now draw tokens from this one sequence
# (store/_sql.py FENCING_TOKENS, store/sql/claims.sql).
#
# CACHE 1 (the default, said out loud): with a per-session cache two replicas would hold
# ranges of their own, and the later claim of an occurrence could get the smaller token. No
# table owns the sequence, so nothing that resets a table's sequences (flush, TRUNCATE ...
# RESTART IDENTITY) moves it back.
#
# The sequence starts past the largest token any occurrence holds (an occurrence's attempts
# and steps carry none larger). Tokens of rows purged before this migration are gone with
# them and cannot be known; a replica of the previous release still claiming while this runs
# counts per row, and the claim's GREATEST(nextval, fencing_token + 1) keeps each row's
# tokens growing whichever release wrote it. Reading the largest token scans the occurrence
# table once (a few seconds at 10 million rows) and locks nothing.

from django.db import migrations

CREATE = "CREATE SEQUENCE django_jobs_fencing_token AS bigint MINVALUE 1 NO CYCLE CACHE 1"

# An empty table: the first claim gets 1, as before. Otherwise the next token is max + 1.
START_PAST_EXISTING_TOKENS = """
SELECT setval('django_jobs_fencing_token', GREATEST(t.largest, 1), t.largest >= 1)
FROM (SELECT COALESCE(max(fencing_token), 0) AS largest FROM django_jobs_occurrence) t
"""


class Migration(migrations.Migration):
    dependencies = [
        ("django_jobs", "0015_admin_newest_first"),
    ]

    operations = [
        migrations.RunSQL(
            sql=[CREATE, START_PAST_EXISTING_TOKENS],
            reverse_sql="DROP SEQUENCE IF EXISTS django_jobs_fencing_token",
        ),
    ]
