"""``manage.py runworker``: the execution host for scheduled jobs."""

from __future__ import annotations

import logging
import os
import signal
import sys
from types import FrameType
from typing import TYPE_CHECKING, Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ... import clock
from ...cli.startup import StartupSync
from ...declarations import declared
from ...discovery import refuse_partial_set
from ...exceptions import ConfigurationError
from ...logging import log_to_stderr_unless_configured
from ...metrics import serve_worker_metrics
from ...services import SyncReport, sync_schedules
from ...spec import queue_problem
from ...worker.loop import Worker

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer


# The most run threads one queue (``--queue NAME:N``) or a replica may have.
MAX_THREADS = 1000


def parse_queues(given: list[str], *, default: int) -> list[tuple[str, int]]:
    """``--queue`` values (``NAME`` or ``NAME:N``) as (name, run threads); refuses a bad
    name, a bad N and a queue named twice, naming the option and the value."""
    queues: dict[str, int] = {}
    for value in given:
        name, colon, count = value.partition(":")
        if (problem := queue_problem(name)) is not None:
            raise CommandError(f"--queue {value!r}: the queue's name {problem}")
        threads = default
        if colon:
            if not count.isdigit() or not 1 <= int(count) <= MAX_THREADS:
                raise CommandError(
                    f"--queue {value!r}: the run threads after ':' must be a whole number "
                    f"from 1 to {MAX_THREADS}, got {count!r}"
                )
            threads = int(count)
        if name in queues:
            raise CommandError(f"--queue {value!r}: queue {name!r} is named twice")
        queues[name] = threads
    if sum(queues.values()) > MAX_THREADS:
        raise CommandError(
            f"--queue: the queues' run threads add up to {sum(queues.values())}, more than "
            f"{MAX_THREADS}"
        )
    return list(queues.items())


class Command(BaseCommand):
    help = (
        "Run due scheduled-job occurrences. Start as many replicas as you like. SIGTERM or "
        "SIGINT drains (stop claiming, wait SHUTDOWN_GRACE_SECONDS, release the rest) and "
        "exits 0; a second signal exits at once. Exit code 3 asks the supervisor for a "
        "restart (a run ignored its timeout and had to be cut off); so does exit code 4 (a "
        "thread of the replica kept crashing)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--once", action="store_true", help="Run what is due now, then exit.")
        parser.add_argument(
            "--concurrency",
            type=int,
            default=None,
            help="How many occurrences run at once (default 1); with --queue, the run "
            "threads of each queue named without its own :N.",
        )
        parser.add_argument(
            "--queue",
            action="append",
            default=[],
            metavar="NAME[:N]",
            help="Serve only this queue (repeatable; default: every queue), with N run "
            "threads of its own (default: --concurrency, else 1). The replica's concurrency "
            "is the sum.",
        )
        parser.add_argument(
            "--replica-id", default=None, help="This replica's name (default: host:pid:random)."
        )
        parser.add_argument("--tenant", default=None, help="Only run occurrences of this tenant.")
        parser.add_argument(
            "--metrics-port",
            type=int,
            default=None,
            help="Serve Prometheus metrics (the fleet's, read from the database at each "
            "scrape, and this replica's own) on this port (0: any free port, logged).",
        )
        parser.add_argument(
            "--metrics-addr",
            default="127.0.0.1",
            help="The address the metrics port listens on (default 127.0.0.1: this host only). "
            "The port has no authentication: bind another address only where just Prometheus "
            "reaches it (0.0.0.0: every interface; logged as metrics.unauthenticated).",
        )

    def make_clock(self) -> clock.Clock:
        """The worker's clock: ``clock.current()``, the process's UTC clock, which the worker
        aligns with the database's at start-up (docs/architecture.md, "Clocks and skew"), or
        the clock a test injected with ``use_clock``. Subclasses override it to drive a real
        worker's time from outside the process."""
        return clock.current()

    def synced(self, report: SyncReport) -> None:
        self.stdout.write(f"schedules synced: {report}")
        self.stdout.flush()

    def run_from_argv(self, argv: list[str]) -> None:
        # Started from the command line (not call_command): in a project that configures no
        # logging, its lines go to stderr at info (django_jobs.logging).
        log_to_stderr_unless_configured()
        super().run_from_argv(argv)

    def handle(self, *args: Any, **options: Any) -> None:
        try:  # check E033 refuses it first, unless the checks were skipped
            refuse_partial_set()
        except ConfigurationError as exc:
            raise CommandError(str(exc)) from None
        concurrency = options["concurrency"]
        if concurrency is not None and concurrency < 1:
            raise CommandError(f"--concurrency must be 1 or more, got {concurrency}")
        worker = Worker(
            replica_id=options["replica_id"],
            clock=self.make_clock(),
            tenant=options["tenant"],
            concurrency=concurrency or 1,
            queues=parse_queues(options["queue"], default=concurrency or 1),
        )

        def stop(signum: int, frame: FrameType | None) -> None:
            worker.request_stop()

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        metrics = self.serve_metrics(worker, options["metrics_port"], options["metrics_addr"])
        try:
            self.run(worker, options)
        finally:
            if metrics is not None:
                metrics.shutdown()
                metrics.server_close()

    def serve_metrics(self, worker: Worker, port: int | None, addr: str) -> WSGIServer | None:
        """Start the metrics server (``--metrics-port``), or refuse a port it cannot bind."""
        if port is None:
            return None
        if not 0 <= port <= 65535:
            raise CommandError(f"--metrics-port must be a port number (0-65535), got {port}")
        try:
            return serve_worker_metrics(worker, port=port, addr=addr)
        except OSError as exc:
            raise CommandError(
                f"--metrics-port {port} on {addr}: cannot listen there ({exc.strerror})"
            ) from None

    def run(self, worker: Worker, options: dict[str, Any]) -> None:
        if options["once"]:
            # One pass, for cron-style use: a store outage fails the command at once, and the
            # pass runs on the synced records.
            worker.sync_clock()
            self.synced(
                sync_schedules(declared.all(), now=worker.clock.now(), by=worker.replica_id)
            )
        elif not worker.start_up():
            # Started into an outage, the worker waits for the store instead of exiting.
            self.stdout.write(f"django_jobs worker {worker.replica_id} stopped before starting")
            return
        else:
            # Serving starts now, on the records already stored; the sync runs beside it.
            StartupSync(
                declared.all(),
                replica=worker.replica_id,
                clock=worker.clock,
                stopping=worker.stopping,
                done=self.synced,
                supervisor=worker.supervisor,
            ).start()
        self.stdout.write(f"django_jobs worker {worker.replica_id} started")
        self.stdout.flush()
        if options["once"]:
            total = 0
            try:
                while (summary := worker.run_pass()).claimed:
                    self.stdout.write(f"pass: {summary}")
                    total += summary.claimed
                    if worker.stopping.is_set():
                        break
            finally:
                worker.close()
            self.stdout.write(f"nothing more is due; ran {total} occurrence(s); exiting")
            code = worker.exit_code
        else:
            code = worker.serve()
            self.stdout.write(f"django_jobs worker {worker.replica_id} stopped (exit {code})")
        self.stdout.flush()
        if worker.stuck_threads:
            # A run thread that ignores cancellation would keep the interpreter alive at exit:
            # its lease is released or its attempt recorded, so end the process now.
            logging.shutdown()
            sys.stderr.flush()
            os._exit(code)
        if code:
            sys.exit(code)
