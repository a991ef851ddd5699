"""Where the source writes rows of the models only the store may write, through the ORM.

``orm_writes(source, module, models)`` reads one module with ``ast`` and returns each call that
writes a row of one of ``models``: a manager's or queryset's ``create``, ``bulk_create``,
``bulk_update``, ``update_or_create``, ``get_or_create``, ``update`` or ``delete``, and a row's
``save()`` or ``delete()``. It knows what an expression holds without running it, from what
the module itself says: the model's class (imported from ``django_jobs.models``),
``Model.objects`` and the querysets chained from it (``raw(...)`` too), ``Model(...)``, a
parameter or variable annotated with the model (``Schedule``, ``list[Schedule]``,
``Schedule | None``), a variable assigned one of those, a loop over one, the foreign keys
between them (``x.schedule``, ``schedule.limit``, ``schedule.runbooks``), and what a function
of django_jobs is annotated to return. A write through an expression it cannot type (an
unannotated helper's result) is not seen: the rule errs on the side of naming only real
writes, never another model's rows.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import NamedTuple

PACKAGE = Path(__file__).resolve().parent.parent / "django_jobs"

# The schedule records (issue 34: one writer, store/schedules.py) and the occurrence's rows.
SCHEDULE_RECORDS = frozenset({"Schedule", "Limit", "Runbook"})
OCCURRENCE_ROWS = frozenset({"Occurrence", "Attempt", "Step", "ConsumedOneOff"})

# Called on a manager or a queryset of a model: writes its rows.
QUERYSET_WRITES = frozenset(
    {
        "create",
        "bulk_create",
        "bulk_update",
        "update_or_create",
        "get_or_create",
        "update",
        "delete",
    }
)
ROW_WRITES = frozenset({"save", "delete"})
# Called on a manager or a queryset: another queryset of the same model.
QUERYSETS = frozenset(
    {
        "all",
        "filter",
        "exclude",
        "select_for_update",
        "select_related",
        "prefetch_related",
        "order_by",
        "annotate",
        "alias",
        "only",
        "defer",
        "using",
        "distinct",
        "reverse",
        "none",
        "iterator",
        "bulk_create",
        "raw",  # a RawQuerySet: its rows are the model's, as saveable as any
    }
)
ROWS = frozenset({"get", "first", "last", "earliest", "latest", "create"})
PAIRS = frozenset({"get_or_create", "update_or_create"})
COLLECTIONS = frozenset(
    {"list", "set", "frozenset", "tuple", "Sequence", "Iterable", "Iterator", "Collection"}
)
COLLECTIONS |= {"QuerySet", "Generator", "MutableSequence", "AbstractSet"}
# Foreign keys between the models: ``<any>.schedule`` (of a Limit, a Runbook, an Occurrence)
# and ``<any>.occurrence`` (of an Attempt, a Step), and their reverse sides.
RELATED = {"schedule": ("row", "Schedule"), "occurrence": ("row", "Occurrence")}
REVERSE = {
    "Schedule": {"limit": ("row", "Limit"), "runbooks": ("rows", "Runbook")},
    "Occurrence": {"attempt_history": ("rows", "Attempt"), "steps": ("rows", "Step")},
}
REVERSE["Schedule"]["occurrences"] = ("rows", "Occurrence")


class Kind(NamedTuple):
    """What an expression holds: the model's ``class``, ``rows`` of it (a manager, a queryset,
    a list), one ``row``, or the ``pair`` ``get_or_create`` returns."""

    shape: str
    model: str


class Write(NamedTuple):
    line: int
    model: str
    call: str

    def __str__(self) -> str:
        return f"{self.line}: {self.model} {self.call}"


def module_name(path: Path) -> str:
    return ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)


def absolute(module: str, node: ast.ImportFrom) -> str:
    """The absolute name of what ``node`` imports from, inside module ``module``."""
    if not node.level:
        return node.module or ""
    parts = module.split(".")[: -node.level]
    return ".".join([*parts, node.module] if node.module else parts)


class Names(NamedTuple):
    """What a module's imports and top-level functions bind: a local name to a model, to a
    module of django_jobs, or to a function of django_jobs (absolute names)."""

    models: dict[str, str]
    modules: dict[str, str]
    functions: dict[str, str]


def names_of(tree: ast.Module, module: str, written: frozenset[str]) -> Names:
    names = Names({}, {}, {})
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            source = absolute(module, node)
            for alias in node.names:
                local = alias.asname or alias.name
                if source.startswith("django_jobs.models") and alias.name in written:
                    names.models[local] = alias.name
                elif source.startswith("django_jobs"):
                    names.functions[local] = f"{source}.{alias.name}"
                    names.modules[local] = f"{source}.{alias.name}"
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            names.functions[node.name] = f"{module}.{node.name}"
    return names


def annotated(node: ast.expr | None, models: dict[str, str]) -> Kind | None:
    """What an annotation says a value holds, if it names a model."""
    if node is None:
        return None
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        try:
            return annotated(ast.parse(node.value, mode="eval").body, models)
        except SyntaxError:
            return None
    if isinstance(node, ast.Name) and node.id in models:
        return Kind("row", models[node.id])
    if isinstance(node, ast.BinOp):  # Schedule | None
        return annotated(node.left, models) or annotated(node.right, models)
    if isinstance(node, ast.Subscript):
        outer = node.value.attr if isinstance(node.value, ast.Attribute) else None
        outer = node.value.id if isinstance(node.value, ast.Name) else outer
        inner = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        found = next((k for k in (annotated(e, models) for e in inner) if k), None)
        if found and outer in COLLECTIONS:
            return Kind("rows", found.model)
        if found and outer == "Optional":
            return found
    return None


@cache
def returns(written: frozenset[str]) -> dict[str, Kind]:
    """What each top-level function of django_jobs is annotated to return, by absolute name."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        module = module_name(path)
        tree = ast.parse(path.read_text())
        models = names_of(tree, module, written).models
        defined = [n for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
        for node in defined:
            if kind := annotated(node.returns, models):
                found[f"{module.removesuffix('.__init__')}.{node.name}"] = kind
    return found


def own_nodes(scope: ast.AST) -> Iterator[ast.AST]:
    """The nodes of ``scope``'s body, without those of the functions and classes in it."""
    for child in ast.iter_child_nodes(scope):
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Lambda):
            continue
        yield child
        yield from own_nodes(child)


