from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta, tzinfo

from django.apps import AppConfig


class ChaosConfig(AppConfig):
    """Handlers, schedules and effect tables of the fault campaign."""

    name = "bench.chaos.app"
    label = "chaos"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        skew = float(os.environ.get("CHAOS_CLOCK_SKEW_SECONDS", "0") or 0)
        if skew:
            _skew_host_clock(timedelta(seconds=skew))


def _skew_host_clock(skew: timedelta) -> None:
    """Make this process's host clock, as django_jobs reads it, wrong by ``skew``.

    ``SystemClock`` is the one place django_jobs reads the host's time; giving its module a
    ``datetime`` whose ``now()`` is off by ``skew`` is what an unsynchronised machine looks like
    to the worker. (libfaketime would be the outside way, but it breaks timed waits in Python
    threads on these machines.)
    """
    from django_jobs import clock

    class SkewedDatetime(datetime):
        @classmethod
        def now(cls, tz: tzinfo | None = None) -> datetime:  # type: ignore[override]
            return datetime.now(tz or UTC) + skew

    setattr(clock, "datetime", SkewedDatetime)  # noqa: B010
