"""Queues with real ``runworker`` replicas (issue #36): a replica serves only its
``--queue``s, and a queue's fleet-wide limit holds however many replicas serve it, measured
from the handlers' own start and end instants."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from django_jobs import enqueue
from django_jobs.models import Attempt, Occurrence, OccurrenceState, Replica

from .concurrency import wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.processes]


def _completed(ids: list) -> bool:
    done = Occurrence.objects.filter(pk__in=ids, state=OccurrenceState.COMPLETED)
    return done.count() == len(ids)


def test_each_replica_claims_only_the_queue_it_serves(start) -> None:
    mail = start("mail-r", args=["--queue", "mail:2"])
    reports = start("reports-r", args=["--queue", "reports:2"])
    mail.wait_logged("worker.started")
    reports.wait_logged("worker.started")
    on = {
        "mail": [enqueue("proc.effect", queue="mail").id for _ in range(10)],
        "reports": [enqueue("proc.effect", queue="reports").id for _ in range(10)],
    }
    wait_until(
        lambda: _completed(on["mail"] + on["reports"]),
        timeout=120,
        what=lambda: f"20 completions: {mail.log_path.read_text()[-1500:]}",
    )
    for queue, ids in on.items():
        replicas = set(
            Attempt.objects.filter(occurrence_id__in=ids).values_list("replica", flat=True)
        )
        assert replicas == {f"{queue}-r"}, (queue, replicas)
    served = dict(Replica.objects.values_list("id", "queues"))
    assert served["mail-r"] == [{"name": "mail", "concurrency": 2}]
    assert served["reports-r"] == [{"name": "reports", "concurrency": 2}]


def _most_at_once(spans: list[tuple[float, float]]) -> int:
    """The largest number of spans open at one instant (an end before a start at a tie)."""
    edges = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])
    most = now = 0
    for _, step in edges:
        now += step
        most = max(most, now)
    return most


def test_a_fleet_wide_limit_of_two_holds_across_three_replicas(start, tmp_path: Path) -> None:
    env = {"JOBS_QUEUES": json.dumps({"reports": {"MAX_RUNNING": 2}})}
    # One run thread each: two at once is two replicas at once, three would break the limit.
    replicas = [start(f"r{n}", args=["--queue", "reports:1"], env=env) for n in range(3)]
    for replica in replicas:
        replica.wait_logged("worker.started")
    ids = [enqueue("proc.span", queue="reports").id for _ in range(12)]
    wait_until(lambda: _completed(ids), timeout=180, what="12 spans to complete")
    lines = (tmp_path / "spans").read_text().split("\n")
    spans = [(float(a), float(b)) for a, b, _ in (line.split() for line in lines if line)]
    assert len(spans) == 12
    # Three run threads between them, but never more than two handlers at once; and two did
    # run at once (the limit is used, not just never reached).
    assert _most_at_once(spans) == 2, sorted(spans)
    claimed_by = set(
        Attempt.objects.filter(occurrence_id__in=ids).values_list("replica", flat=True)
    )
    assert len(claimed_by) >= 2, claimed_by
