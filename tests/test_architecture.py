"""The shape of the house, checked on every run (issue 14): modules a maintainer can read in
one sitting, short functions where the hard work is, SQL that names no state by hand, one
clock for interfaces, and dependencies that point one way.

These read the source with ``ast``; they need no database.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from django_jobs.models import AttemptOutcome, OccurrenceState, Origin, ScheduleStatus, Trigger
from django_jobs.scheduling.policies import Overlap, TimingKind

PACKAGE = Path(__file__).resolve().parent.parent / "django_jobs"
SOURCES = sorted(p for p in PACKAGE.rglob("*.py") if "migrations" not in p.parts)

MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 60  # in store/ and worker/, where a reader follows an occurrence


def modules_of(area: str) -> list[Path]:
    """The source files of ``area``: a module (``admin.py``) or a package (``store``)."""
    if area.endswith(".py"):
        return [PACKAGE / area]
    return sorted((PACKAGE / area).rglob("*.py"))


def relative(path: Path) -> str:
    return str(path.relative_to(PACKAGE.parent))


def functions(path: Path) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    tree = ast.parse(path.read_text())
    return [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]


def imported_modules(path: Path) -> set[str]:
    """Absolute names of the django_jobs modules ``path`` imports."""
    package = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if path.name != "__init__.py":
        package = package.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = package.split(".")
            if node.level:
                base = base[: len(base) - node.level + 1]
                name = ".".join([*base, node.module] if node.module else base)
            else:
                name = node.module or ""
            found.add(name)
            found.update(f"{name}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {name for name in found if name.startswith("django_jobs")}


def test_no_module_is_over_500_lines() -> None:
    long = {
        relative(p): n for p in SOURCES if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert long == {}


@pytest.mark.parametrize("area", ["store", "worker"])
def test_no_function_in_the_store_or_the_worker_is_over_60_lines(area: str) -> None:
    long = {
        f"{relative(p)}::{f.name}": length
        for p in modules_of(area)
        for f in functions(p)
        if (length := (f.end_lineno or f.lineno) - f.lineno + 1) > MAX_FUNCTION_LINES
    }
    assert long == {}


# Every value of a choice a statement compares with or writes: named in the statement and
# filled in from the models' choices (store/_sql.py VALUES), never typed into it.
CHOICE_VALUES = sorted(
    {
        str(value)
        for choices in (OccurrenceState, AttemptOutcome, ScheduleStatus, Trigger, Origin)
        for value in choices.values
    }
    | {kind.value for kind in TimingKind}
    | {policy.value for policy in Overlap}
)


def test_no_statement_types_a_state_or_choice_by_hand() -> None:
    literal = re.compile("'({})'".format("|".join(map(re.escape, CHOICE_VALUES))))
    found = [
        f"{relative(p)}:{n}: {line.strip()}"
        for p in sorted((PACKAGE / "store" / "sql").glob("*.sql"))
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if not line.lstrip().startswith("--") and literal.search(line)
    ]
    assert found == []


def test_the_store_keeps_its_sql_in_named_queries() -> None:
    """No statement is built in Python: SQL keywords in store/*.py appear only in docstrings
    and comments (the guards composed with psycopg.sql are fragments, not statements)."""
    statement = re.compile(r"^\s*(SELECT|INSERT INTO|UPDATE|DELETE FROM|WITH)\b")
    found = []
    for path in sorted((PACKAGE / "store").glob("*.py")):
        tree = ast.parse(path.read_text())
        docstrings = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, ast.Module | ast.FunctionDef | ast.ClassDef)
            and node.body
            and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant)
        }
        found += [
            f"{relative(path)}:{node.lineno}"
            for node in ast.walk(tree)
            if isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in docstrings
            and statement.match(node.value)
        ]
    assert found == []


INTERFACES = ["admin.py", "management", "cli", "checks"]


def test_interfaces_never_build_their_own_clock() -> None:
    """They take it from ``clock.current()`` (``use_clock`` injects one), the one place."""
    built = [
        f"{relative(p)}:{node.lineno}"
        for area in INTERFACES
        for p in (
            [PACKAGE / area] if area.endswith(".py") else sorted((PACKAGE / area).rglob("*.py"))
        )
        for node in ast.walk(ast.parse(p.read_text()))
        if isinstance(node, ast.Call)
        and (getattr(node.func, "id", None) or getattr(node.func, "attr", None)) == "SystemClock"
    ]
    assert built == []


@pytest.mark.parametrize(
    ("area", "forbidden"),
    [
        # Interfaces go through services; they never write the store themselves.
        ("admin.py", "django_jobs.store"),
        ("cli", "django_jobs.store"),
        ("management", "django_jobs.store"),
        # The store is below services and interfaces.
        ("store", "django_jobs.services"),
        ("store", "django_jobs.admin"),
        ("store", "django_jobs.worker"),
        # Services never reach up into the worker or the interfaces.
        ("services", "django_jobs.worker"),
        ("services", "django_jobs.cli"),
        # Schedule evaluation is pure: no store, no services, no worker.
        ("scheduling", "django_jobs.store"),
        ("scheduling", "django_jobs.services"),
        ("scheduling", "django_jobs.worker"),
    ],
)
def test_dependencies_point_one_way(area: str, forbidden: str) -> None:
    wrong = {
        relative(p): sorted(m for m in imported_modules(p) if m.startswith(forbidden))
        for p in modules_of(area)
    }
    assert {k: v for k, v in wrong.items() if v} == {}


def test_loaded_statements_carry_the_choices_as_literals() -> None:
    """``load_queries`` fills each state a statement names from the models' choices, so the
    server sees the same statement in any binding mode (a generic plan of a prepared statement
    still matches the partial indexes on ``state``)."""
    from django_jobs.store import _sql, claims, completion, planning, retention

    statements = {
        f"{module.__name__}.{name}": text
        for module in (claims, planning, retention)
        for name, text in module.QUERIES.items()
    } | {f"completion.{name}": text for name, text in completion.FENCED_WRITES.items()}
    left = {
        name: sorted(set(re.findall(r"%\((\w+)\)s", text)) & set(_sql.VALUES))
        for name, text in statements.items()
    }
    assert {name: names for name, names in left.items() if names} == {}
    assert "o.state IN ('scheduled', 'failed', 'processing')" in claims.QUERIES["claim"]
