"""What the console's schedule form is posted: every field of a valid run-time schedule, each
test changing the ones it is about."""

from __future__ import annotations

from typing import Any


def form_data(**fields: Any) -> dict[str, Any]:
    """A daily 06:00 UTC cron of ``billing.send_statements`` (a job offered at run time) for
    acme, with ``fields`` changed."""
    return {
        "tenant": "acme",
        "key": "acme.report",
        "job": "billing.send_statements",  # offered at run time
        "timing_kind": "cron",
        "cron": "0 6 * * *",
        "time_zone": "UTC",
        "priority": "0",
        "max_delay": "00:05:00",
        "misfire": "skip",
        "max_catchup": "100",
        "overlap": "skip",
        "max_attempts": "3",
        "backoff": "00:00:30",
        "max_backoff": "00:10:00",
        "timeout": "00:15:00",
        "keep_for": "30 00:00:00",
        "operating_owner": "ops",
        "record_owner": "billing",
        "status": "active",
        "reason": "new report",
        **fields,
    }
