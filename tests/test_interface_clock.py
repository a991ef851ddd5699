"""One clock for the interfaces: ``clock.current()``, injected with ``use_clock``, and
``services.now()``, which puts it on the database's timeline as the workers' clocks are."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from django_jobs import clock, services, store
from django_jobs.management.commands.runworker import Command as RunWorker
from django_jobs.testing import FakeClock, use_clock

from .factories import T0


def test_the_injected_clock_is_current_until_its_block_ends() -> None:
    process = clock.current()
    assert isinstance(process, clock.SystemClock)
    outer, inner = FakeClock(T0), FakeClock(T0 + timedelta(hours=1))
    with use_clock(outer):
        assert clock.current() is outer
        with use_clock(inner):
            assert clock.current() is inner
        assert clock.current() is outer
    assert clock.current() is process


def test_an_object_without_now_is_refused() -> None:
    with pytest.raises(TypeError, match="needs an object with now"), use_clock(object()):  # type: ignore[arg-type]
        pass


def test_runworker_takes_the_injected_clock() -> None:
    fake = FakeClock(T0)
    with use_clock(fake):
        assert RunWorker().make_clock() is fake


@pytest.mark.django_db
def test_services_now_reads_an_injected_clock_as_it_is() -> None:
    with use_clock(FakeClock(T0)), CaptureQueriesContext(connection) as queries:
        assert services.now() == T0
    assert queries.captured_queries == []


@pytest.mark.django_db
def test_services_now_aligns_a_system_clock_with_the_database_once() -> None:
    skewed = clock.SystemClock(offset=timedelta(hours=1))  # a host clock an hour out
    with use_clock(skewed):
        now = services.now()
        assert abs(now - store.database_clock()) < timedelta(seconds=5)
        with CaptureQueriesContext(connection) as queries:
            services.now()
        assert queries.captured_queries == []  # aligned: no round trip until ALIGN_EVERY
