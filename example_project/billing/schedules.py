"""When the billing jobs run: declared apart from what they do (jobs.py)."""

from __future__ import annotations

from datetime import timedelta

from django_jobs import Misfire, Overlap, Retry, after, cron, every, schedule

# UTC, elapsed time: every 10 seconds, anchored to the epoch so it never drifts.
schedule(
    "billing.heartbeat",
    job="billing.heartbeat",
    timing=every(timedelta(seconds=10)),
    max_delay=timedelta(seconds=30),
    misfire=Misfire.SKIP,
    overlap=Overlap.SKIP,
    retry=Retry(max_attempts=3, backoff=timedelta(seconds=5)),
    timeout=timedelta(seconds=30),
    retention=timedelta(days=1),
    operating_owner="team-billing",
    record_owner="billing-lead@example.com",
    status="active",
)

# Business-local: statements go out at 09:00 New York time. On the spring-forward night there
# is no 02:00-03:00, which does not touch 09:00; the rules are stated all the same.
schedule(
    "billing.nightly-statements",
    job="billing.send_statements",
    timing=cron(
        "0 9 * * *",
        zone="America/New_York",
        skipped="shift",
        repeated="first",
        reason="statements reach readers in New York at the start of their business day",
    ),
    max_delay=timedelta(minutes=30),
    misfire=Misfire.REPLAY_ONCE,
    overlap=Overlap.SKIP,
    retry=Retry(max_attempts=5, backoff=timedelta(seconds=30), max_backoff=timedelta(minutes=10)),
    timeout=timedelta(minutes=15),
    retention=timedelta(days=90),
    operating_owner="team-billing",
    record_owner="billing-lead@example.com",
    status="active",
)

# One-off: a statement run right after the schedule record is first created.
schedule(
    "billing.first-statement",
    job="billing.send_statements",
    timing=after(timedelta(0)),
    max_delay=timedelta(days=1),
    retention=timedelta(days=90),
    operating_owner="team-billing",
    record_owner="billing-lead@example.com",
    status="active",
)

# An outside effect every five minutes, done once per occurrence even if the run is repeated.
schedule(
    "billing.accountant-digest",
    job="billing.notify_accountant",
    timing=every(timedelta(minutes=5)),
    max_delay=timedelta(minutes=1),
    misfire=Misfire.SKIP,
    overlap=Overlap.SKIP,
    retention=500,  # keep the last 500 occurrences
    operating_owner="team-billing",
    record_owner="billing-lead@example.com",
    status="active",
)
