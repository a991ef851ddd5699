"""The subcommands of ``manage.py jobs``, one function each (``management/commands/jobs.py``
is the Django entry point: it parses and dispatches here).

Thin: parse, call a service, print. Operator subcommands act as ``--actor`` (see
``invocation``); every lookup goes through a service that applies that user's permissions.

- ``arguments``: the subcommands, their options, and the text checks every argument passes;
- ``invocation``: one run: options, output, the ``--actor`` user and the schedule named;
- ``schedules``: ``list``, ``inspect``, ``runbooks`` (``next_steps``: what ``inspect`` ends with);
- ``actions``: ``replay``, ``cancel``, ``disable``, ``enable``, ``run-now``, ``purge``;
- ``reports``: ``handlers``, ``departures``, ``sync``, ``health``;
- ``top``: ``top`` (the fleet in a terminal, redrawn until Ctrl-C).
"""

from __future__ import annotations

from collections.abc import Callable

from . import actions, reports, schedules, top
from .invocation import Invocation

SUBCOMMANDS: dict[str, Callable[[Invocation], None]] = {
    "list": schedules.list_schedules,
    "inspect": schedules.inspect,
    "runbooks": schedules.export_runbooks,
    "replay": actions.replay,
    "cancel": actions.cancel,
    "disable": actions.disable,
    "enable": actions.enable,
    "run-now": actions.run_now,
    "purge": actions.purge,
    "handlers": reports.handlers,
    "departures": reports.departures,
    "sync": reports.sync,
    "health": reports.health,
    "top": top.top,
}

__all__ = ["SUBCOMMANDS", "Invocation"]
