"""What the wall-clock timings (``cron``, ``rrule``) share: which zones are UTC, how far a
local time can land from its instant, and the checks of their zone, DST choices and reason.

Pure: no clock, no database.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from .policies import RepeatedTime, SkippedTime
from .timing import InvalidTiming
from .zones import zone

MAX_REASON = 500

# Zone names that are UTC under another name: a schedule in one of them is not business-local.
UTC_NAMES = frozenset(
    {
        "UTC",
        "Etc/UTC",
        "Etc/UCT",
        "UCT",
        "Etc/Universal",
        "Universal",
        "Etc/Zulu",
        "Zulu",
        "GMT",
        "Etc/GMT",
        "Etc/GMT+0",
        "Etc/GMT-0",
        "Etc/GMT0",
        "GMT+0",
        "GMT-0",
        "GMT0",
        "Etc/Greenwich",
        "Greenwich",
    }
)


def is_utc(zone_name: str) -> bool:
    """Whether ``zone_name`` is UTC (by any of its names)."""
    return zone_name in UTC_NAMES


# A local time that falls back can map to an instant up to this far from the wall time read at
# a window's edge (the largest DST shift in tzdata since 1970 is 2 hours).
WALL_MARGIN = timedelta(hours=3)


def check_wall_clock(
    zone_name: str, skipped: str, repeated: str, reason: str
) -> tuple[SkippedTime, RepeatedTime, str]:
    """The checked zone, DST policies and reason of a timing evaluated as wall-clock time
    (``cron``, ``rrule``): ``InvalidTiming`` names the first bad one."""
    try:
        zone(zone_name)
    except ValueError as exc:
        raise InvalidTiming("timing.zone", str(exc)) from None
    for name, policy, value in (
        ("timing.skipped", SkippedTime, skipped),
        ("timing.repeated", RepeatedTime, repeated),
    ):
        if value not in set(policy):
            allowed = ", ".join(repr(m.value) for m in policy)
            raise InvalidTiming(name, f"must be one of {allowed}, got {value!r}")
    if not isinstance(reason, str) or len(reason) > MAX_REASON:
        raise InvalidTiming("timing.reason", f"must be text of at most {MAX_REASON} characters")
    return SkippedTime(skipped), RepeatedTime(repeated), reason.strip()


def chosen_choices(skipped: object, repeated: object) -> frozenset[str]:
    """Which DST choices a caller gave explicitly (``None`` is not a choice)."""
    return frozenset(
        name for name, value in (("skipped", skipped), ("repeated", repeated)) if value is not None
    )


# The record columns the console's form fills for every wall-clock timing, after its own.
WALL_CLOCK_FORM_FIELDS = ("time_zone", "zone_reason", "skipped_time", "repeated_time")


def wall_clock_arguments(data: Mapping[str, Any]) -> dict[str, Any]:
    """The zone, DST choices and reason of a wall-clock timing as the console's form gives
    them (``Timing.from_form``): a blank choice is not chosen (check ``django_jobs.E019``)."""
    return {
        "zone": data["time_zone"],
        "skipped": data["skipped_time"] or None,
        "repeated": data["repeated_time"] or None,
        "reason": data["zone_reason"],
    }
