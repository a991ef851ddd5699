"""The handler checks see through wrappers (issue #32, item 8): a handler given as a partial, a
bound method, a callable object or a ``functools.wraps`` wrapper is read as its function; one
whose source cannot be read is W025; a helper in another module of the project is read too
(not third-party code, not a command), a bounded number of calls down.

The handlers are in tests/handler_corpus/wrappers.py and project_helpers.py.
"""

from __future__ import annotations

import datetime as dt
import functools
import importlib.util
import inspect
import linecache
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import update_last_login
from django.test import override_settings

from django_jobs.checks import check_conventions, check_job_handlers
from django_jobs.conf import get_settings
from django_jobs.conventions import reach, report
from django_jobs.registry import Departure
from django_jobs.source_rules import STORAGE, Reach, handler_findings, is_project_module

from .handler_corpus import project_helpers as helpers
from .handler_corpus import wrappers as w
from .processes import ROOT

COMMANDS = {"COMMANDS": ["example_project.billing.statements"]}
WRITES = "writes a model directly"
W020 = "does itself what a job must leave to an application command"
W025 = "cannot be read, so no check can tell what it writes, calls or dispatches (W020, W024)"


def line_of(func: Callable[..., Any], text: str) -> int:
    """The line of ``func``'s file that holds ``text``, inside ``func``."""
    lines, first = inspect.getsourcelines(func)
    (offset,) = [i for i, line in enumerate(lines) if text in line]
    return first + offset


def messages(check: Callable[[], list[Any]], *ids: str) -> list[tuple[str, str]]:
    return [(m.id, m.msg) for m in check() if "tests.wrap." in m.msg and m.id in ids]


# Each wrapper kind: (the handler that writes, the one that counts, the one that sends), and
# what the check says of the one that writes.
WRAPPED: dict[str, tuple[Any, Any, Any]] = {
    "partial": (w.WRITES_FOR_ACME, w.COUNTS_TO_FIVE, w.SENDS_FOR_ACME),
    "bound-method": (w.EXPORTER.writes, w.EXPORTER.counts, w.EXPORTER.sends),
    "callable-object": (w.Writer(), w.Counter(), w.Sender()),
    "wraps": (w.writes_logged, w.counts_logged, w.sends_logged),
}
FOUND = {
    "partial": f"line {line_of(w.writes, '.update(')}: {WRITES} (.update())",
    "bound-method": f"line {line_of(w.Exporter.writes, '.update(')}: {WRITES} (.update())",
    "callable-object": (
        f"line {line_of(w.Writer._save, '.update(')} in Writer._save(): {WRITES} (.update())"
    ),
    "wraps": f"line {line_of(inspect.unwrap(w.writes_logged), '.update(')}: {WRITES} (.update())",
}


@pytest.mark.parametrize("kind", WRAPPED)
def test_w020_reads_a_wrapped_handler_as_its_function(registered, kind: str) -> None:
    writes, counts, sends = WRAPPED[kind]
    registered(f"tests.wrap.{kind}-writes", writes)
    registered(f"tests.wrap.{kind}-counts", counts)
    registered(f"tests.wrap.{kind}-sends", sends)
    assert messages(check_job_handlers, "django_jobs.W020", "django_jobs.W025") == [
        (
            "django_jobs.W020",
            f"Job 'tests.wrap.{kind}-writes' (tests.handler_corpus.wrappers) {W020}: "
            f"{FOUND[kind]}.",
        )
    ]


@pytest.mark.parametrize("kind", WRAPPED)
@override_settings(DJANGO_JOBS=COMMANDS)
def test_w024_reads_a_wrapped_handler_as_its_function(registered, kind: str) -> None:
    _, counts, sends = WRAPPED[kind]
    registered(f"tests.wrap.{kind}-counts", counts)
    registered(f"tests.wrap.{kind}-sends", sends)
    assert messages(check_conventions, "django_jobs.W024") == [
        (
            "django_jobs.W024",
            f"Job 'tests.wrap.{kind}-counts' (tests.handler_corpus.wrappers) calls no "
            "application command or approved port.",
        )
    ]
    assert [d.path for d in report(sends, get_settings()).dispatches] == [
        "example_project.billing.statements.send_for"
    ]


