"""Settings of the example project, read from the environment with django-environ.

Without ``DATABASE_URL`` the project starts an embedded PostgreSQL whose data lives in
``.embedded-pg/example`` (git-ignored), so schedules survive restarts. Stop it with
``python -m django_jobs.contrib.embedded stop .embedded-pg/example``.
"""

from __future__ import annotations

from pathlib import Path

import django
import environ
import structlog

from django_jobs.logging import keep_run_keys

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env(
    DEBUG=(bool, True),
    SECRET_KEY=(str, "django-insecure-example-project-only"),
    ALLOWED_HOSTS=(list, ["localhost", "127.0.0.1"]),
    EMBEDDED_PG_DIR=(str, str(BASE_DIR / ".embedded-pg" / "example")),
    LOG_LEVEL=(str, "INFO"),
)

DEBUG = env("DEBUG")
SECRET_KEY = env("SECRET_KEY")
ALLOWED_HOSTS = env("ALLOWED_HOSTS")

if env.str("DATABASE_URL", default=""):
    DATABASES = {"default": env.db("DATABASE_URL")}
else:
    from django_jobs.contrib import embedded

    DATABASES = {"default": env.db_url_config(embedded.start(Path(env("EMBEDDED_PG_DIR"))))}

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "guardian",
    "django_jobs",
    "example_project.billing",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_structlog.middlewares.RequestMiddleware",
]

AUTHENTICATION_BACKENDS = [
    "django.contrib.auth.backends.ModelBackend",
    "guardian.backends.ObjectPermissionBackend",
]

ROOT_URLCONF = "example_project.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]
WSGI_APPLICATION = "example_project.wsgi.application"

USE_TZ = True
TIME_ZONE = "UTC"
STATIC_URL = "static/"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

DJANGO_JOBS = {
    # The billing app's application commands: what its job handlers dispatch.
    "COMMANDS": ["example_project.billing.statements"],
    "LEASE_SECONDS": env.float("JOBS_LEASE_SECONDS", default=30),
    "SHUTDOWN_GRACE_SECONDS": env.float("JOBS_SHUTDOWN_GRACE_SECONDS", default=30),
    # Alerts: e-mail a dead occurrence's schedule's record owner (billing/alerts.py).
    "ON_DEAD": "example_project.billing.alerts.email_record_owner",
}
# The example's e-mail goes to the terminal. Record owners that are team names, not
# addresses, are mapped here (others get <owner>@example.com): billing/alerts.py.
if django.VERSION >= (6, 1):  # Django 6.1's MAILERS replace EMAIL_BACKEND (gone in 7.0)
    MAILERS = {"default": {"BACKEND": "django.core.mail.backends.console.EmailBackend"}}
else:
    EMAIL_BACKEND = "django.core.mail.backends.console.EmailBackend"
DEFAULT_FROM_EMAIL = "jobs@example.com"
TEAM_EMAILS = {"team-billing": "billing-team@example.com"}

# One log format for the web process and the worker: structlog, rendered for a terminal.
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "console": {
            "()": structlog.stdlib.ProcessorFormatter,
            "processor": structlog.dev.ConsoleRenderer(colors=False),
        },
    },
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "console"}},
    "loggers": {
        "django_structlog": {"handlers": ["console"], "level": env("LOG_LEVEL")},
        "django_jobs": {"handlers": ["console"], "level": env("LOG_LEVEL")},
        "billing": {"handlers": ["console"], "level": env("LOG_LEVEL")},
    },
}
structlog.configure(
    processors=[
        structlog.contextvars.merge_contextvars,
        keep_run_keys,  # a handler's own lines keep its run's tenant, occurrence, token ...
        structlog.stdlib.filter_by_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.stdlib.add_logger_name,
        structlog.stdlib.add_log_level,
        structlog.processors.StackInfoRenderer(),
        structlog.processors.format_exc_info,
        structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
    ],
    logger_factory=structlog.stdlib.LoggerFactory(),
    cache_logger_on_first_use=True,
)
