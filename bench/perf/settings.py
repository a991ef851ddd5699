"""Settings of the benchmark's replicas and of its runner (database from ``DATABASE_URL``)."""

from __future__ import annotations

import os

import environ
import structlog

SECRET_KEY = "benchmarks-only"
DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"
DATABASES = {"default": environ.Env().db("DATABASE_URL")}
DATABASES["default"].setdefault("OPTIONS", {})["application_name"] = "perf-" + os.environ.get(
    "PERF_ROLE", "runner"
)
if os.environ.get("PERF_PREPARED") == "1":  # --prepared: the setting docs/worker.md documents
    DATABASES["default"]["OPTIONS"].update({"server_side_binding": True, "prepare_threshold": 5})
INSTALLED_APPS = [
    # The admin pages scenario (bench/perf/adminpages.py) renders the admin in-process.
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "guardian",
    "django_jobs",
    "bench.perf.app",
    # Declares nothing unless PERF_DECLARED is set (the user's-path scenario).
    "bench.perf.declared",
]
AUTHENTICATION_BACKENDS = [
    "django.contrib.auth.backends.ModelBackend",
    "guardian.backends.ObjectPermissionBackend",
]
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
ROOT_URLCONF = "bench.perf.urls"
ALLOWED_HOSTS = ["testserver"]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]
STATIC_URL = "static/"
DJANGO_JOBS = {
    "LEASE_SECONDS": 30,
    "HEARTBEAT_SECONDS": 5,
    "POLL_SECONDS": 1,
    "CLAIM_BATCH_SIZE": int(os.environ.get("PERF_CLAIM_BATCH", "50")),
}
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"stderr": {"class": "logging.StreamHandler"}},
    "loggers": {"django_jobs": {"handlers": ["stderr"], "level": "WARNING"}},
}

# structlog through the standard library, so the WARNING level above applies to it too: the
# benchmark's own output stays readable.
structlog.configure(
    processors=[
        # As example_project's settings: an event below the handler's level costs nothing more.
        structlog.stdlib.filter_by_level,
        structlog.stdlib.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
    ],
    logger_factory=structlog.stdlib.LoggerFactory(),
    wrapper_class=structlog.stdlib.BoundLogger,
)
LOGGING["formatters"] = {
    "plain": {
        "()": structlog.stdlib.ProcessorFormatter,
        "processor": structlog.processors.JSONRenderer(),
    }
}
LOGGING["handlers"]["stderr"]["formatter"] = "plain"  # type: ignore[index]
