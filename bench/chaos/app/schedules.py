"""The campaign's schedules: every kind of timing and policy the worker has to keep straight."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django_jobs import Misfire, Overlap, Retry, cron, every
from django_jobs import schedule as declare

S = timedelta(seconds=1)
QUICK_RETRY = Retry(max_attempts=5, backoff=S, max_backoff=2 * S)


def schedule(key: str, **fields: Any) -> None:
    """Every campaign schedule has the same owners and retention, and unless it says
    otherwise the same retries, timeout and catch-up cap."""
    declare(
        key,
        operating_owner="chaos-campaign",
        record_owner="reliability@example.com",
        status="active",
        retention=timedelta(days=7),
        **{"retry": QUICK_RETRY, "timeout": 30 * S, "max_catchup": 1000, **fields},
    )


schedule(
    "chaos.tick",
    job="chaos.effect",
    timing=every(S),
    max_delay=5 * S,
    misfire=Misfire.SKIP,
    overlap=Overlap.ALLOW,
)
schedule(
    "chaos.outside",
    job="chaos.outside",
    timing=every(2 * S),
    max_delay=5 * S,
    misfire=Misfire.REPLAY_ALL,
    overlap=Overlap.ALLOW,
)
schedule(
    "chaos.minute",
    job="chaos.effect",
    timing=cron("* * * * *"),
    max_delay=10 * S,
    misfire=Misfire.REPLAY_ONCE,
    overlap=Overlap.SKIP,
)
# Business-local, in a zone with a half-hour offset.
schedule(
    "chaos.local",
    job="chaos.effect",
    timing=cron(
        "*/2 * * * *",
        zone="Asia/Kolkata",
        skipped="shift",
        repeated="first",
        reason="the campaign's business-local schedule, in a half-hour-offset zone",
    ),
    max_delay=10 * S,
    misfire=Misfire.REPLAY_ALL,
    overlap=Overlap.QUEUE,
)
# Long runs that overlap the next occurrence: skipped, or queued behind it.
schedule(
    "chaos.long-skip",
    job="chaos.long",
    timing=every(5 * S),
    max_delay=10 * S,
    misfire=Misfire.REPLAY_ONCE,
    overlap=Overlap.SKIP,
)
schedule(
    "chaos.long-queue",
    job="chaos.long",
    timing=every(12 * S),  # runs of 2-8 s: a backlog after a fault drains between runs
    max_delay=30 * S,
    misfire=Misfire.REPLAY_ALL,
    overlap=Overlap.QUEUE,
)
schedule(
    "chaos.flaky",
    job="chaos.flaky",
    timing=every(3 * S),
    max_delay=10 * S,
    misfire=Misfire.REPLAY_ALL,
    overlap=Overlap.ALLOW,
)
schedule(
    "chaos.doomed",
    job="chaos.doomed",
    timing=every(10 * S),
    max_delay=10 * S,
    misfire=Misfire.REPLAY_ALL,
    overlap=Overlap.ALLOW,
    retry=Retry(max_attempts=2, backoff=S, max_backoff=S),
)

# The misbehaving handlers (bench/chaos/app/jobs.py).
# Kills its replica on every attempt. Runs of it never overlap and a missed one is not
# replayed, so one crash loop (max_attempts replica lives, about 10 s) goes on at a time and
# the replicas spend most of the campaign up.
schedule(
    "chaos.crasher",
    job="chaos.crasher",
    timing=every(30 * S),
    max_delay=10 * S,
    misfire=Misfire.SKIP,
    overlap=Overlap.SKIP,
    retry=Retry(max_attempts=3, backoff=S, max_backoff=S),
)
# Ignores cancellation for 4-8 s: about three runs at any time, so a SIGSTOP usually finds one.
schedule(
    "chaos.stubborn",
    job="chaos.stubborn",
    timing=every(2 * S),
    max_delay=5 * S,
    misfire=Misfire.SKIP,
    overlap=Overlap.ALLOW,
)
# Reads through PostgreSQL restarts. Outages are not failures, and only lost leases are; ten
# attempts make a death by lost leases alone improbable, so any death is the check's business.
schedule(
    "chaos.reader",
    job="chaos.reader",
    timing=every(3 * S),
    max_delay=10 * S,
    misfire=Misfire.REPLAY_ALL,
    overlap=Overlap.ALLOW,
    retry=Retry(max_attempts=10, backoff=S, max_backoff=2 * S),
)
schedule(
    "chaos.leaker",
    job="chaos.leaker",
    timing=every(2 * S),
    max_delay=5 * S,
    misfire=Misfire.SKIP,
    overlap=Overlap.ALLOW,
)
schedule(
    "chaos.snooper",
    job="chaos.snooper",
    timing=every(2 * S),
    max_delay=5 * S,
    misfire=Misfire.SKIP,
    overlap=Overlap.ALLOW,
)
schedule(
    "chaos.coroutine",
    job="chaos.coroutine",
    timing=every(2 * S),
    max_delay=5 * S,
    misfire=Misfire.REPLAY_ALL,
    overlap=Overlap.ALLOW,
)
# Returns None without run.atomic(): its completion is the completer's group write.
schedule(
    "chaos.plain",
    job="chaos.plain",
    timing=every(2 * S),
    max_delay=5 * S,
    misfire=Misfire.SKIP,
    overlap=Overlap.ALLOW,
)
