"""What the names in scanned source stand for: imports read back to dotted names, and
variables bound to querysets, database cursors, HTTP clients or the host clock.

The rules (``storage``, ``http``, ``local_time``) ask these questions of the ``ast`` they read;
a name's meaning is found in the code given (and, for a handler, its module's top level),
never by importing or running it.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass, field

from django.apps import apps
from django.db.models import ForeignObjectRel

# Reads of the host clock as seconds since the epoch: fine for durations, not for dates.
CLOCK_READS = {"time.time", "time.time_ns"}

# Attributes of a model class that are its managers.
MANAGERS = {"objects", "_default_manager", "_base_manager"}
# Queryset methods that return a queryset: a chain of them still ends on a queryset.
QUERYSET_METHODS = {
    "all",
    "filter",
    "exclude",
    "order_by",
    "reverse",
    "distinct",
    "select_related",
    "prefetch_related",
    "annotate",
    "alias",
    "only",
    "defer",
    "using",
    "select_for_update",
    "values",
    "values_list",
    "none",
    "extra",
    "union",
    "intersection",
    "difference",
}
DATABASE_NAMES = {"conn", "cur", "db"}
DATABASE_CONNECTS = {
    "psycopg.connect",
    "psycopg.Connection.connect",
    "psycopg.AsyncConnection.connect",
    "psycopg2.connect",
    "sqlite3.connect",
    "asyncpg.connect",
}
# Classes whose instances make HTTP requests, Django's test clients among them.
HTTP_CLIENTS = {
    "requests.Session",
    "requests.sessions.Session",
    "httpx.Client",
    "httpx.AsyncClient",
    "aiohttp.ClientSession",
    "urllib3.PoolManager",
    "http.client.HTTPConnection",
    "http.client.HTTPSConnection",
    "django.test.Client",
    "django.test.AsyncClient",
    "django.test.client.Client",
    "django.test.client.AsyncClient",
}


@dataclass
class Names:
    """What names in the scanned code stand for: imports (local name to dotted name) and
    variables bound to querysets, database cursors, HTTP clients or ``time.time()``."""

    imports: dict[str, str] = field(default_factory=dict)
    querysets: set[str] = field(default_factory=set)
    cursors: set[str] = field(default_factory=set)
    clients: set[str] = field(default_factory=set)
    clock_reads: set[str] = field(default_factory=set)
    related: frozenset[str] = field(default_factory=frozenset)

    def copy(self) -> Names:
        return Names(
            dict(self.imports),
            set(self.querysets),
            set(self.cursors),
            set(self.clients),
            set(self.clock_reads),
            self.related,
        )


def related_accessors() -> frozenset[str]:
    """The names under which installed models reach their many-related managers
    (``customer.invoices``, ``invoice.line_set``); none before Django's app registry is ready."""
    if not apps.ready:
        return frozenset()
    found: set[str] = set()
    for model in apps.get_models():
        for relation in model._meta.get_fields():
            if isinstance(relation, ForeignObjectRel):
                if relation.one_to_many or relation.many_to_many:
                    found.add(relation.get_accessor_name() or "")
            elif relation.many_to_many or relation.one_to_many:
                found.add(relation.name)
    return frozenset(found - {""})


