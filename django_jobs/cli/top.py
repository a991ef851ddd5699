"""``jobs top``: the fleet in a terminal, redrawn every ``--interval`` seconds until Ctrl-C.

Each view is ``services.watch`` at ``services.now()``, for ``--actor`` as the admin's dashboard
scopes it: the due backlog and its age, the running occurrences with their replica and time
running, the failures and dead letters of the last ``--since`` seconds, the replicas with
their heartbeat's age. ``--once`` prints one view; ``--json`` prints one as JSON.

The screen is cleared between views only on a terminal; piped, the views follow each other
separated by a blank line. The actor is read again at every view, so a permission taken away
applies from the next one. A store that cannot be reached is said on a line of its own and
tried again at the next view; Ctrl-C ends the watch with exit status 0, once the view being
read is read (no query is cut off mid-flight).
"""

from __future__ import annotations

import contextlib
import json
import signal
import threading
from collections.abc import Callable, Iterator, Sequence
from datetime import timedelta
from typing import Any

from django.core.management.base import CommandError
from django.db import DatabaseError, connection

from .. import clock, services, words
from .invocation import Invocation

# ANSI: cursor home, then erase the screen.
CLEAR = "\x1b[H\x1b[2J"
# A shorter interval would have the view read the store several times a second.
MIN_INTERVAL = 0.5


def top(
    run: Invocation,
    *,
    frames: int | None = None,
    pause: Callable[[float], None] | None = None,
) -> None:
    """Print the view once (``--once``, ``--json``) or every ``--interval`` seconds until
    Ctrl-C. ``frames`` stops after that many views, and ``pause`` waits between two (tests
    give a fake clock's advance; by default the wait ends at Ctrl-C)."""
    options = run.options
    interval = float(options["interval"])
    if interval < MIN_INTERVAL:
        raise CommandError(f"--interval: at least {MIN_INTERVAL} seconds, got {interval:g}")
    try:
        actor = run.actor()
        if options["json"] or options["once"]:
            view = _view(run, actor)
            run.stdout.write(
                json.dumps(view.as_dict(), indent=2) if options["json"] else render(view)
            )
            return
    except DatabaseError as exc:  # unreachable at the start, or for one view: say so, exit 1
        raise CommandError(f"the store is unreachable: {_first_line(exc)}") from exc
    stop = threading.Event()
    # A second Ctrl-C raises: out at once, still not an error.
    with _ctrl_c_sets(stop), contextlib.suppress(KeyboardInterrupt):
        _watch(run, actor, interval=interval, frames=frames, pause=pause, stop=stop)
    if stop.is_set():  # after the ^C the terminal echoed
        run.stdout.write("")


