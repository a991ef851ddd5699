"""Settings of the campaign's ``runworker`` replicas (and of its ``migrate``).

The database comes from ``DATABASE_URL``, set by the runner. Leases are short so that faults
play out in seconds; logs are JSON lines, which the runner reads afterwards.
"""

from __future__ import annotations

import os

import environ
import structlog

SECRET_KEY = "chaos-campaign-only"
DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"
DATABASES = {"default": environ.Env().db("DATABASE_URL")}
DATABASES["default"].setdefault("OPTIONS", {})["application_name"] = "chaos-" + os.environ.get(
    "CHAOS_REPLICA", "runner"
)
INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "guardian",
    "django_jobs",
    "bench.chaos.app",
]
AUTHENTICATION_BACKENDS = [
    "django.contrib.auth.backends.ModelBackend",
    "guardian.backends.ObjectPermissionBackend",
]
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

DJANGO_JOBS = {
    "LEASE_SECONDS": float(os.environ.get("CHAOS_LEASE_SECONDS", "3")),
    "SHUTDOWN_GRACE_SECONDS": 5,
    "TIMEOUT_GRACE_SECONDS": float(os.environ.get("CHAOS_GRACE_SECONDS", "2")),
    "HEARTBEAT_SECONDS": 1,
    "POLL_SECONDS": 1,
    "PLAN_AHEAD_SECONDS": float(os.environ.get("CHAOS_PLAN_AHEAD_SECONDS", "30")),
    # Retention passes every 2 s, under the same faults (campaign schedules keep 7 days, so
    # nothing the invariants read is deleted): the lock, the thread and its connection.
    "RETENTION_SECONDS": 2,
    # The jobs the late-one-off, poison and hang faults declare one-offs of through the
    # service layer (``declare``), which offers only jobs named here or opted in.
    "RUNTIME_JOBS": ["chaos.effect", "chaos.deadly", "chaos.exit", "chaos.interrupt", "chaos.hang"],
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
        structlog.stdlib.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
    ],
    logger_factory=structlog.stdlib.LoggerFactory(),
)
