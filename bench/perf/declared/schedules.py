"""The schedules the user's-path scenario declares, as an application ships them.

From the environment, read when django_jobs autodiscovers this module:

- ``PERF_DECLARED``: how many one-off ``at()`` schedules, keys ``perf.d0000000`` onwards
  (unset or 0: none, so the other scenarios see no declared schedule);
- ``PERF_DUE``: their instant, a Unix timestamp;
- ``PERF_JOB``: the job they run (default ``perf.noop``);
- ``PERF_DECLARED_EXTRA``: set to ``1``, one more (``perf.dextra``), so that a replica sees a
  declared set changed since the last sync.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta

from django_jobs import at, schedule
from django_jobs.declarations import Declaration


def declarations(
    count: int, *, due: datetime, job: str, extra: bool = False, register: bool = True
) -> list[Declaration]:
    """``count`` one-offs due at ``due`` (and the extra one); with ``register`` they join the
    set ``jobs sync`` writes. The runner builds the same list with ``register=False``."""
    keys = [f"perf.d{n:07d}" for n in range(count)] + (["perf.dextra"] if extra else [])
    return [
        schedule(
            key,
            job=job,
            timing=at(due),
            operating_owner="benchmarks",
            record_owner="perf@example.com",
            status="active",
            retention=timedelta(days=1),
            max_delay=timedelta(hours=1),
            register=register,
        )
        for key in keys
    ]


def environment(count: int, *, due: datetime, job: str, extra: bool = False) -> dict[str, str]:
    """The variables that make a process declare what ``declarations`` returns."""
    return {
        "PERF_DECLARED": str(count),
        "PERF_DUE": repr(due.timestamp()),
        "PERF_JOB": job,
        "PERF_DECLARED_EXTRA": "1" if extra else "",
    }


if int(os.environ.get("PERF_DECLARED") or 0):
    declarations(
        int(os.environ["PERF_DECLARED"]),
        due=datetime.fromtimestamp(float(os.environ["PERF_DUE"]), UTC),
        job=os.environ.get("PERF_JOB", "perf.noop"),
        extra=os.environ.get("PERF_DECLARED_EXTRA") == "1",
    )
