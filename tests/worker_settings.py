"""Settings of the ``runworker`` processes that the process tests start.

The database comes from DATABASE_URL (the test database); lease and grace periods are short so
that faults play out in seconds. Logs are JSON lines on stderr, for the tests to read.
"""

from __future__ import annotations

import json
import os

import structlog

from django_jobs.logging import keep_run_keys

from .settings import *  # noqa: F403
from .settings import INSTALLED_APPS

INSTALLED_APPS = [app for app in INSTALLED_APPS if app != "example_project.billing"]

DJANGO_JOBS = {
    "COMMANDS": ["tests.workerapp.effects", "tests.workerapp.probes"],
    "LEASE_SECONDS": float(os.environ.get("JOBS_LEASE_SECONDS", "2")),
    "SHUTDOWN_GRACE_SECONDS": float(os.environ.get("JOBS_SHUTDOWN_GRACE_SECONDS", "5")),
    "TIMEOUT_GRACE_SECONDS": float(os.environ.get("JOBS_TIMEOUT_GRACE_SECONDS", "1")),
    "HEARTBEAT_SECONDS": 1,
    "POLL_SECONDS": float(os.environ.get("JOBS_POLL_SECONDS", "1")),
    "RETENTION_SECONDS": float(os.environ.get("JOBS_RETENTION_SECONDS", "60")),
    "QUEUES": json.loads(os.environ.get("JOBS_QUEUES", "{}")),  # fleet-wide queue limits
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "json": {
            "()": structlog.stdlib.ProcessorFormatter,
            "processor": structlog.processors.JSONRenderer(),
        }
    },
    "handlers": {"stderr": {"class": "logging.StreamHandler", "formatter": "json"}},
    "loggers": {"django_jobs": {"handlers": ["stderr"], "level": "INFO"}},
}
structlog.configure(
    processors=[
        structlog.contextvars.merge_contextvars,
        keep_run_keys,  # a handler's own lines keep its run's tenant, occurrence, token ...
        structlog.stdlib.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
    ],
    logger_factory=structlog.stdlib.LoggerFactory(),
)
