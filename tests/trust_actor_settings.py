"""Settings of the ``manage.py jobs`` processes ``tests/test_trust_actor.py`` starts: the test
settings with ``CLI_ACTOR_RULES = ["os_user"]``."""

from __future__ import annotations

from .settings import *  # noqa: F403
from .settings import DJANGO_JOBS

DJANGO_JOBS = {**DJANGO_JOBS, "CLI_ACTOR_RULES": ["os_user"]}
