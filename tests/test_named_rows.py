"""Every row a store statement returns is read by its column names, never by position: a
statement's SELECT (or RETURNING) list can be reordered without swapping any value.

Two guards. A scan of the source: only ``store._sql._named_rows`` fetches rows (through
psycopg's named row factory), and no module indexes, unpacks or star-passes a row it fetched.
And the two statements that once had to return the same four columns in the same order for
one unpack (``write_plan``, ``mark_missed``) are run with their lists reordered.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

import django_jobs
from django_jobs import store
from django_jobs.models import SkipReason
from django_jobs.store import PlannedOccurrence, PlanWrite, Skipped, planning

from .factories import T0, ScheduleFactory

PACKAGE = Path(django_jobs.__file__).parent
STORE = PACKAGE / "store"
# The calls that hand back rows: the store's statement runners and a cursor's fetches.
ROW_LISTS = {"_rows", "_named_rows", "fetchall", "fetchmany"}
FETCHES = {"fetchone", "fetchall", "fetchmany"}
# The one decoder: the only function that fetches from a cursor.
DECODER = ("_sql.py", "_named_rows")


def _called(node: ast.AST) -> str | None:
    """The name a call calls (``f(...)``, ``x.f(...)``), else None."""
    if not isinstance(node, ast.Call):
        return None
    func = node.func
    return func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)


class _Positional(ast.NodeVisitor):
    """Positional reads of rows within one function: what names hold row lists and rows is
    followed through assignments, loops and comprehensions."""

    def __init__(self) -> None:
        self.lists: set[str] = set()
        self.rows: set[str] = set()
        self.found: list[tuple[int, str]] = []

    def is_list(self, node: ast.AST) -> bool:
        return _called(node) in ROW_LISTS or (isinstance(node, ast.Name) and node.id in self.lists)

    def is_row(self, node: ast.AST) -> bool:
        if isinstance(node, ast.Name):
            return node.id in self.rows
        if isinstance(node, ast.Subscript):
            return self.is_list(node.value)
        return _called(node) == "fetchone"

    def bind(self, target: ast.AST, value: ast.AST, line: int) -> None:
        if self.is_list(value):
            if isinstance(target, ast.Name):
                self.lists.add(target.id)
            elif isinstance(target, ast.Tuple | ast.List):
                for element in target.elts:
                    if isinstance(element, ast.Name):
                        self.rows.add(element.id)
                    else:
                        self.found.append((line, "a row unpacked by position"))
        elif self.is_row(value):
            if isinstance(target, ast.Name):
                self.rows.add(target.id)
            elif isinstance(target, ast.Tuple | ast.List):
                self.found.append((line, "a row unpacked by position"))

    def each(self, target: ast.AST, iterable: ast.AST, line: int) -> None:
        if self.is_list(iterable):
            if isinstance(target, ast.Name):
                self.rows.add(target.id)
            else:
                self.found.append((line, "rows looped over by position"))

    def visit_Assign(self, node: ast.Assign) -> None:
        self.visit(node.value)
        for target in node.targets:
            self.bind(target, node.value, node.lineno)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None:
            self.visit(node.value)
            self.bind(node.target, node.value, node.lineno)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self.visit(node.value)
        self.bind(node.target, node.value, node.lineno)

    def visit_For(self, node: ast.For) -> None:
        self.visit(node.iter)
        self.each(node.target, node.iter, node.lineno)
        for statement in [*node.body, *node.orelse]:
            self.visit(statement)

    def visit_comprehension(self, node: ast.comprehension) -> None:
        self.visit(node.iter)
        self.each(node.target, node.iter, node.iter.lineno)
        for condition in node.ifs:
            self.visit(condition)

    def _comprehension(self, node: ast.ListComp | ast.SetComp | ast.GeneratorExp) -> None:
        for generator in node.generators:
            self.visit(generator)
        self.visit(node.elt)

    visit_ListComp = visit_SetComp = visit_GeneratorExp = _comprehension

    def visit_DictComp(self, node: ast.DictComp) -> None:
        for generator in node.generators:
            self.visit(generator)
        self.visit(node.key)
        self.visit(node.value)

    def visit_Subscript(self, node: ast.Subscript) -> None:
        if self.is_row(node.value):
            self.found.append((node.lineno, "a row's column read by position"))
        self.generic_visit(node)

    def visit_Starred(self, node: ast.Starred) -> None:
        if self.is_row(node.value):
            self.found.append((node.lineno, "a row's columns passed by position"))
        self.generic_visit(node)


def _functions(tree: ast.Module) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield node


def positional_reads(root: Path = PACKAGE) -> list[str]:
    """``path:line: what`` for every row of a statement read by position under ``root``,
    and every cursor fetch outside the one decoder (``_sql._named_rows``)."""
    found: list[str] = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        where = path.relative_to(root.parent)
        for function in _functions(tree):
            visitor = _Positional()
            for statement in function.body:
                visitor.visit(statement)
            found += [f"{where}:{line}: {what}" for line, what in visitor.found]
            if (path.name, function.name) == DECODER:
                continue
            found += [
                f"{where}:{node.lineno}: a cursor fetch outside {DECODER[1]}"
                for node in ast.walk(function)
                if isinstance(node, ast.Call) and _called(node) in FETCHES
            ]
    return sorted(set(found))


def test_no_row_is_read_by_position() -> None:
    assert positional_reads() == []


def test_the_decoder_names_rows_with_psycopgs_row_factory() -> None:
    """The one function that fetches hands rows over named by their columns."""
    source = (STORE / DECODER[0]).read_text()
    decoder = next(f for f in _functions(ast.parse(source)) if f.name == DECODER[1])
    assert "namedtuple_row" in ast.unparse(decoder)


@pytest.mark.django_db
def test_rows_are_named_by_their_columns_in_any_order() -> None:
    from django_jobs.store._sql import _named_rows

    (row,) = _named_rows("SELECT 2 AS b, 1 AS a", {})
    assert (row.a, row.b) == (1, 2)
    assert _named_rows("SELECT 1 AS a WHERE false", {}) == []


def test_the_scan_finds_each_shape_of_positional_read(tmp_path: Path) -> None:
    """The scan is not blind: each way of reading a row by position is found."""
    (tmp_path / "shapes.py").write_text(
        "def f(q):\n"
        "    a = [r[0] for r in _named_rows(q, {})]\n"
        "    for x, y in _named_rows(q, {}):\n"
        "        pass\n"
        "    ((count,),) = _named_rows(q, {})\n"
        "    rows = _named_rows(q, {})\n"
        "    rows += _named_rows(q, {})\n"
        "    b = [T(*r) for r in rows]\n"
        "    (row,) = rows\n"
        "    c, d = row\n"
        "    e = _named_rows(q, {})[0][0]\n"
        "    return cursor.fetchone()\n"
    )
    found = positional_reads(tmp_path)
    assert sorted(int(line.split(":")[1]) for line in found) == [2, 3, 5, 8, 10, 11, 12], found


# --- The two statements that once shared one positional unpack ----------------------------


def _reordered(statement: str) -> str:
    """``statement`` with the column list of its last SELECT or RETURNING reversed."""
    match = list(re.finditer(r"\b(SELECT|RETURNING) (.+?)(?= FROM |$)", statement, re.S))[-1]
    columns = [c.strip() for c in match.group(2).split(",")]
    assert len(columns) > 1, statement
    reordered = f"{match.group(1)} {', '.join(reversed(columns))}"
    return statement[: match.start()] + reordered + statement[match.end() :]


@pytest.mark.django_db
@pytest.mark.parametrize("reorder", [False, True], ids=["as-written", "reordered"])
def test_write_plan_reads_what_it_recorded_skipped_by_name(monkeypatch, reorder) -> None:
    """What ``write_plan`` returns is the same whatever the order of the columns its two
    statements (new skipped occurrences, missed ones marked skipped) return."""
    if reorder:
        for name in ("write_plan", "mark_missed"):
            monkeypatch.setitem(planning.QUERIES, name, _reordered(planning.QUERIES[name]))
    schedule = ScheduleFactory.create(next_due_at=T0)
    now = T0 + timedelta(hours=1)
    missed = PlannedOccurrence(schedule.pk, schedule.tenant, schedule.key, T0)
    store.plan([missed], now=T0)
    new = PlannedOccurrence(
        schedule.pk, schedule.tenant, schedule.key, T0 + timedelta(minutes=1), SkipReason.OVERLAP
    )
    write = PlanWrite(occurrences=[new], skip=[(missed.id, SkipReason.MISFIRE.value)])
    skipped = store.write_plan(write, now=now)
    assert sorted(skipped) == sorted(
        [
            Skipped(new.id, schedule.pk, new.scheduled_at, SkipReason.OVERLAP.value),
            Skipped(missed.id, schedule.pk, T0, SkipReason.MISFIRE.value),
        ]
    )
