"""Settings for the test suite.

The database comes from ``DATABASE_URL`` when it is set; otherwise ``tests/conftest.py``
starts a throwaway embedded PostgreSQL and points the tests at it.
"""

from __future__ import annotations

import django
import environ

env = environ.Env()

SECRET_KEY = "tests-only"
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost", "testserver"]
USE_TZ = True
# Deliberately not UTC: nothing in django_jobs may depend on TIME_ZONE, and tests would not
# notice if it did while TIME_ZONE were UTC.
TIME_ZONE = "Pacific/Chatham"

DATABASES = {
    "default": env.db(
        "DATABASE_URL", default="postgresql://postgres@localhost/embedded-started-by-conftest"
    )
}

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "guardian",
    "django_jobs",
    # The example project's app: its jobs.py and schedules.py are discovered in tests too.
    "example_project.billing",
    # Handlers and an effects table for the tests that start real runworker processes.
    "tests.workerapp",
]
AUTHENTICATION_BACKENDS = [
    "django.contrib.auth.backends.ModelBackend",
    "guardian.backends.ObjectPermissionBackend",
]
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
ROOT_URLCONF = "tests.urls"
STATIC_URL = "static/"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
# The application commands the test handlers dispatch (checks W024/W026), as
# worker_settings.py names them: the checks read no further than a command (W020).
DJANGO_JOBS: dict[str, object] = {
    "COMMANDS": [
        "example_project.billing.statements",
        "tests.workerapp.effects",
        "tests.workerapp.probes",
    ],
}
# Django's Tasks framework (Django 6, or the django-tasks backport on 5.2) on django_jobs:
# tests/test_tasks_backend.py. Retries without backoff, so that they play out at once.
TASKS = {
    "default": {
        "BACKEND": "django_jobs.tasks.JobsBackend",
        "OPTIONS": {"MAX_ATTEMPTS": 3, "BACKOFF_SECONDS": 0, "OWNER": "team-tests"},
    }
}

# Django 6.1 replaces EMAIL_BACKEND with MAILERS and warns when mail is sent without them (the
# example's dead-letter e-mail, tests/test_alerts.py); the test runner makes each one locmem.
if django.VERSION >= (6, 1):
    MAILERS = {"default": {"BACKEND": "django.core.mail.backends.locmem.EmailBackend"}}
