from django.apps import AppConfig


class PerfConfig(AppConfig):
    """The benchmark's handlers and the table its atomic handler writes."""

    name = "bench.perf.app"
    label = "perf"
    default_auto_field = "django.db.models.BigAutoField"
