"""The procrastinate side of the side-by-side benchmark. Imported only inside the benchmark's
own virtualenv (``bench/.peer-venv``), where procrastinate is installed; never a dependency of
django_jobs.

PEER_SCHEDULES periodic tasks (one task, one ``periodic_id`` each) are due at the same second,
PEER_DUE (a Unix timestamp); the handler does nothing.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime

import procrastinate  # type: ignore[import-not-found]

app = procrastinate.App(
    connector=procrastinate.PsycopgConnector(conninfo=os.environ["DATABASE_URL"])
)

_due = datetime.fromtimestamp(float(os.environ.get("PEER_DUE", "0")), UTC)
# croniter's sixth field is the second.
_cron = f"{_due.minute} {_due.hour} {_due.day} {_due.month} * {_due.second}"


@app.task(name="perf.noop")  # type: ignore[untyped-decorator]
def noop(timestamp: int) -> None:
    return None


for _n in range(int(os.environ.get("PEER_SCHEDULES", "0"))):
    app.periodic(cron=_cron, periodic_id=f"p{_n:07d}")(noop)
