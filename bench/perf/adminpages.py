"""Admin pages at a big occurrence table: the occurrence table filled with N rows (generated
directly) spread over several schedules, tenants, states and triggers, then the server time of
the admin's list pages, a schedule's page and the dashboard, rendered in-process by Django's
test ``Client`` (no network, no browser: what the server spends on a request).

1. ``SCHEDULES`` schedules over ``TENANTS``; row ``n`` belongs to schedule ``n mod
   SCHEDULES``, one second after row ``n - 1``, the newest an hour before now; mostly
   completed, some dead, failed (waiting for a retry) and skipped, some retries and replays.
2. A superuser, and a staff user with the object permission to view one schedule only.
3. Each page: ``warmup`` requests, then ``samples`` timed ones; p50 and p99 in ms.

The dashboard (URL ``admin:django_jobs_dashboard``) is measured when that URL resolves, and
reported as not measured (with a note) when it does not."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from ..postgres import Database
from .bigtable import CHUNK
from .thundering import RESET, add_schedules, percentile

if TYPE_CHECKING:
    from django.test import Client

SCHEDULES = 20
TENANTS = ("acme", "globex", "initech", "umbrella")
# One row in DEAD_EVERY is dead, one in SKIPPED_EVERY skipped (missed its start delay), one
# in FAILED_EVERY failed and waiting for its retry (few: a retry is soon due and claimed; at
# 10,000 rows, none); one in RETRY_EVERY is a retry, one in MANUAL_EVERY a replay. Primes, so
# that the groups overlap little and spread over schedules.
DEAD_EVERY, FAILED_EVERY, SKIPPED_EVERY = 997, 100_003, 101
RETRY_EVERY, MANUAL_EVERY = 53, 211

FILL = """
    INSERT INTO django_jobs_occurrence (
        id, schedule_id, tenant, scheduled_at, state, skip_reason, trigger, due_at,
        lease_owner, fencing_token, attempts, failures, started_at, finished_at,
        last_error_type, last_error_message)
    SELECT gen_random_uuid(), (%(ids)s::bigint[])[mod(n, %(k)s) + 1],
           (%(tenants)s::text[])[mod(n, %(k)s) + 1], at, kind.state,
           CASE WHEN kind.state = 'skipped' THEN 'misfire' ELSE '' END,
           CASE WHEN mod(n, %(manual)s) = 0 THEN 'manual'
                WHEN mod(n, %(retry)s) = 0 THEN 'retry' ELSE 'schedule' END,
           at, '', 1, 1, CASE WHEN kind.state IN ('dead', 'failed') THEN 1 ELSE 0 END,
           CASE WHEN kind.state = 'skipped' THEN NULL ELSE at END,
           CASE WHEN kind.state IN ('skipped', 'failed') THEN NULL ELSE at END,
           CASE WHEN kind.state IN ('dead', 'failed') THEN 'RuntimeError' ELSE '' END,
           CASE WHEN kind.state IN ('dead', 'failed') THEN 'boom' ELSE '' END
    FROM generate_series(%(low)s, %(high)s - 1) AS n,
         LATERAL (SELECT %(start)s::timestamptz + n * interval '1 second' AS at) AS instant,
         LATERAL (SELECT CASE WHEN mod(n, %(dead)s) = 0 THEN 'dead'
                              WHEN mod(n, %(failed)s) = 0 THEN 'failed'
                              WHEN mod(n, %(skipped)s) = 0 THEN 'skipped'
                              ELSE 'completed' END AS state) AS kind
"""


def fill(db: Database, *, rows: int, now: datetime) -> list[int]:
    """``SCHEDULES`` schedules (tenants in turn) and ``rows`` occurrences of them, the newest an
    hour before ``now``: the schedules' ids, in the order rows cycle through them."""
    from django_jobs.models import Schedule

    add_schedules(SCHEDULES, job="perf.noop", due=now + timedelta(days=1), prefix="perf.admin")
    ids = list(Schedule.objects.order_by("key").values_list("pk", flat=True))
    tenants = [TENANTS[i % len(TENANTS)] for i in range(len(ids))]
    for pk, tenant in zip(ids, tenants, strict=True):
        Schedule.objects.filter(pk=pk).update(tenant=tenant)
    start = now - timedelta(hours=1) - timedelta(seconds=rows)
    for first in range(0, rows, CHUNK):
        db.execute(
            FILL,
            {
                "ids": ids,
                "tenants": tenants,
                "k": len(ids),
                "start": start,
                "low": first,
                "high": min(rows, first + CHUNK),
                "dead": DEAD_EVERY,
                "failed": FAILED_EVERY,
                "skipped": SKIPPED_EVERY,
                "retry": RETRY_EVERY,
                "manual": MANUAL_EVERY,
            },
        )
    db.execute("VACUUM ANALYZE django_jobs_occurrence")
    db.execute("CHECKPOINT")
    return ids


