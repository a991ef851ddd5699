"""The paths of the Tasks framework's ``Task`` objects enqueued through ``JobsBackend``
(``TaskPath``): what a worker may import to run a task it has not defined itself."""

from __future__ import annotations

from django.db import models

# A Task's module path (``<module>.<function>``): Python identifiers joined by dots.
TASK_PATH_MAX_CHARS = 500


class TaskPath(models.Model):
    """A ``Task``'s module path, as the ``Task`` object itself reported it when
    ``JobsBackend.enqueue`` (backend ``alias``) was given it: written by the store with the
    enqueued occurrence, never from an occurrence's arguments. The Tasks handler imports a
    task's module only if its path is recorded for its alias (``tasks.known_task``).

    Never purged: there is one row per task function enqueued per alias, bounded by the
    project's code, not by the work it enqueues. A row of a task since removed does no harm:
    the handler still checks that the imported object is a ``Task`` of that alias at that path.
    """

    alias = models.CharField(max_length=200)
    path = models.CharField(max_length=TASK_PATH_MAX_CHARS)
    recorded_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["alias", "path"], name="django_jobs_task_path_unique")
        ]

    def __str__(self) -> str:
        return f"{self.alias}: {self.path}"
