"""Fencing values belong to an occurrence's identity, not to its row: retention may purge the
row and a replay recreate it (same tenant, key and instant, same id), and its next claim still
gets a token larger than every one that identity ever had. Real processes doing the same:
``test_fencing_identity_processes``."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.db.models import F

from django_jobs import services, store
from django_jobs.models import Attempt, Limit, Occurrence
from django_jobs.store import Lease

from .factories import T0, ScheduleFactory
from .storeutil import LEASE, claim, plan, purge

pytestmark = pytest.mark.django_db

PURGED_AT = T0 + timedelta(hours=2)  # past the Limit's keep_for: the finished row goes


@dataclass(frozen=True)
class Replayed:
    """An occurrence claimed twice by replica ``w`` (the first lease lapsed, its handler
    abandoned), completed, purged by retention, replayed and claimed by ``w`` again."""

    abandoned: Lease  # the first claim's lease, still held by a thread that never ended
    purged_tokens: frozenset[int]  # every token the identity had before the purge
    lease: Lease  # the claim after the replay


@pytest.fixture
def replayed() -> Replayed:
    root = User.objects.create_superuser("root", "root@example.com", "x")
    schedule = ScheduleFactory.create(tenant="acme", key="acme.sync")
    Limit.objects.create(schedule=schedule, keep_for=timedelta(hours=1))
    (occurrence_id,) = plan(schedule, T0, now=T0)
    (abandoned,) = claim("w", T0)
    (current,) = claim("w", T0 + LEASE + timedelta(seconds=1))  # the same replica, again
    assert store.complete([current], now=T0 + LEASE + timedelta(seconds=2)).accepted
    tokens = Attempt.objects.filter(occurrence_id=occurrence_id).values_list(
        "fencing_token", flat=True
    )
    purged_tokens = frozenset(tokens)
    assert purge(now=PURGED_AT, batch_size=10) == 1
    assert not Occurrence.objects.filter(pk=occurrence_id).exists()
    recreated = services.replay_at(schedule, at=T0, actor=root, reason="backfill", now=PURGED_AT)
    assert recreated.pk == occurrence_id
    (lease,) = claim("w", PURGED_AT)
    assert lease.occurrence_id == occurrence_id
    return Replayed(abandoned, purged_tokens, lease)


def test_a_purged_and_replayed_occurrence_is_claimed_with_a_token_above_all_it_had(
    replayed: Replayed,
) -> None:
    assert replayed.purged_tokens == {replayed.abandoned.token, max(replayed.purged_tokens)}
    assert replayed.lease.token > max(replayed.purged_tokens)


def test_a_lease_from_before_the_purge_cannot_write_to_the_replayed_occurrence(
    replayed: Replayed,
) -> None:
    """The abandoned handler of the same replica, owner ``w`` like the new claim: only the
    token tells the two apart."""
    assert store.record_step(replayed.abandoned, "send", now=PURGED_AT) is False
    assert store.complete([replayed.abandoned], now=PURGED_AT).accepted == frozenset()
    assert Occurrence.objects.get(pk=replayed.lease.occurrence_id).state == "processing"
    assert store.complete([replayed.lease], now=PURGED_AT).accepted == {
        replayed.lease.occurrence_id
    }


def test_a_claim_gives_a_larger_token_than_the_row_holds_even_above_the_sequence() -> None:
    """A token written by hand, or by a release that counted per row (an older replica still
    claiming during a rolling upgrade), above what the sequence has given: the next claim's
    token is still larger than the row's."""
    schedule = ScheduleFactory.create()
    (occurrence_id,) = plan(schedule, T0, now=T0)
    (first,) = claim("w", T0)
    Occurrence.objects.filter(pk=occurrence_id).update(fencing_token=F("fencing_token") + 10**9)
    (second,) = claim("v", T0 + LEASE + timedelta(seconds=1))
    assert second.token > first.token + 10**9
