"""A corpus of handlers, good and bad, read by ``handler_findings``.

Every bad handler (tests/handler_corpus/bad.py) yields at least one finding of the kind its
name announces; every good one (tests/handler_corpus/good.py) yields none.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest

from django_jobs.source_rules import HTTP, LOCAL_TIME, SQL, STORAGE, handler_findings

from .handler_corpus import bad, good

# What each bad handler's name announces it does.
KIND_OF_PREFIX = {"writes_": STORAGE, "sql_": SQL, "http_": HTTP, "local_time_": LOCAL_TIME}


def handlers(module: ModuleType) -> list[Callable[..., Any]]:
    """The module's own public functions (its ``_helpers`` are reached through handlers)."""
    return [
        func
        for name, func in inspect.getmembers(module, inspect.isfunction)
        if func.__module__ == module.__name__ and not name.startswith("_")
    ]


def kind_announced(func: Callable[..., Any]) -> str:
    (kind,) = [k for prefix, k in KIND_OF_PREFIX.items() if func.__name__.startswith(prefix)]
    return kind


GOOD, BAD = handlers(good), handlers(bad)


def test_the_corpus_is_large_and_covers_every_kind() -> None:
    assert len(GOOD) >= 15
    assert len(BAD) >= 15
    assert len(GOOD) + len(BAD) >= 30
    assert {kind_announced(func) for func in BAD} == {STORAGE, SQL, HTTP, LOCAL_TIME}


@pytest.mark.parametrize("handler", BAD, ids=lambda f: f.__name__)
def test_a_bad_handler_is_found_out(handler: Callable[..., Any]) -> None:
    findings = handler_findings(handler)
    assert findings, f"{handler.__name__}: no finding"
    assert kind_announced(handler) in {f.kind for f in findings}, [str(f) for f in findings]
    # Each finding's line is in the corpus file, inside the function it names.
    for finding in findings:
        where = getattr(bad, finding.helper) if finding.helper else handler
        lines, first = inspect.getsourcelines(where)
        assert first <= finding.line < first + len(lines), str(finding)


@pytest.mark.parametrize("handler", GOOD, ids=lambda f: f.__name__)
def test_a_good_handler_yields_no_finding(handler: Callable[..., Any]) -> None:
    assert handler_findings(handler) == []
