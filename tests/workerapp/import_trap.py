"""A module nothing in the project imports: the Tasks handler must never import it because an
occurrence's arguments name it (tests/test_trust_tasks_handler.py reads ``sys.modules``)."""

from __future__ import annotations


def boom() -> None:  # what an attacker's path would name
    raise AssertionError("imported and called by a path read from arguments")
