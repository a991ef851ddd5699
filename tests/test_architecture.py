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

from .orm_writes import OCCURRENCE_ROWS, SCHEDULE_RECORDS, module_name, orm_writes

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


# Every module an operator or application code reaches django_jobs through: the admin and its
# console, the commands and their cli/, the system checks, the Tasks backend, the metrics and
# their view, the admin's template tags.
INTERFACES = [
    "admin.py",
    "admin_records.py",
    "admin_base.py",
    "admin_lists.py",
    "admin_instants.py",
    "console",
    "management",
    "cli",
    "checks",
    "tasks.py",
    "urls.py",
    "metrics.py",
    "templatetags",
]


def test_interfaces_never_build_their_own_clock() -> None:
    """They take it from ``clock.current()`` (``use_clock`` injects one), the one place."""
    built = [
        f"{relative(p)}:{node.lineno}"
        for area in INTERFACES
        for p in modules_of(area)
        for node in ast.walk(ast.parse(p.read_text()))
        if isinstance(node, ast.Call)
        and (getattr(node.func, "id", None) or getattr(node.func, "attr", None)) == "SystemClock"
    ]
    assert built == []


# The "never" arrows of docs/architecture.md's Layers: interfaces -> services -> store ->
# models, and a layer never calls one to its left; the worker calls the store, the registry
# and scheduling, never services or interfaces.
NEVER = {
    **{area: ("store",) for area in INTERFACES},
    "services": ("worker", *INTERFACES),
    "store": ("services", "worker", *INTERFACES),
    "models": ("store", "services", "worker", *INTERFACES),
    "worker": ("services", *INTERFACES),
}


def module_of(area: str) -> str:
    return f"django_jobs.{area.removesuffix('.py')}"


@pytest.mark.parametrize(("area", "forbidden"), NEVER.items(), ids=list(NEVER))
def test_dependencies_point_one_way(area: str, forbidden: tuple[str, ...]) -> None:
    prefixes = tuple(module_of(f) for f in forbidden)
    wrong = {
        relative(p): sorted(
            m for m in imported_modules(p) for f in prefixes if m == f or m.startswith(f"{f}.")
        )
        for p in modules_of(area)
    }
    assert {k: v for k, v in wrong.items() if v} == {}


def test_scheduling_is_pure() -> None:
    """scheduling/ imports nothing of django_jobs but ``clock.ensure_aware_utc`` (no models, no
    store, no services, no worker, no clock to read), and neither the database, the settings
    nor Django's clock."""
    allowed = {"django_jobs.clock", "django_jobs.clock.ensure_aware_utc"}
    impure = ("django.db", "django.conf", "django.utils.timezone")
    wrong = {}
    for path in modules_of("scheduling"):
        names = {
            name
            for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Import | ast.ImportFrom)
            for name in (
                [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module]
            )
            if name
        }
        found = {
            m
            for m in imported_modules(path)
            if not m.startswith("django_jobs.scheduling") and m not in allowed
        } | {n for n in names if n.startswith(impure)}
        if found:
            wrong[relative(path)] = sorted(found)
    assert wrong == {}


def test_the_store_is_reached_through_its_package() -> None:
    """``store.claim_runs``, never ``store.claims.claim_runs``: outside ``store/`` no import
    names one of its modules."""
    modules = {p.stem for p in (PACKAGE / "store").glob("*.py")} - {"__init__"}
    wrong = {
        relative(p): found
        for p in SOURCES
        if p.relative_to(PACKAGE).parts[0] != "store"
        and (
            found := sorted(
                m
                for m in imported_modules(p)
                if m.startswith("django_jobs.store.") and m.split(".")[2] in modules
            )
        )
    }
    assert wrong == {}


def store_written_by_others(models: frozenset[str]) -> list[str]:
    """Each ORM write of ``models``' rows outside ``store/``, as ``path:line: model call``."""
    return [
        f"{relative(p)}:{write}"
        for p in SOURCES
        if p.relative_to(PACKAGE).parts[0] != "store"
        for write in orm_writes(p.read_text(), module_name(p), models)
    ]


def test_only_the_store_writes_schedule_limit_and_runbook_rows() -> None:
    """Services decide and audit; ``store/schedules.py`` writes the schedule records (issue
    34). No ``save()``, ``delete()``, ``objects.create()``..., no queryset ``update()`` or
    ``delete()`` of a Schedule, Limit or Runbook anywhere else (``full_clean`` is a read)."""
    found = store_written_by_others(SCHEDULE_RECORDS)
    assert found == [], "written outside store/:\n" + "\n".join(found)


def test_only_the_store_writes_occurrence_attempt_and_step_rows() -> None:
    found = store_written_by_others(OCCURRENCE_ROWS)
    assert found == [], "written outside store/:\n" + "\n".join(found)


