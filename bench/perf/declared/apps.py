from django.apps import AppConfig


class DeclaredConfig(AppConfig):
    """The user's-path scenario's declared schedules (``schedules.py``, from the environment)."""

    name = "bench.perf.declared"
    label = "perf_declared"
