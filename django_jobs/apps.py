from __future__ import annotations

import contextlib

from django.apps import AppConfig


class DjangoJobsConfig(AppConfig):
    name = "django_jobs"
    label = "django_jobs"
    verbose_name = "Scheduled jobs"
    # Pinned so that a project's DEFAULT_AUTO_FIELD never produces a migration in this app.
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.utils.module_loading import autodiscover_modules

        from . import checks  # noqa: F401  (registers the system checks)
        from .discovery import discover_schedules

        # Each installed app's jobs.py registers its handlers with @job; its schedules.py
        # declares the schedules that trigger them, apart from the behaviour.
        # A jobs.py that fails to import fails the process, as Django's own discovery does;
        # a schedules.py that fails is kept and reported by check E033 (``discovery``), so
        # the website starts while runworker, jobs and every sync refuse the partial set.
        autodiscover_modules("jobs")
        discover_schedules()

        from .conf import tasks_backends
        from .exceptions import ConfigurationError
        from .signals import connect_on_dead

        # DJANGO_JOBS["ON_DEAD"], called for each dead occurrence. A bad path is check E004,
        # which names the setting (runworker's checks refuse to start with it).
        with contextlib.suppress(ConfigurationError):
            connect_on_dead()

        if tasks_backends():  # TASKS names JobsBackend: a job runs each alias's tasks
            from .tasks import register_task_jobs

            register_task_jobs()
