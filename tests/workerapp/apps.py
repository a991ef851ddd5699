from django.apps import AppConfig


class WorkerAppConfig(AppConfig):
    """Handlers and an effects table for the tests that run real ``runworker`` processes."""

    name = "tests.workerapp"
    label = "workerapp"
    default_auto_field = "django.db.models.BigAutoField"
