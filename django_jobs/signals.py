"""Alerts: Django signals sent when an occurrence ends or a replica's hold on work is lost.

==================  =============================================================  ============
signal              sent when (once per event, after the write that records it     event
                    committed)
==================  =============================================================  ============
occurrence_         an attempt's completion was recorded                           Occurrence
completed                                                                          Event
occurrence_failed   an attempt failed and a retry is planned (``retry_at``)        Occurrence
                                                                                   Event
occurrence_dead     retries are exhausted, or the failure is permanent: the        Occurrence
                    occurrence is a dead letter                                    Event
occurrence_skipped  an occurrence was recorded skipped (``reason``: its           Occurrence
                    ``SkipReason``)                                                Event
lease_lost          a lapsed lease was taken over by a claim (``reason``           Occurrence
                    ``taken_over``, ``replica``: the holder that lost it), or a    Event
                    replica's outcome write was fenced out (``fenced_out``)
replica_gone        a replica stopped heartbeating and was declared gone           Replica
                                                                                   Event
==================  =============================================================  ============

Each signal is sent with ``sender`` the model the event is about (``Occurrence``, ``Replica``)
and one keyword argument, ``event``: a frozen dataclass, so receivers get a stable shape.
Errors in events are the stored, redacted text (``safe_error``), never the raw exception.

Guarantees (``tests/test_alerts.py``):

- sent only once the transaction that recorded the event committed, never for a write that
  rolled back (``transaction.on_commit``; a write in autocommit sends at once);
- sent by the one replica whose write recorded the event, so once per event, however many
  replicas notice it;
- a receiver that raises is logged (``signal.receiver_failed``) and the worker goes on
  (``send_robust``);
- with no receiver connected nothing is built or sent (``has_listeners``).

``DJANGO_JOBS["ON_DEAD"]`` names a callable ``(event) -> None`` connected to
``occurrence_dead`` at start (``connect_on_dead``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

import structlog
from django.db import transaction
from django.dispatch import Signal
from django.utils.module_loading import import_string

log = structlog.get_logger("django_jobs.signals")

occurrence_completed = Signal()
occurrence_failed = Signal()
occurrence_dead = Signal()
occurrence_skipped = Signal()
lease_lost = Signal()
replica_gone = Signal()


@dataclass(frozen=True)
class OccurrenceEvent:
    """What happened to one occurrence.

    ``attempt`` is the attempt the event ended (0 for an occurrence skipped before it ran);
    ``error_type`` and ``error`` are the stored, redacted error (empty without one);
    ``reason`` says why where the signal has several causes (a skip's reason; ``taken_over``
    or ``fenced_out``; a dead letter's cause is its ``error_type``);
    ``retry_at`` is when a failed occurrence is due again; ``replica`` is the replica whose
    work it was (for ``lease_lost`` by takeover: the one that lost it).
    """

    occurrence_id: UUID
    schedule_id: int
    tenant: str
    key: str
    job: str
    scheduled_at: datetime
    attempt: int
    error_type: str = ""
    error: str = ""
    reason: str = ""
    replica: str = ""
    retry_at: datetime | None = None

    @property
    def schedule(self) -> str:
        """The schedule's name: ``<tenant>/<key>``, or the key alone in the default tenant."""
        return f"{self.tenant}/{self.key}" if self.tenant else self.key


@dataclass(frozen=True)
class ReplicaEvent:
    """A replica declared gone: its last heartbeat, and the replica that declared it."""

    replica_id: str
    host: str
    pid: int
    heartbeat_at: datetime
    declared_at: datetime
    declared_by: str


def _sender(signal: Signal) -> type:
    from .models import Occurrence, Replica

    return Replica if signal is replica_gone else Occurrence


def listening(signal: Signal) -> bool:
    """Whether any receiver is connected: when not, callers build no events."""
    return signal.has_listeners(_sender(signal))


def send_after_commit(signal: Signal, events: Iterable[Any]) -> None:
    """Send ``signal`` once per event when the caller's transaction commits (at once in
    autocommit; never if it rolls back). Build ``events`` lazily: this checks ``listening``
    first."""
    if not listening(signal):
        return
    batch = list(events)
    if batch:
        transaction.on_commit(lambda: _send(signal, batch))


def _send(signal: Signal, events: list[Any]) -> None:
    sender = _sender(signal)
    for event in events:
        for receiver, result in signal.send_robust(sender, event=event):
            if isinstance(result, Exception):
                log.error(
                    "signal.receiver_failed",
                    signal=_NAMES.get(id(signal), "?"),
                    receiver=getattr(receiver, "__qualname__", repr(receiver)),
                    error_type=type(result).__name__,
                )


_NAMES = {
    id(s): name
    for name, s in {
        "occurrence_completed": occurrence_completed,
        "occurrence_failed": occurrence_failed,
        "occurrence_dead": occurrence_dead,
        "occurrence_skipped": occurrence_skipped,
        "lease_lost": lease_lost,
        "replica_gone": replica_gone,
    }.items()
}

ON_DEAD_UID = "django_jobs.ON_DEAD"


def on_dead_hook() -> Callable[[OccurrenceEvent], None] | None:
    """The callable ``DJANGO_JOBS["ON_DEAD"]`` names (``None`` without one). Raises
    ``ConfigurationError`` naming the setting if the path does not import or is not
    callable."""
    from .conf import get_settings
    from .exceptions import ConfigurationError

    path = get_settings().ON_DEAD
    if path is None:
        return None
    try:
        hook = import_string(path)
    except ImportError as exc:
        raise ConfigurationError(
            f"DJANGO_JOBS['ON_DEAD']: {path!r} cannot be imported ({exc}); name a callable "
            "taking the dead occurrence's event, such as 'myapp.alerts.on_dead'"
        ) from None
    if not callable(hook):
        raise ConfigurationError(
            f"DJANGO_JOBS['ON_DEAD']: {path!r} is not callable; name a function taking the "
            "dead occurrence's event"
        )
    return hook  # type: ignore[no-any-return]


def _call_on_dead(sender: type, *, event: OccurrenceEvent, **kwargs: Any) -> None:
    hook = on_dead_hook()  # read at each call: override_settings holds
    if hook is not None:
        hook(event)


def connect_on_dead() -> bool:
    """Connect ``DJANGO_JOBS["ON_DEAD"]`` to ``occurrence_dead`` (``AppConfig.ready``); a bad
    path raises ``ConfigurationError`` naming the setting (check E004 reports it too).
    Returns whether a hook is connected."""
    from .models import Occurrence

    if on_dead_hook() is None:
        occurrence_dead.disconnect(sender=Occurrence, dispatch_uid=ON_DEAD_UID)
        return False
    occurrence_dead.connect(_call_on_dead, sender=Occurrence, dispatch_uid=ON_DEAD_UID)
    return True


__all__ = [
    "OccurrenceEvent",
    "ReplicaEvent",
    "connect_on_dead",
    "lease_lost",
    "listening",
    "occurrence_completed",
    "occurrence_dead",
    "occurrence_failed",
    "occurrence_skipped",
    "on_dead_hook",
    "replica_gone",
    "send_after_commit",
]
