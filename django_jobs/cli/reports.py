"""``jobs handlers``, ``departures``, ``sync`` and ``health``: reports on the code and the
fleet, which need no ``--actor``."""

from __future__ import annotations

import json
import socket
from datetime import timedelta
from typing import Any

from django.core.management.base import CommandError

from .. import clock, conventions, services, words
from ..conf import get_settings
from ..declarations import declared
from ..registry import registry
from .invocation import Invocation


def handlers(run: Invocation) -> None:
    settings = get_settings()
    rows: list[dict[str, Any]] = []
    for handler in registry.all():
        report = conventions.report(handler.func, settings)
        rows.append(
            {
                "job": handler.name,
                "module": handler.module,
                "app": report.app,
                "dispatches": [
                    {"path": d.path, "kind": d.kind, "app": d.app} for d in report.dispatches
                ],
                "departures": [d.rule for d in handler.departures],
            }
        )
    text = "\n".join(
        f"{r['job']} ({r['module']}, app {r['app'] or '-'}): "
        + (
            ", ".join(f"{d['kind']} {d['path']}" for d in r["dispatches"])
            or "dispatches no command or port"
        )
        + (f" [departs from: {', '.join(r['departures'])}]" if r["departures"] else "")
        for r in rows
    )
    run.emit(rows, text or "no job handlers registered")


def departures(run: Invocation) -> None:
    # A review date, read from code: the day is all that matters, and no database is needed.
    today = clock.current().now().date()
    recorded = [
        (f"job {handler.name}", handler.module, departure)
        for handler in registry.all()
        for departure in handler.departures
    ] + [
        (f"schedule {declaration.label}", declaration.module, declaration.departure)
        for declaration in declared.all()
        if declaration.departure is not None
    ]
    rows = [
        {
            "subject": subject,
            "where": where,
            "rule": departure.rule,
            "reason": departure.reason,
            "review_by": departure.review_by.isoformat(),
            "due": departure.review_by < today,
        }
        for subject, where, departure in recorded
    ]
    rows.sort(key=lambda r: (not r["due"], r["review_by"], r["subject"]))
    text = "\n".join(
        f"{'REVIEW DUE ' if r['due'] else ''}{r['subject']} ({r['where']}): departs from "
        f"{r['rule']} until {r['review_by']}: {r['reason']}"
        for r in rows
    )
    run.emit(rows, text or "no departures recorded")


def sync(run: Invocation) -> None:
    report = services.sync_schedules(declared.all(), now=services.now())
    if run.options["json"]:
        run.stdout.write(json.dumps(report.__dict__, indent=2))
        return
    for label in ("created", "updated", "retired"):
        for key in getattr(report, label):
            run.stdout.write(f"{label}: {key}")
    run.stdout.write(f"schedules synced: {report}")


def health(run: Invocation) -> None:
    max_age = run.options["max_age"] or 3 * get_settings().HEARTBEAT_SECONDS
    report = services.replica_health(
        host=run.options["host"] or socket.gethostname(),
        now=services.now(),
        max_age=timedelta(seconds=max_age),
    )
    if run.options["json"]:
        run.stdout.write(json.dumps(report.as_dict(), indent=2))
    else:
        _print_health(run, report)
    if not report.healthy:
        raise CommandError(report.problem)
    run.stdout.write(f"healthy: {len(report.replicas)} replica(s) on {report.host}")


def _print_health(run: Invocation, report: services.HealthReport) -> None:
    """The report as text: instants to the second in UTC and durations in words
    (``django_jobs.words``); ``--json`` keeps ISO 8601 and seconds."""
    for replica in report.replicas:
        age = words.duration(report.now - replica.heartbeat_at)
        run.stdout.write(
            f"{replica.id}: {replica.state}, heartbeat {words.instant(replica.heartbeat_at)}"
            f" ({age} ago, {'stale' if replica.id in report.stale else 'ok'})"
        )
        if replica.threads:
            threads = ", ".join(
                f"{role} {status}" for role, status in sorted(replica.threads.items())
            )
            run.stdout.write(f"  threads: {threads}")
    retention = report.retention_dict()
    if report.retention is not None and retention is not None:
        run.stdout.write(
            f"retention: last pass {words.instant(report.retention.finished_at)} "
            f"({words.duration(retention['seconds_since_last_pass'])} ago) by "
            f"{retention['replica']}, deleted {retention['deleted']} "
            f"({retention['rows_per_second']}/s), lag {words.duration(retention['lag_seconds'])}"
        )
    for parked in report.parked:
        run.stdout.write(f"parked: {parked['schedule']} ({parked['field']}): {parked['reason']}")
    for stranded in report.stranded:
        run.stdout.write(f"stranded: {stranded.name}: {stranded.why}. {stranded.what_to_do}")
    for unserved in report.unserved():
        run.stdout.write(
            f"unserved queue: {unserved['queue']}: work is waiting on it and no live replica "
            f"serves it; {unserved['what_to_do']}"
        )
