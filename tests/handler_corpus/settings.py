"""The test settings with the ``wrapped`` app installed: ``manage.py check`` under them
reports its wrapped handlers (tests/test_handler_wrappers.py)."""

from __future__ import annotations

from tests.settings import *  # noqa: F403
from tests.settings import INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "tests.handler_corpus.wrapped"]
