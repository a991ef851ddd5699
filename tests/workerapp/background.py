"""A task module the worker never imports on its own: not named ``tasks``, and imported by
nothing of the project but the code that enqueues its tasks (Django's Tasks framework allows
a task in any module). tests/test_trust_task_paths.py enqueues from here and reads
``sys.modules``."""

from __future__ import annotations

from .tasks import task


@task()
def double(x: int) -> int:
    return 2 * x