def timed(client: Client, url: str, *, warmup: int, samples: int) -> list[float]:
    """Seconds per GET of ``url`` after ``warmup`` untimed ones; each must answer 200."""
    times = []
    for n in range(warmup + samples):
        started = time.perf_counter()
        response = client.get(url)
        elapsed = time.perf_counter() - started
        if response.status_code != 200:
            raise RuntimeError(f"GET {url}: {response.status_code}")
        if n >= warmup:
            times.append(elapsed)
    return times


def pages(ids: list[int], *, occurrence: str, key: str) -> dict[str, str]:
    """The pages measured, by name: each the URL the superuser requests."""
    from django.urls import reverse

    occurrences = reverse("admin:django_jobs_occurrence_changelist")
    return {
        "occurrences": occurrences,
        "occurrences_dead": f"{occurrences}?state__exact=dead",
        "occurrences_schedule": f"{occurrences}?schedule__id__exact={ids[3]}",
        "occurrences_past_day": f"{occurrences}?scheduled=24h",
        "occurrences_search_id": f"{occurrences}?q={occurrence}",
        "occurrences_search_key": f"{occurrences}?q={key}",
        "schedules": reverse("admin:django_jobs_schedule_changelist"),
        "schedule_page": reverse("admin:django_jobs_schedule_change", args=[ids[3]]),
    }


def dashboard() -> str | None:
    """The dashboard's URL, or None while it does not exist."""
    from django.urls import NoReverseMatch, reverse

    try:
        return reverse("admin:django_jobs_dashboard")
    except NoReverseMatch:
        return None


def clients(ids: list[int]) -> tuple[Client, Client]:
    """A superuser's client, and one of a staff user who may view the schedule ``ids[3]``."""
    from django.contrib.auth.models import User
    from django.test import Client
    from guardian.shortcuts import assign_perm

    from django_jobs.models import Schedule

    User.objects.filter(username__in=["perf-root", "perf-scoped"]).delete()
    root, scoped = Client(), Client()
    root.force_login(User.objects.create_superuser("perf-root", "root@example.com", "pw"))
    user = User.objects.create_user("perf-scoped", password="pw", is_staff=True)
    assign_perm("django_jobs.view_schedule", user, Schedule.objects.get(pk=ids[3]))
    scoped.force_login(user)
    return root, scoped


def run(db: Database, *, rows: int, warmup: int = 3, samples: int = 30) -> list[dict[str, Any]]:
    """One row per page at a table of ``rows`` occurrences: p50 and p99 in ms."""
    from django_jobs.models import Occurrence, Schedule

    db.execute(RESET)
    now = datetime.now(UTC).replace(microsecond=0)
    filled_at = time.perf_counter()
    ids = fill(db, rows=rows, now=now)
    fill_seconds = time.perf_counter() - filled_at
    root, scoped = clients(ids)
    middle = Occurrence.objects.filter(schedule_id=ids[3]).order_by("scheduled_at")
    occurrence = middle.values_list("pk", flat=True)[min(rows // SCHEDULES // 2, 1000)]
    key = Schedule.objects.get(pk=ids[3]).key
    found: list[dict[str, Any]] = []

    def measure(name: str, client: Client, url: str | None, note: str = "") -> None:
        row: dict[str, Any] = {"scenario": f"admin {name}", "rows": rows}
        if url is None:
            found.append({**row, "p50_ms": None, "p99_ms": None, "note": note})
            return
        times = timed(client, url, warmup=warmup, samples=samples)
        p50, p99 = percentile(times, 50), percentile(times, 99)
        found.append(
            {**row, "p50_ms": (p50 or 0) * 1000, "p99_ms": (p99 or 0) * 1000, "note": note}
        )
        print(found[-1], flush=True)

    for name, url in pages(ids, occurrence=str(occurrence), key=key).items():
        measure(name, root, url)
    occurrences = pages(ids, occurrence="", key="")["occurrences"]
    measure("occurrences (scoped user)", scoped, occurrences, "object permission on one schedule")
    measure("schedules (scoped user)", scoped, pages(ids, occurrence="", key="")["schedules"])
    board = dashboard()
    note = "" if board else "admin:django_jobs_dashboard does not resolve yet: rerun later"
    measure("dashboard", root, board, note)
    measure("dashboard (scoped user)", scoped, board, note)
    found[0]["fill_s"] = fill_seconds
    return found


def ratios(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each page at the largest table against the same page at the smallest: p50 and p99."""
    sizes = sorted({r["rows"] for r in rows})
    if len(sizes) < 2:
        return []
    small = {r["scenario"]: r for r in rows if r["rows"] == sizes[0]}
    out = []
    for row in (r for r in rows if r["rows"] == sizes[-1]):
        base = small.get(row["scenario"])
        if base is None or row["p50_ms"] is None or not base["p50_ms"]:
            continue
        out.append(
            {
                "scenario": f"{row['scenario']}: {sizes[-1]:,} / {sizes[0]:,} rows",
                "p50_ms": row["p50_ms"],
                "p99_ms": row["p99_ms"],
                "p50_ratio": row["p50_ms"] / base["p50_ms"],
                "p99_ratio": row["p99_ms"] / base["p99_ms"],
                "under_300_ms": "yes" if row["p99_ms"] < 300 else "no",
            }
        )
    return out
