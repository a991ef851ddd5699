"""``manage.py runworker``: the execution host for scheduled jobs."""

from __future__ import annotations

import signal
from types import FrameType
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from ...declarations import declared
from ...services import sync_schedules
from ...worker.loop import Worker


class Command(BaseCommand):
    help = "Run due scheduled-job occurrences. Start as many replicas as you like."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--once", action="store_true", help="Run what is due now, then exit.")
        parser.add_argument(
            "--replica-id", default=None, help="This replica's name (default: host:pid:random)."
        )
        parser.add_argument("--tenant", default=None, help="Only run occurrences of this tenant.")

    def handle(self, *args: Any, **options: Any) -> None:
        worker = Worker(replica_id=options["replica_id"], tenant=options["tenant"])
        worker.sync_clock()
        report = sync_schedules(declared.all(), now=worker.clock.now())
        self.stdout.write(f"django_jobs worker {worker.replica_id} started")
        self.stdout.write(f"schedules synced: {report}")
        if options["once"]:
            total = 0
            while (summary := worker.run_pass()).claimed:
                self.stdout.write(f"pass: {summary}")
                total += summary.claimed
            self.stdout.write(f"nothing more is due; ran {total} occurrence(s); exiting")
            return

        def stop(signum: int, frame: FrameType | None) -> None:
            self.stdout.write(f"received {signal.Signals(signum).name}: stopping")
            worker.stopping.set()

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        worker.serve()
        self.stdout.write(f"django_jobs worker {worker.replica_id} stopped")
