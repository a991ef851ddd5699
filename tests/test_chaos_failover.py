"""The fault campaign's failover checks (``bench/chaos/failover.py``, ``--ha``): a replica up at
a failover must be the same process afterwards and claim again, and what the replicas were
told had committed must be in the database; writes lost with an asynchronous standby's WAL
tail are classified. On the history of ``test_chaos_checks``, no servers started."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench.chaos.faults import Fault
from bench.chaos.invariants import Findings, check_all
from bench.chaos.replicas import Incarnation
from django_jobs.models import Attempt

from .factories import T0
from .test_chaos_checks import (
    CUTOFF,
    GRACE_SECONDS,
    LEASE_SECONDS,
    ConnectionRows,
    S,
    broken,
    history,  # noqa: F401
)

pytestmark = pytest.mark.django_db
SURVIVED = "every failover survived without a replica restart"
ACKNOWLEDGED = "acknowledged writes survive failover"


def failover(**replicas: tuple[bool, float | None]) -> Fault:
    """A failover at T0 + 20 s; per life up then: (same process afterwards, claimed after s)."""
    seen = {
        name: {"pid": 100 + n, "same_process": same, "resumed_after_s": resumed}
        for n, (name, (same, resumed)) in enumerate(replicas.items())
    }
    detail = {"writable_s": 1.5, "standby_s": 4.0, "lost_wal_bytes": 512, "replicas": seen}
    return Fault("failover", "", T0 + 20 * S, 4.0, detail)


def life(
    tmp_path: Path, name: str, *events: dict[str, Any], exit_code: int | None = None
) -> Incarnation:
    path = tmp_path / f"{name}.log"
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    ended = T0 + 21 * S if exit_code is not None else None
    return Incarnation(name, 0.0, T0, path, ended=ended, exit_code=exit_code)


def completed(attempt: Attempt, *, token: int | None = None, at: int = 7) -> dict[str, Any]:
    """The line a replica logs once its completion's commit returned."""
    return {
        "event": "occurrence.completed",
        "occurrence": str(attempt.occurrence_id),
        "token": attempt.fencing_token if token is None else token,
        "timestamp": (T0 + at * S).isoformat(),
    }


def check(lives: list[Incarnation], faults: list[Fault]) -> Findings:
    return check_all(
        ConnectionRows(),
        cutoff=CUTOFF,
        faults=faults,
        lives=lives,
        lease_seconds=LEASE_SECONDS,
        grace_seconds=GRACE_SECONDS,
        ha=True,
    )


def test_a_failover_every_replica_survived_passes(history, tmp_path: Path):  # noqa: F811
    attempts = list(Attempt.objects.order_by("fencing_token", "occurrence_id"))
    r1 = life(tmp_path, "r1.1", *[completed(a) for a in attempts])
    found = check([r1], [failover(**{"r1.1": (True, 2.5)})])
    assert broken(found) == {}
    assert found.figures["failovers"] == 1
    assert found.figures["failover_resumed_max_s"] == 2.5
    assert found.figures["failover_writable_s_max"] == 1.5
    assert found.figures["wal_tail_losses"] == {"enqueue_lost": 0}


def test_a_replica_restarted_by_a_failover_is_reported(history, tmp_path: Path):  # noqa: F811
    faults = [failover(**{"r1.1": (False, None), "r2.1": (True, None)})]
    found = check([life(tmp_path, "r1.1", exit_code=1), life(tmp_path, "r2.1")], faults)
    at = f"{T0 + 20 * S:%H:%M:%S}"
    assert broken(found)[SURVIVED] == [
        f"failover 1 at {at}: r1.1 exited (code 1)",
        f"failover 1 at {at}: r2.1 did not claim work within 60 s",
    ]


def test_a_handler_cut_off_during_a_failover_is_not_the_failovers_restart(history, tmp_path: Path):  # noqa: F811
    cut_off = {"event": "run.cut_off", "occurrence": "x", "timestamp": (T0 + 20 * S).isoformat()}
    found = check(
        [life(tmp_path, "r1.1", cut_off, exit_code=3)], [failover(**{"r1.1": (False, None)})]
    )
    assert broken(found) == {}
    assert found.figures["failover_lives_ended_by_cut_off"] == 1


def test_completions_lost_with_the_wal_tail_are_classified(history, tmp_path: Path):  # noqa: F811
    first, second, *_ = Attempt.objects.order_by("occurrence_id")
    # r2.1 was told it completed ``first`` with the token the database now shows r1.1
    # holding: the token was granted twice. r1.1 was told it completed ``second`` under a
    # token the database never saw, and ``second`` completed again under another: it ran
    # twice.
    r1 = life(tmp_path, "r1.1", completed(second, token=second.fencing_token + 5, at=18))
    r2 = life(tmp_path, "r2.1", completed(first, at=19))
    found = check([r1, r2], [failover(**{"r1.1": (True, 1.0), "r2.1": (True, 1.0)})])
    assert found.figures["wal_tail_losses"] == {
        "completion_lost_ran_again": 1,
        "enqueue_lost": 0,
        "token_granted_twice": 1,
    }
    assert found.figures["wal_tail_losses_by_failover"] == {
        "1": {"completion_lost_ran_again": 1, "token_granted_twice": 1, "lost_wal_bytes": 512}
    }
    problems = broken(found)[ACKNOWLEDGED]
    assert problems[0].startswith(f"completion_lost_ran_again: occurrence {second.occurrence_id}")
    assert problems[0].endswith("now completed; 2.000 s before failover 1's kill")
    assert problems[1].startswith(f"token_granted_twice: occurrence {first.occurrence_id}")


def test_an_occurrence_gone_with_the_wal_tail_is_classified(history, tmp_path: Path):  # noqa: F811
    first = Attempt.objects.order_by("occurrence_id").first()
    assert first is not None
    r1 = life(tmp_path, "r1.1", completed(first, at=19))
    Attempt.objects.filter(occurrence_id=first.occurrence_id).delete()
    first.occurrence.delete()
    found = check([r1], [failover(**{"r1.1": (True, 1.0)})])
    assert found.figures["wal_tail_losses"] == {"enqueue_lost": 0, "occurrence_lost": 1}
    assert broken(found)[ACKNOWLEDGED][0].endswith("now absent; 1.000 s before failover 1's kill")
