"""What a replica does when one kind of its own store statements fails, for each kind of error:
the matrix of docs/worker.md ("When the worker's own statements fail"), under real
``runworker_faults`` processes (tests/workerapp/management/commands/runworker_faults.py) on
real PostgreSQL.

For each statement the worker issues (lease renewal, claim, completion, heartbeat, plan,
retention) and each error (an outage: its backend terminated; a database error that is not an
outage; a Python error), the statement fails once while an occurrence is due: the replica says
so in the line the matrix names, the occurrence completes exactly once, the replica goes on
serving and exits 0 when stopped. A statement that keeps failing with an error that is not an
outage in a thread that guards the runs stops the replica safely: exit 4, nothing claimed
after it.
"""

from __future__ import annotations

import signal
from datetime import timedelta
from pathlib import Path

import pytest

from django_jobs.models import Attempt, AttemptOutcome, Occurrence, OccurrenceState

from .concurrency import wait_until
from .test_misbehaving_jobs import beats, due_occurrence, state_of

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.processes]

ENV = {
    "JOBS_LEASE_SECONDS": "3",
    "JOBS_TIMEOUT_GRACE_SECONDS": "1",
    "JOBS_SHUTDOWN_GRACE_SECONDS": "2",
    "JOBS_RETENTION_SECONDS": "0.5",
    "JOBS_TEST_RUN_SECONDS": "2",  # long enough for renewals (every 0.5 s)
}

# (statement, error) -> (the line the replica logs, with these fields)
MATRIX: dict[tuple[str, str], tuple[str, dict[str, object]]] = {
    ("renew", "outage"): ("store.unavailable", {"during": "renewal"}),
    ("renew", "database"): ("thread.crashed", {"role": "lease_keeper", "restart": True}),
    ("renew", "python"): ("thread.crashed", {"role": "lease_keeper", "restart": True}),
    ("claim", "outage"): ("store.unavailable", {}),
    ("claim", "database"): ("worker.pass_failed", {}),
    ("claim", "python"): ("thread.crashed", {"role": "loop", "restart": True}),
    ("complete", "outage"): ("store.unavailable", {"during": "completion"}),
    ("complete", "database"): ("thread.crashed", {"role": "completer", "restart": True}),
    ("complete", "python"): ("thread.crashed", {"role": "completer", "restart": True}),
    ("heartbeat", "outage"): ("store.unavailable", {"during": "heartbeat"}),
    ("heartbeat", "database"): ("thread.crashed", {"role": "heartbeat", "restart": True}),
    ("heartbeat", "python"): ("thread.crashed", {"role": "heartbeat", "restart": True}),
    ("plan", "outage"): ("store.unavailable", {}),
    ("plan", "database"): ("worker.pass_failed", {}),
    ("plan", "python"): ("thread.crashed", {"role": "loop", "restart": True}),
    ("retention", "outage"): ("retention.failed", {}),
    ("retention", "database"): ("retention.failed", {}),
    ("retention", "python"): ("thread.crashed", {"role": "retention", "restart": True}),
}


@pytest.mark.parametrize(("statement", "error"), sorted(MATRIX))
def test_one_failed_statement_is_survived_and_the_run_completes_once(
    start, tmp_path: Path, statement: str, error: str
) -> None:
    occurrence = due_occurrence("proc.watchful_beat", timeout=timedelta(minutes=1))
    replica = start(
        "faulty",
        command="runworker_faults",
        env={**ENV, "JOBS_TEST_FAULT": f"{statement}:{error}:1"},
    )
    event, fields = MATRIX[(statement, error)]
    replica.wait_logged(event, timeout=30)
    wait_until(
        lambda: state_of(occurrence) == OccurrenceState.COMPLETED,
        timeout=30,
        what=lambda: f"the occurrence to complete: {replica.log_path.read_text()[-3000:]}",
    )

    line = next(e for e in replica.events() if e.get("event") == event)
    assert {key: line.get(key) for key in fields} == fields
    (attempt,) = Attempt.objects.filter(occurrence=occurrence)
    assert attempt.outcome == AttemptOutcome.SUCCEEDED
    assert beats(tmp_path, "faulty"), "its handler ran"
    assert replica.alive
    assert replica.logged("worker.failed") == 0
    replica.signal(signal.SIGTERM)
    assert replica.wait_exit() == 0


@pytest.mark.parametrize(
    ("statement", "role", "run_seconds"),
    [("renew", "lease_keeper", "30"), ("complete", "completer", "0.2"), ("claim", "loop", "30")],
)
def test_a_statement_that_keeps_failing_stops_the_replica_safely(
    start, tmp_path: Path, statement: str, role: str, run_seconds: str
) -> None:
    """Crashed four times within five minutes: the thread is dead, the replica stops claiming,
    cancels its run and gives it the grace, releases what it can, and exits 4. (A keeper that
    cannot renew crashes only while it has leases to renew: each run it cannot keep is
    cancelled at its lease margin, so four runs are due.)"""
    occurrence, *others = [
        due_occurrence("proc.watchful_beat", timeout=timedelta(minutes=1))
        for _ in range(4 if statement == "renew" else 1)
    ]
    replica = start(
        "failing",
        command="runworker_faults",
        env={
            **ENV,
            "JOBS_TEST_RUN_SECONDS": run_seconds,
            "JOBS_TEST_FAULT": f"{statement}:python:always",
        },
    )

    assert replica.wait_exit(timeout=60) == 4
    failed = next(e for e in replica.events() if e.get("event") == "worker.failed")
    assert (failed["role"], failed["exit_code"]) == (role, 4)
    crashes = [e for e in replica.events() if e.get("event") == "thread.crashed"]
    assert [(c["role"], c["restart"]) for c in crashes] == [(role, True)] * 3 + [(role, False)]
    row = Occurrence.objects.get(pk=occurrence.pk)
    if statement == "renew":
        # Each run was cancelled at its lease margin, returned, and its completion written;
        # none is left processing under this replica, and none ran its 30 s.
        rows = Occurrence.objects.filter(pk__in=[occurrence.pk, *(o.pk for o in others)])
        assert not rows.filter(state=OccurrenceState.PROCESSING, lease_owner="failing").exists()
        assert rows.filter(state=OccurrenceState.COMPLETED).exists()
        ran = beats(tmp_path, "failing")
        assert ran[-1] - ran[0] < 25, "the runs were not stopped"
    elif statement == "complete":
        # Its completion could not be written: the lease lapses and the next claim records
        # the attempt lost (never two holders at once).
        assert (row.state, row.lease_owner) == (OccurrenceState.PROCESSING, "failing")
    else:
        assert row.state == OccurrenceState.SCHEDULED  # never claimed