def test_a_partial_bound_method_or_wrapper_finds_what_the_plain_function_does() -> None:
    assert handler_findings(w.WRITES_FOR_ACME) == handler_findings(w.writes)
    assert handler_findings(w.EXPORTER.writes) == handler_findings(w.Exporter.writes)
    assert handler_findings(functools.partial(w.EXPORTER.writes)) == handler_findings(
        w.Exporter.writes
    )
    assert handler_findings(w.writes_logged) == handler_findings(inspect.unwrap(w.writes_logged))


def test_a_lambda_inside_a_statement_is_read_from_its_module(registered) -> None:
    registered("tests.wrap.lambda", w.WRITES_IN_A_LAMBDA)
    line = line_of(w.WRITES_IN_A_LAMBDA.func, "lambda run")
    assert messages(check_job_handlers, "django_jobs.W020") == [
        (
            "django_jobs.W020",
            f"Job 'tests.wrap.lambda' (tests.handler_corpus.wrappers) {W020}: "
            f"line {line}: {WRITES} (.update()).",
        )
    ]


# Handlers whose source cannot be read -----------------------------------------------------


def test_w025_a_built_in_handler(registered) -> None:
    registered("tests.wrap.builtin", print)
    registered("tests.wrap.builtin-partial", functools.partial(print, "sent"))
    because = "print is built in, C code with no Python source"
    assert messages(check_job_handlers, "django_jobs.W025") == [
        (
            "django_jobs.W025",
            f"Job 'tests.wrap.builtin' (builtins): the source of its handler print {W025}: "
            f"{because}.",
        ),
        (
            "django_jobs.W025",
            "Job 'tests.wrap.builtin-partial' (builtins): the source of its handler "
            f"functools.partial(print) {W025}: {because}.",
        ),
    ]
    (warning,) = [m for m in check_job_handlers() if "tests.wrap.builtin'" in m.msg]
    assert warning.hint == (
        "Register a function defined in a module file (a def in the app's jobs.py), or a "
        "partial, bound method, callable object or functools.wraps wrapper of one: those are "
        "read through to it. Or record a departure: @job(..., departure=Departure(reason=, "
        "review_by=))."
    )


def test_w025_a_lambda_made_by_exec(registered) -> None:
    namespace: dict[str, Any] = {"__name__": "console"}
    exec("handler = lambda run: run.tenant", namespace)
    registered("tests.wrap.exec", namespace["handler"])
    assert messages(check_job_handlers, "django_jobs.W025") == [
        (
            "django_jobs.W025",
            f"Job 'tests.wrap.exec' (console): the source of its handler <lambda> {W025}: "
            "<lambda> was defined in <string> (exec() or an interactive prompt), not in a "
            "source file.",
        )
    ]