def receiver_name(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


def root_name(node: ast.expr) -> str:
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else ""


def dotted_name(node: ast.expr, names: Names) -> str:
    """The dotted name ``node`` spells, its first name read through the imports
    (``C`` after ``from httpx import Client as C`` is ``httpx.Client``); ``""`` if none."""
    if isinstance(node, ast.Name):
        return names.imports.get(node.id, node.id)
    if isinstance(node, ast.Attribute):
        base = dotted_name(node.value, names)
        return f"{base}.{node.attr}" if base else ""
    return ""


def last_part(dotted: str) -> str:
    return dotted.rsplit(".", 1)[-1]


def in_modules(dotted: str, modules: set[str]) -> bool:
    return any(dotted == m or dotted.startswith(f"{m}.") for m in modules)


def _unawaited(node: ast.expr) -> ast.expr:
    return node.value if isinstance(node, ast.Await) else node


def is_related_manager(node: ast.expr, names: Names) -> bool:
    return isinstance(node, ast.Attribute) and (
        node.attr.endswith("_set") or node.attr in names.related
    )


def is_queryset(node: ast.expr, names: Names) -> bool:
    """Whether ``node`` is a manager or queryset: ``M.objects``, a related manager, a variable
    bound to one, or a chain of queryset methods on any of these."""
    if isinstance(node, ast.Name):
        return node.id in names.querysets
    if isinstance(node, ast.Attribute):
        return node.attr in MANAGERS or is_related_manager(node, names)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        return node.func.attr in QUERYSET_METHODS and is_queryset(node.func.value, names)
    return False


def is_database(node: ast.expr, names: Names) -> bool:
    """Whether ``node`` is a database cursor or connection (what ``.execute()`` runs SQL on)."""
    if isinstance(node, ast.Call):
        return _opens_database(node, names)
    if isinstance(node, ast.Subscript):
        return last_part(dotted_name(node.value, names)) == "connections"
    name = last_part(dotted_name(node, names))
    return (
        name in names.cursors
        or name in DATABASE_NAMES
        or "cursor" in name.lower()
        or "connection" in name.lower()
    )


def _opens_database(node: ast.expr, names: Names) -> bool:
    if not isinstance(node, ast.Call):
        return isinstance(node, ast.Subscript) and is_database(node, names)
    if isinstance(node.func, ast.Attribute) and node.func.attr == "cursor":
        return True
    return dotted_name(node.func, names) in DATABASE_CONNECTS


def _opens_client(node: ast.expr, names: Names) -> bool:
    return isinstance(node, ast.Call) and dotted_name(node.func, names) in HTTP_CLIENTS


def reads_clock(node: ast.expr, names: Names) -> bool:
    """Whether ``node`` is ``time.time()`` or a name bound to it."""
    if isinstance(node, ast.Name):
        return isinstance(node.ctx, ast.Load) and node.id in names.clock_reads
    return isinstance(node, ast.Call) and dotted_name(node.func, names) in CLOCK_READS


def _outside_functions(tree: ast.AST) -> Iterator[ast.AST]:
    """The nodes of a module that run at import: none inside a function or class body."""
    for node in ast.iter_child_nodes(tree):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            yield node
            yield from _outside_functions(node)


def _bindings(nodes: list[ast.AST]) -> Iterator[tuple[str, ast.expr]]:
    """Each ``name = value`` among ``nodes``: assignments, ``:=`` and ``with ... as name``."""
    for node in nodes:
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    yield target.id, node.value
        elif isinstance(node, ast.AnnAssign | ast.NamedExpr) and node.value is not None:
            if isinstance(node.target, ast.Name):
                yield node.target.id, node.value
        elif isinstance(node, ast.withitem) and isinstance(node.optional_vars, ast.Name):
            yield node.optional_vars.id, node.context_expr


def imports_in(nodes: list[ast.AST]) -> Iterator[tuple[str, str]]:
    """Each imported local name with the dotted name it stands for."""
    for node in nodes:
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    yield alias.asname, alias.name
                else:
                    first = alias.name.split(".")[0]
                    yield first, first
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                yield alias.asname or alias.name, f"{node.module}.{alias.name}"


def _names_in(nodes: list[ast.AST], outer: Names) -> Names:
    """``outer`` with the imports and bindings found among ``nodes`` added. A binding may rest
    on another (``qs = M.objects.all()``, then ``due = qs.filter(...)``): repeat until stable."""
    names = outer.copy()
    names.imports.update(imports_in(nodes))
    bindings = [(name, _unawaited(value)) for name, value in _bindings(nodes)]
    kinds = (
        (names.querysets, is_queryset),
        (names.cursors, _opens_database),
        (names.clients, _opens_client),
        (names.clock_reads, reads_clock),
    )
    changed = True
    while changed:
        changed = False
        for name, value in bindings:
            for bound, test in kinds:
                if name not in bound and test(value, names):
                    bound.add(name)
                    changed = True
    return names


def names_of(tree: ast.AST, outer: Names | None = None) -> Names:
    if outer is None:
        outer = Names(related=related_accessors())
    return _names_in(list(ast.walk(tree)), outer)


def module_names(module_tree: ast.Module) -> Names:
    """What names mean at a module's top level, for the functions in it."""
    return _names_in(list(_outside_functions(module_tree)), Names(related=related_accessors()))
