"""Spans of the campaign's fault log that the checks need: when a replica life was frozen,
when its connections were severed, and when the store was down for every replica. Instants
are the injector's (the runner's host clock)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .faults import Fault

Span = tuple[datetime, datetime]
# Faults that take the store away from every replica for their whole length (a ``hang``
# fault does for part of it: its detail says when).
STORE_DOWN = ("pg_restart", "failover")


def frozen(faults: list[Fault]) -> dict[str, list[Span]]:
    """Per replica life, the spans it spent SIGSTOPped."""
    spans: dict[str, list[Span]] = {}
    for fault in faults:
        if fault.kind == "sigstop":
            spans.setdefault(fault.replica, []).append(fault_span(fault))
    return spans


def store_down(faults: list[Fault]) -> list[Span]:
    """When the store was out of every replica's reach (a ``hang`` fault's own outage, when
    it had one: its detail's ``outage_from`` and ``outage_to``)."""
    spans = [fault_span(f) for f in faults if f.kind in STORE_DOWN]
    outages = [_detail_span(f, "outage") for f in faults if f.kind == "hang"]
    return spans + [outage for outage in outages if outage is not None]


def cut(faults: list[Fault]) -> dict[str, list[Span]]:
    """Per replica life, when the injector severed its connections: a ``terminate_backends``
    (an instant), a ``hang`` fault's repeated cuts (its detail's ``cut_from`` to ``cut_to``)."""
    spans: dict[str, list[Span]] = {}
    for fault in faults:
        if fault.kind == "terminate_backends":
            spans.setdefault(fault.replica, []).append((fault.at, fault.at))
        elif (severed := _detail_span(fault, "cut")) is not None:
            spans.setdefault(fault.detail["replica"], []).append(severed)
    return spans


def fault_span(fault: Fault) -> Span:
    return fault.at, fault.at + timedelta(seconds=fault.seconds)


def _detail_span(fault: Fault, name: str) -> Span | None:
    """The span a fault's detail records as ``<name>_from`` and ``<name>_to``, if any."""
    if not fault.detail.get(f"{name}_from"):
        return None
    return (
        datetime.fromisoformat(fault.detail[f"{name}_from"]),
        datetime.fromisoformat(fault.detail[f"{name}_to"]),
    )


def overlaps(within: Span, spans: list[Span], *, slack: timedelta = timedelta(0)) -> bool:
    """Whether ``within`` meets any of ``spans``, each widened by ``slack`` after its end."""
    lo, hi = within
    return any(a <= hi and lo <= b + slack for a, b in spans)