@contextlib.contextmanager
def _ctrl_c_sets(stop: threading.Event) -> Iterator[None]:
    """Ctrl-C (SIGINT) sets ``stop`` instead of raising wherever the watch is: a query it
    interrupted would be cancelled mid-flight (psycopg sends a cancel request and waits for
    the server's answer, which a busy server can keep it waiting for). The view being read
    finishes and the watch ends; a second Ctrl-C raises as usual. Only on the main thread,
    where Python delivers signals."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupted(signum: int, frame: Any) -> None:
        if stop.is_set():
            raise KeyboardInterrupt
        stop.set()

    previous = signal.signal(signal.SIGINT, interrupted)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _watch(
    run: Invocation,
    actor: Any,
    *,
    interval: float,
    frames: int | None,
    pause: Callable[[float], None] | None,
    stop: threading.Event,
) -> None:
    terminal = run.stdout.isatty()
    shown = 0
    while not stop.is_set() and (frames is None or shown < frames):
        try:
            actor = type(actor).objects.get(pk=actor.pk)  # permissions as they are now
            text = render(_view(run, actor))
        except type(actor).DoesNotExist:
            raise CommandError(f"--actor {actor.username!r} is no longer a user") from None
        except DatabaseError as exc:
            connection.close()  # a broken connection is opened again at the next view
            text = (
                f"{words.instant(clock.current().now())}: the store is unreachable "
                f"({_first_line(exc)}); trying again in {words.duration(interval)}"
            )
        if terminal:
            run.stdout.write(CLEAR + text)
        else:
            run.stdout.write(("\n" if shown else "") + text)
        run.stdout.flush()
        shown += 1
        if frames is None or shown < frames:
            if pause is None:
                stop.wait(interval)  # Ctrl-C ends the wait at once
            else:
                pause(interval)


def _view(run: Invocation, actor: Any) -> services.Watch:
    options = run.options
    return services.watch(
        actor=actor,
        now=services.now(),
        since=timedelta(seconds=float(options["since"])),
        tenant=options["tenant"],
        queue=options["queue"],
    )


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0] if lines else ''}".rstrip(": ")


def render(view: services.Watch) -> str:
    """The view as text: a header naming the instant and the scope, then each part."""
    parts = [
        [f"jobs top at {words.instant(view.now)} as {view.actor}: {_scope(view)}"],
        [_backlog(view)],
        _running(view),
        _failures(view),
        _replicas(view),
    ]
    return "\n".join(line for part in parts for line in part)


def _scope(view: services.Watch) -> str:
    schedules = (
        "every schedule"
        if view.schedules is None
        else f"{_count(view.schedules)} schedule{'' if view.schedules == 1 else 's'}"
    )
    tenant = "" if view.tenant is None else f" of tenant {view.tenant!r}"
    queue = "every queue" if view.queue is None else f"queue {view.queue!r}"
    return f"{schedules}{tenant}, {queue}"


def _count(n: int, capped: bool = False) -> str:
    return f"{n:,}+" if capped else f"{n:,}"


def _backlog(view: services.Watch) -> str:
    if not view.due:
        return "Due backlog: none"
    return (
        f"Due backlog: {_count(view.due, view.due_capped)} not started, the oldest due "
        f"{words.duration(view.oldest_due_age)} ago"
    )


def _more(shown: int, total: int, capped: bool = False) -> list[str]:
    return [f"  and {_count(total - shown, capped)} more"] if total > shown else []


def _running(view: services.Watch) -> list[str]:
    capped = view.running_capped
    head = f"Running: {_count(view.running_total, capped)}"
    if not view.running:
        return [head]
    rows = [_running_row(line) for line in view.running]
    header = ("SCHEDULE", "OCCURRENCE", "REPLICA", "ATTEMPT", "RUNNING FOR", "QUEUE")
    return [head, *table(header, rows), *_more(len(rows), view.running_total, capped)]


def _running_row(line: services.RunningLine) -> tuple[str, ...]:
    elapsed = words.duration(line.elapsed) + (" (lease lapsed)" if line.lease_lapsed else "")
    return (
        line.schedule,
        str(line.occurrence_id),
        line.replica,
        str(line.attempt),
        elapsed,
        line.queue,
    )


def _failures(view: services.Watch) -> list[str]:
    window = words.duration(view.now - view.since)
    head = f"Failed or dead in the last {window}: {_count(view.failures_total)}"
    if view.failures_read_since is not None:
        head += (
            f" (of the attempts started since {words.instant(view.failures_read_since)}: "
            "the newest read)"
        )
    if not view.failures:
        return [head]
    rows = [_failure_row(line, view) for line in view.failures]
    header = ("FAILED", "SCHEDULE", "OCCURRENCE", "STATE", "ATTEMPTS", "ERROR")
    return [head, *table(header, rows), *_more(len(rows), view.failures_total)]


def _failure_row(line: services.FailureLine, view: services.Watch) -> tuple[str, ...]:
    error = f"{line.error_type}: {line.error}" if line.error else line.error_type
    return (
        f"{words.duration(view.now - line.failed_at)} ago",
        line.schedule,
        str(line.occurrence_id),
        line.state,
        str(line.attempts),
        error,
    )


def _replicas(view: services.Watch) -> list[str]:
    if view.replicas is None:
        return []  # the fleet is not the user's to see (django_jobs.view_replica)
    head = f"Replicas: {_count(view.replicas_total)}"
    rows = [
        (
            line.replica.id,
            line.replica.host,
            str(line.replica.pid),
            line.replica.state,
            f"{words.duration(line.heartbeat_age)} ago" + (" (stale)" if line.stale else ""),
            f"{line.replica.running}/{line.replica.concurrency}",
        )
        for line in view.replicas
    ]
    if not rows:
        return [head]
    header = ("REPLICA", "HOST", "PID", "STATE", "HEARTBEAT", "RUNNING")
    return [head, *table(header, rows), *_more(len(rows), view.replicas_total)]


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """``header`` and ``rows`` in columns as wide as their widest cell, indented by two."""
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]
    lines = []
    for row in (header, *rows):
        cells = (cell.ljust(width) for cell, width in zip(row, widths, strict=True))
        lines.append(("  " + "  ".join(cells)).rstrip())
    return lines