def test_the_orm_write_rule_sees_a_service_writing_a_schedule() -> None:
    """The rule itself: each way of writing a Schedule, Limit or Runbook row is named; reads,
    ``full_clean``, a dict's ``update`` and other models' writes are not."""
    source = """
from django.db import transaction
from ..models import Limit, Occurrence, Schedule, SyncState
from .. import models
from .rows import locked


def park_one(pk: int) -> None:
    Schedule.objects.filter(pk=1).update(status="x")


def disable(schedule: Schedule) -> Schedule:
    schedule = locked(schedule)
    schedule.full_clean()
    schedule.save(update_fields=["enabled"])
    return schedule


def others(rows: list[Schedule], state: dict[str, int]) -> None:
    for row in rows:
        row.limit.delete()
    record, created = Limit.objects.get_or_create(schedule_id=1)
    record.save()
    models.Runbook.objects.bulk_create([])
    fresh = Schedule(key="k")
    fresh.save()
    Occurrence.objects.filter(schedule_id=1).count()
    list(Schedule.objects.filter(pk=1))
    Schedule.objects.get(pk=1).full_clean()
    SyncState.objects.update_or_create(key="declared", defaults={})
    state.update(a=1)
    for s in Schedule.objects.raw("SELECT * FROM django_jobs_schedule"):
        s.save()
"""
    found = [str(w) for w in orm_writes(source, "django_jobs.services.park", SCHEDULE_RECORDS)]
    assert found == [
        "9: Schedule rows .update()",
        "15: Schedule row .save()",
        "21: Limit row .delete()",
        "22: Limit rows .get_or_create()",
        "23: Limit row .save()",
        "24: Runbook rows .bulk_create()",
        "26: Schedule row .save()",
        "33: Schedule row .save()",
    ]


ARCHITECTURE = PACKAGE.parent / "docs" / "architecture.md"
# Left out of the module table: Django's migrations, and each package's __init__.py (what a
# package re-exports is in the row of the package).
NOT_IN_THE_TABLE = {"migrations", "__init__.py"}


def cells(line: str) -> list[str]:
    """The cells of a Markdown table row, a ``|`` inside backticks kept in its cell."""
    found, cell, code = [], "", False
    for char in line.strip().removeprefix("|").removesuffix("|"):
        if char == "`":
            code = not code
        if char == "|" and not code:
            found.append(cell)
            cell = ""
        else:
            cell += char
    return [*found, cell]


def module_table(text: str) -> list[tuple[set[str], set[str]]]:
    """Each row of docs/architecture.md's module table: the names in backticks in its first
    cell (the modules or packages) and in its second (what they own)."""
    rows, inside = [], False
    for line in text.splitlines():
        if line.startswith("| module or package |"):
            inside = True
        elif inside and line.startswith("|") and not line.startswith("|---"):
            first, owns, *_ = cells(line)
            rows.append((set(re.findall(r"`([^`]+)`", first)), set(re.findall(r"`([^`]+)`", owns))))
        elif inside and not line.startswith("|"):
            break
    return rows


def missing_from_the_table(text: str) -> list[str]:
    """The modules of django_jobs the module table does not name.

    Each top-level module (``audit.py``) is named in a row's first cell; each package
    (``store/``) is, or a path in it (``contrib/embedded.py``); and each module of a package is
    named in a row of its package: by its path in the first cell (``management/commands/
    jobs.py``), or in the cell of what the row owns, by its name (``claims``)."""
    rows = module_table(text)
    listed = set().union(*(first for first, _ in rows))
    missing = []
    for entry in sorted(PACKAGE.iterdir()):
        if entry.name in NOT_IN_THE_TABLE or not (entry.suffix == ".py" or entry.is_dir()):
            continue
        if entry.suffix == ".py":
            missing += [] if entry.name in listed else [entry.name]
            continue
        package = f"{entry.name}/"
        own = [row for row in rows if any(n.startswith(package) for n in row[0])]
        for module in sorted(entry.rglob("*.py")):
            inner = module.relative_to(entry).as_posix()
            if module.name in NOT_IN_THE_TABLE or not own:
                continue
            names = {f"{package}{inner}", inner, inner.removesuffix(".py"), module.stem}
            if not any(names & (first | owns) for first, owns in own):
                missing.append(f"{package}{inner}")
        if not own and any(entry.rglob("*.py")):
            missing.append(package)
    return missing


def test_the_module_table_names_every_module() -> None:
    """docs/architecture.md's table is the map of the house: a new module gets its row, or a
    mention in the row of its package."""
    assert missing_from_the_table(ARCHITECTURE.read_text()) == []


def test_the_module_table_names_no_module_that_is_gone() -> None:
    gone = [
        name
        for first, _ in module_table(ARCHITECTURE.read_text())
        for name in sorted(first)
        if not (PACKAGE / name).exists()
    ]
    assert gone == []


def test_the_module_table_rule_sees_a_missing_module() -> None:
    """A row removed, or a module's name taken out of its package's row, is named."""
    text = ARCHITECTURE.read_text()
    before = set(missing_from_the_table(text))
    signals = next(line for line in text.splitlines() if line.startswith("| `signals.py` |"))
    without_signals = text.replace(signals + "\n", "")
    assert set(missing_from_the_table(without_signals)) - before == {"signals.py"}
    store = next(line for line in text.splitlines() if line.startswith("| `store/` |"))
    without_claims = text.replace(store, store.replace("`claims`, ", ""))
    assert without_claims != text
    assert set(missing_from_the_table(without_claims)) - before == {"store/claims.py"}


def test_every_doc_the_source_points_to_exists() -> None:
    docs = re.compile(r"\bdocs/[\w/-]+\.md")
    missing = [
        f"{relative(p)}:{n}: {name}"
        for p in SOURCES
        for n, line in enumerate(p.read_text().splitlines(), 1)
        for name in docs.findall(line)
        if not (PACKAGE.parent / name).is_file()
    ]
    assert missing == []


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