def test_w025_a_handler_whose_source_file_is_gone(
    registered, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "gone_jobs.py"
    path.write_text("def pays(run):\n    return run.tenant\n")
    spec = importlib.util.spec_from_file_location("gone_jobs", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "gone_jobs", module)
    spec.loader.exec_module(module)
    path.unlink()
    linecache.checkcache(str(path))
    registered("tests.wrap.gone", module.pays)
    assert messages(check_job_handlers, "django_jobs.W025") == [
        (
            "django_jobs.W025",
            f"Job 'tests.wrap.gone' (gone_jobs): the source of its handler pays {W025}: the "
            f"source file of pays, {path}, cannot be read.",
        )
    ]


def test_w025_a_class_registered_as_a_handler(registered) -> None:
    registered("tests.wrap.class", w.Writer)
    assert messages(check_job_handlers, "django_jobs.W025") == [
        (
            "django_jobs.W025",
            "Job 'tests.wrap.class' (tests.handler_corpus.wrappers): the source of its handler "
            f"Writer {W025}: Writer is a class: calling it only builds an instance.",
        )
    ]


def test_a_departure_covers_an_unreadable_handler(registered) -> None:
    departure = Departure(reason="a C extension's entry point", review_by=dt.date(2099, 1, 1))
    registered("tests.wrap.departed", print, departure=departure)
    assert messages(check_job_handlers, "django_jobs.W025", "django_jobs.I021") == [
        (
            "django_jobs.I021",
            "Job 'tests.wrap.departed' (builtins) departs from the job rules (its source cannot "
            "be read: print is built in, C code with no Python source) under a recorded "
            "departure until 2099-01-01: a C extension's entry point",
        )
    ]


# Helpers in other modules ------------------------------------------------------------------


@override_settings(DJANGO_JOBS=COMMANDS)
def test_w020_a_helper_in_another_project_module(registered) -> None:
    registered("tests.wrap.helper-saves", w.saves_through_a_project_helper)
    registered("tests.wrap.helper-sends", w.sends_through_a_project_helper)
    line = line_of(helpers.save_it, ".create(")
    assert messages(check_job_handlers, "django_jobs.W020") == [
        (
            "django_jobs.W020",
            f"Job 'tests.wrap.helper-saves' (tests.handler_corpus.wrappers) {W020}: line "
            f"{line} in tests.handler_corpus.project_helpers.save_it(): {WRITES} (.create()).",
        )
    ]


@override_settings(DJANGO_JOBS=COMMANDS)
def test_a_command_a_project_helper_dispatches_satisfies_w024(registered) -> None:
    registered("tests.wrap.helper-saves", w.saves_through_a_project_helper)
    registered("tests.wrap.helper-sends", w.sends_through_a_project_helper)
    assert messages(check_conventions, "django_jobs.W024") == [
        (
            "django_jobs.W024",
            "Job 'tests.wrap.helper-saves' (tests.handler_corpus.wrappers) calls no "
            "application command or approved port.",
        )
    ]
    dispatches = report(w.sends_through_a_project_helper, get_settings()).dispatches
    assert [d.path for d in dispatches] == ["example_project.billing.statements.send_for"]


@override_settings(DJANGO_JOBS=COMMANDS)
def test_project_helpers_are_read_three_calls_down_and_no_further() -> None:
    bounded = reach(get_settings())
    assert bounded == Reach(stops=("example_project.billing.statements",), depth=3)
    line = line_of(helpers._save_here, ".delete(")
    assert [str(f) for f in handler_findings(w.saves_two_calls_down, bounded) or []] == [
        f"line {line} in tests.handler_corpus.project_helpers._save_here(): {WRITES} (.delete())"
    ]
    assert handler_findings(w.saves_past_the_bound, bounded) == []
    deeper = Reach(stops=bounded.stops, depth=4)
    assert [f.helper for f in handler_findings(w.saves_past_the_bound, deeper) or []] == [
        "tests.handler_corpus.project_helpers.fourth"
    ]


@override_settings(DJANGO_JOBS=COMMANDS)
def test_a_command_is_never_read_though_it_writes() -> None:
    """``send_for`` writes (get_or_create): that is what a command is for."""
    bounded = reach(get_settings())
    assert handler_findings(w.sends_through_a_project_helper, bounded) == []
    assert handler_findings(w.sends, bounded) == []


@override_settings(DJANGO_JOBS=COMMANDS)
def test_a_third_party_helper_is_not_read(registered) -> None:
    registered("tests.wrap.django", w.saves_through_django)
    assert messages(check_job_handlers, "django_jobs.W020", "django_jobs.W025") == []
    # Read on its own, Django's helper writes: it is left out for being Django's, not clean.
    assert {f.kind for f in handler_findings(update_last_login) or []} == {STORAGE}
    assert not is_project_module("django.contrib.auth.models")
    assert is_project_module("tests.handler_corpus.project_helpers")
    assert not is_project_module("django_jobs.registry")  # the library itself


@override_settings(DJANGO_JOBS={})
def test_without_commands_named_only_the_handlers_module_is_read(registered) -> None:
    """No helper can be told from a command then (W028 says so): reading one would take a
    command's writes for the handler's."""
    registered("tests.wrap.helper-saves", w.saves_through_a_project_helper)
    assert messages(check_job_handlers, "django_jobs.W020") == []
    assert reach(get_settings()) is None


@pytest.mark.processes
def test_manage_py_check_warns_about_a_partial_handler() -> None:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.handler_corpus.settings"}
    done = subprocess.run(
        [sys.executable, "-W", "ignore", str(ROOT / "manage.py"), "check"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr  # warnings do not fail check
    line = line_of(w.writes, ".update(")
    assert (
        "(django_jobs.W020) Job 'wrapped.writes-for-acme' (tests.handler_corpus.wrappers) "
        f"{W020}: line {line}: {WRITES} (.update()).\n"
    ) in done.stderr
    assert (
        "(django_jobs.W025) Job 'wrapped.prints' (builtins): the source of its handler "
        f"functools.partial(print) {W025}: print is built in, C code with no Python source.\n"
    ) in done.stderr
