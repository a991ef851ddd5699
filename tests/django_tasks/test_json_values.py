# Adapted from Django 6.1.3, tests/utils_tests/test_json.py (normalize_json, which the Tasks
# framework applies to a task's arguments and return value).
# Copyright (c) Django Software Foundation and individual contributors (BSD-3-Clause: see
# LICENSE.django in this folder). Changes: each value goes through JobsBackend and our worker
# (as an argument of ``echo``, returned by it) and is read back with get_result, where Django's
# test calls normalize_json; the JSON text Django expects is what the result must equal once
# read back. The size tests are ours.
"""What JSON a task's arguments and return value may be, through enqueue, the worker and
get_result."""

from __future__ import annotations

import json
from collections import UserList, defaultdict
from decimal import Decimal
from typing import Any

import pytest

from django_jobs.models import Occurrence

from . import tasks as test_tasks
from .framework import TaskResultStatus

pytestmark = pytest.mark.django_db


def case(value: Any, text: str, *marks: Any) -> Any:
    return pytest.param(value, text, marks=marks, id=text)


CASES = [
    case(None, "null"),
    case(True, "true"),
    case(False, "false"),
    case(2, "2"),
    case(3.0, "3.0"),
    case(
        1e23 + 1,
        "1e+23",
        pytest.mark.xfail(
            strict=True,
            raises=AssertionError,
            reason="declared unsupported (docs/enqueue.md, JSON values): PostgreSQL's jsonb "
            "keeps a number as a decimal numeric, so the float 1e23 is read back as the int "
            "10**23, which is not the float; floats of 1e16 or more come back as ints",
        ),
    ),
    case("1", '"1"'),
    case(b"hello", '"hello"'),
    case([], "[]"),
    case(UserList([1, 2]), "[1, 2]"),
    case({}, "{}"),
    case({1: "a"}, '{"1": "a"}'),
    case({"foo": (1, 2, 3)}, '{"foo": [1, 2, 3]}'),
    case(defaultdict(list), "{}"),
]
# Django's normalize_json keeps NaN and the infinities (json.dumps writes NaN, Infinity);
# JSON and PostgreSQL's jsonb have no such numbers.
NON_FINITE = [float("nan"), float("inf"), float("-inf")]


def run(drain: Any, *args: Any) -> Any:
    result = test_tasks.echo.enqueue(*args)
    drain()
    return test_tasks.echo.get_result(result.id)


@pytest.mark.parametrize(("value", "expected"), CASES)
def test_converts_json_types(value: Any, expected: str, drain) -> None:
    result = run(drain, value)
    assert result.status == TaskResultStatus.SUCCESSFUL, result.errors
    assert result.return_value == json.loads(expected)
    assert result.args == [json.loads(expected)]


@pytest.mark.parametrize("value", NON_FINITE, ids=["NaN", "Infinity", "-Infinity"])
def test_non_finite_numbers_are_refused_at_enqueue(value: float) -> None:
    """Ours: where Django's normalize_json keeps them, a database backend cannot; enqueue
    refuses them as the framework refuses what it cannot take (ValueError), nothing written."""
    with pytest.raises(ValueError, match=r"(?i)nan|inf|finite"):
        test_tasks.echo.enqueue(value)
    assert not Occurrence.objects.exists()


def test_bytes_decode_error() -> None:
    with pytest.raises(ValueError, match="Unsupported value"):
        test_tasks.echo.enqueue(b"\xff")
    assert not Occurrence.objects.exists()


@pytest.mark.parametrize(
    "value",
    [any, object(), set(), Decimal("3.42")],
    ids=["builtin", "object", "set", "Decimal"],
)
def test_encode_error(value: Any, clock) -> None:
    for refused in (value, clock.now()):
        with pytest.raises(TypeError, match="Unsupported type"):
            test_tasks.echo.enqueue(refused)
    assert not Occurrence.objects.exists()


def test_an_int_keyed_return_value_is_kept(drain) -> None:
    result = test_tasks.int_keyed_result.enqueue()
    drain()
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL, result.errors
    assert result.return_value == {"1": "one"}


def test_arguments_too_large_are_refused_as_the_framework_refuses() -> None:
    """Ours: our 16 KiB bound on arguments is refused with a TypeError or ValueError, as the
    framework refuses arguments it cannot take."""
    try:
        test_tasks.echo.enqueue("x" * 20_000)
    except (TypeError, ValueError):
        pass
    except Exception as exc:
        raise AssertionError(f"refused with {type(exc).__name__}: {exc}") from exc
    else:
        raise AssertionError("arguments of 20,000 characters were taken")
    assert not Occurrence.objects.exists()


def test_a_return_value_too_large_fails_as_the_framework_fails(drain) -> None:
    """Ours: a return value over our 64 KiB bound fails the task with a TypeError or
    ValueError, as a value normalize_json cannot take does."""
    result = test_tasks.too_large_result.enqueue()
    drain()
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert issubclass(result.errors[-1].exception_class, TypeError | ValueError)