def nested_scopes(scope: ast.AST) -> Iterator[ast.AST]:
    for child in ast.iter_child_nodes(scope):
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Lambda):
            yield child
        else:
            yield from nested_scopes(child)


class Scanner:
    def __init__(self, names: Names, written: frozenset[str]) -> None:
        self.names = names
        self.written = written
        self.writes: list[Write] = []

    def kind(self, node: ast.expr, env: dict[str, Kind]) -> Kind | None:
        """What ``node`` holds, if it is one of the models written or rows of one."""
        if isinstance(node, ast.Name):
            if node.id in self.names.models:
                return Kind("class", self.names.models[node.id])
            return env.get(node.id)
        if isinstance(node, ast.Attribute):
            if node.attr in RELATED and RELATED[node.attr][1] in self.written:
                return Kind(*RELATED[node.attr])
            held = self.kind(node.value, env)
            if held and held.shape == "class" and node.attr in {"objects", "_default_manager"}:
                return Kind("rows", held.model)
            related = REVERSE.get(held.model, {}).get(node.attr) if held else None
            if held and held.shape == "row" and related and related[1] in self.written:
                return Kind(*related)
            if (
                isinstance(node.value, ast.Name)
                and self.names.modules.get(node.value.id) == "django_jobs.models"
                and node.attr in self.written
            ):
                return Kind("class", node.attr)
            return None
        if isinstance(node, ast.Call):
            return self.called(node, env)
        if isinstance(node, ast.Subscript):
            held = self.kind(node.value, env)
            if held and held.shape == "rows":
                return held if isinstance(node.slice, ast.Slice) else Kind("row", held.model)
            return None
        if isinstance(node, ast.IfExp):
            return self.kind(node.body, env) or self.kind(node.orelse, env)
        if isinstance(node, ast.BoolOp):
            return next((k for k in (self.kind(v, env) for v in node.values) if k), None)
        if isinstance(node, ast.NamedExpr):
            return self.kind(node.value, env)
        return None

    def called(self, node: ast.Call, env: dict[str, Kind]) -> Kind | None:
        func = node.func
        if isinstance(func, ast.Attribute):
            held = self.kind(func.value, env)
            if held and held.shape == "rows":
                if func.attr in QUERYSETS:
                    return held
                if func.attr in ROWS:
                    return Kind("row", held.model)
                if func.attr in PAIRS:
                    return Kind("pair", held.model)
            if isinstance(func.value, ast.Name) and func.value.id in self.names.modules:
                return returns(self.written).get(f"{self.names.modules[func.value.id]}.{func.attr}")
            return None
        if isinstance(func, ast.Name):
            held = self.kind(func, env)
            if held and held.shape == "class":
                return Kind("row", held.model)
            if func.id in {"list", "sorted", "set", "tuple", "reversed"} and node.args:
                inner = self.kind(node.args[0], env)
                return inner if inner and inner.shape == "rows" else None
            if func.id in self.names.functions:
                return returns(self.written).get(self.names.functions[func.id])
        return None

    def bind(self, target: ast.expr, held: Kind | None, env: dict[str, Kind]) -> None:
        if held is None:
            return
        if isinstance(target, ast.Name):
            env.setdefault(target.id, held)
        elif isinstance(target, ast.Tuple | ast.List) and target.elts and held.shape == "pair":
            self.bind(target.elts[0], Kind("row", held.model), env)

    def element(self, iterable: ast.expr, env: dict[str, Kind]) -> Kind | None:
        held = self.kind(iterable, env)
        return Kind("row", held.model) if held and held.shape == "rows" else None

    def bindings(self, scope: ast.AST, env: dict[str, Kind]) -> None:
        """Type the names ``scope`` binds, until nothing more is learnt (flow-insensitive: a
        name once bound to a model's row holds one everywhere in its scope)."""
        if isinstance(scope, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            arguments = scope.args
            for arg in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]:
                if kind := annotated(arg.annotation, self.names.models):
                    env[arg.arg] = kind
        nodes = list(own_nodes(scope))
        for _ in range(4):
            known = dict(env)
            for node in nodes:
                if isinstance(node, ast.Assign):
                    for target in node.targets:
                        if isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple):
                            for t, v in zip(target.elts, node.value.elts, strict=False):
                                self.bind(t, self.kind(v, env), env)
                        else:
                            self.bind(target, self.kind(node.value, env), env)
                elif isinstance(node, ast.AnnAssign):
                    held = annotated(node.annotation, self.names.models)
                    if held is None and node.value is not None:
                        held = self.kind(node.value, env)
                    self.bind(node.target, held, env)
                elif isinstance(node, ast.NamedExpr):
                    self.bind(node.target, self.kind(node.value, env), env)
                elif isinstance(node, ast.For | ast.AsyncFor | ast.comprehension):
                    self.bind(node.target, self.element(node.iter, env), env)
            if env == known:
                return

    def scan(self, scope: ast.AST, outer: dict[str, Kind]) -> None:
        env = dict(outer)
        if isinstance(scope, ast.ClassDef) and scope.name in self.names.models:
            outer = {**outer, "self": Kind("row", self.names.models[scope.name])}
        self.bindings(scope, env)
        for node in own_nodes(scope):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                held = self.kind(node.func.value, env)
                call = node.func.attr
                if held and held.shape == "rows" and call in QUERYSET_WRITES:
                    self.writes.append(Write(node.lineno, held.model, f"rows .{call}()"))
                elif held and held.shape == "row" and call in ROW_WRITES:
                    self.writes.append(Write(node.lineno, held.model, f"row .{call}()"))
        for inner in nested_scopes(scope):
            self.scan(inner, outer if isinstance(scope, ast.ClassDef) else env)


def orm_writes(source: str, module: str, models: frozenset[str]) -> list[Write]:
    """Each ORM write of a row of one of ``models`` in ``source``, the text of ``module`` (its
    absolute dotted name, which resolves its relative imports)."""
    tree = ast.parse(source)
    scanner = Scanner(names_of(tree, module, models), models)
    scanner.scan(tree, {})
    return sorted(scanner.writes)
