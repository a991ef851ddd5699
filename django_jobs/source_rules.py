"""Reading source code for what the specification forbids a job (or django_jobs) to do itself.

A job handler dispatches an application command; it does not write models or SQL directly,
call HTTP clients, or read machine-local time. These scanners read source text with ``ast``;
they report what they see in the code given, not in what it calls. ``handler_findings`` goes
one step further: it also reads the functions of the handler's module that the handler calls.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from django.apps import apps
from django.db.models import ForeignObjectRel

# The kinds of finding, one per thing a handler must leave to a command.
STORAGE = "storage"
SQL = "SQL"
HTTP = "HTTP"
LOCAL_TIME = "local time"

# (receiver, attribute) pairs that read the host's local or naive time.
LOCAL_TIME_CALLS = {
    ("datetime", "utcnow"),
    ("datetime", "today"),
    ("date", "today"),
    ("time", "localtime"),
    ("time", "mktime"),
    ("time", "ctime"),
    ("time", "strftime"),
    ("timezone", "localtime"),
    ("timezone", "localdate"),
    ("timezone", "get_current_timezone"),
    ("datetime", "utcfromtimestamp"),
}
# What the ``time`` module says about the host's zone.
LOCAL_ZONE_ATTRIBUTES = {"time.timezone", "time.altzone", "time.tzname", "time.daylight"}
# Reads of the host clock as seconds since the epoch: fine for durations, not for dates.
CLOCK_READS = {"time.time", "time.time_ns"}
# Calls that turn a number of seconds into a date, a time or a timedelta.
CALENDAR_BUILDERS = {"datetime", "date", "timedelta"}
# Calls a number passes through unchanged in meaning (``int(time.time()) // 86400``).
NUMERIC_CONVERSIONS = {"int", "float", "round", "floor", "ceil", "trunc"}

ORM_WRITES = {
    "save",
    "delete",
    "create",
    "bulk_create",
    "bulk_update",
    "update",
    "get_or_create",
    "update_or_create",
}
# Django's async ORM (``await obj.asave()``, ``await M.objects.acreate()``), what a coroutine
# handler writes with.
ASYNC_ORM_WRITES = {f"a{name}" for name in ORM_WRITES}
# Writes that only a related manager has (``invoice.tags.add(tag)``).
RELATED_WRITES = {
    prefix + name for prefix in ("", "a") for name in ("add", "remove", "clear", "set")
}
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
SQL_CALLS = {"cursor", "execute", "executemany", "raw"}
# ``.execute()`` is SQL on a cursor or connection; on anything else (a command bus) it is not.
EXECUTE_CALLS = {"execute", "executemany", "executescript"}
DATABASE_NAMES = {"conn", "cur", "db"}
DATABASE_CONNECTS = {
    "psycopg.connect",
    "psycopg.Connection.connect",
    "psycopg.AsyncConnection.connect",
    "psycopg2.connect",
    "sqlite3.connect",
    "asyncpg.connect",
}
# Modules whose calls go over HTTP (``urllib.parse`` and ``http.HTTPStatus`` do not).
HTTP_MODULES = {"requests", "httpx", "urllib3", "aiohttp", "urllib.request", "http.client"}
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


@dataclass(frozen=True)
class Finding:
    """One forbidden thing at ``line``; ``helper`` names the module function it is in when the
    handler reaches it through a call."""

    line: int
    what: str
    kind: str = ""
    helper: str = ""

    def __str__(self) -> str:
        where = f"line {self.line} in {self.helper}()" if self.helper else f"line {self.line}"
        return f"{where}: {self.what}"


@dataclass
class _Names:
    """What names in the scanned code stand for: imports (local name to dotted name) and
    variables bound to querysets, database cursors, HTTP clients or ``time.time()``."""

    imports: dict[str, str] = field(default_factory=dict)
    querysets: set[str] = field(default_factory=set)
    cursors: set[str] = field(default_factory=set)
    clients: set[str] = field(default_factory=set)
    clock_reads: set[str] = field(default_factory=set)
    related: frozenset[str] = field(default_factory=frozenset)

    def copy(self) -> _Names:
        return _Names(
            dict(self.imports),
            set(self.querysets),
            set(self.cursors),
            set(self.clients),
            set(self.clock_reads),
            self.related,
        )


def _related_accessors() -> frozenset[str]:
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


def _receiver(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


def _root(node: ast.expr) -> str:
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else ""


def _dotted(node: ast.expr, names: _Names) -> str:
    """The dotted name ``node`` spells, its first name read through the imports
    (``C`` after ``from httpx import Client as C`` is ``httpx.Client``); ``""`` if none."""
    if isinstance(node, ast.Name):
        return names.imports.get(node.id, node.id)
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value, names)
        return f"{base}.{node.attr}" if base else ""
    return ""


def _last(dotted: str) -> str:
    return dotted.rsplit(".", 1)[-1]


def _in_modules(dotted: str, modules: set[str]) -> bool:
    return any(dotted == m or dotted.startswith(f"{m}.") for m in modules)


def _unawaited(node: ast.expr) -> ast.expr:
    return node.value if isinstance(node, ast.Await) else node


def _is_related_manager(node: ast.expr, names: _Names) -> bool:
    return isinstance(node, ast.Attribute) and (
        node.attr.endswith("_set") or node.attr in names.related
    )


def _is_queryset(node: ast.expr, names: _Names) -> bool:
    """Whether ``node`` is a manager or queryset: ``M.objects``, a related manager, a variable
    bound to one, or a chain of queryset methods on any of these."""
    if isinstance(node, ast.Name):
        return node.id in names.querysets
    if isinstance(node, ast.Attribute):
        return node.attr in MANAGERS or _is_related_manager(node, names)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        return node.func.attr in QUERYSET_METHODS and _is_queryset(node.func.value, names)
    return False


def _is_database(node: ast.expr, names: _Names) -> bool:
    """Whether ``node`` is a database cursor or connection (what ``.execute()`` runs SQL on)."""
    if isinstance(node, ast.Call):
        return _opens_database(node, names)
    if isinstance(node, ast.Subscript):
        return _last(_dotted(node.value, names)) == "connections"
    name = _last(_dotted(node, names))
    return (
        name in names.cursors
        or name in DATABASE_NAMES
        or "cursor" in name.lower()
        or "connection" in name.lower()
    )


def _opens_database(node: ast.expr, names: _Names) -> bool:
    if not isinstance(node, ast.Call):
        return isinstance(node, ast.Subscript) and _is_database(node, names)
    if isinstance(node.func, ast.Attribute) and node.func.attr == "cursor":
        return True
    return _dotted(node.func, names) in DATABASE_CONNECTS


def _opens_client(node: ast.expr, names: _Names) -> bool:
    return isinstance(node, ast.Call) and _dotted(node.func, names) in HTTP_CLIENTS


def _reads_clock(node: ast.expr, names: _Names) -> bool:
    """Whether ``node`` is ``time.time()`` or a name bound to it."""
    if isinstance(node, ast.Name):
        return isinstance(node.ctx, ast.Load) and node.id in names.clock_reads
    return isinstance(node, ast.Call) and _dotted(node.func, names) in CLOCK_READS


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


def _names_in(nodes: list[ast.AST], outer: _Names) -> _Names:
    """``outer`` with the imports and bindings found among ``nodes`` added. A binding may rest
    on another (``qs = M.objects.all()``, then ``due = qs.filter(...)``): repeat until stable."""
    names = outer.copy()
    names.imports.update(imports_in(nodes))
    bindings = [(name, _unawaited(value)) for name, value in _bindings(nodes)]
    kinds = (
        (names.querysets, _is_queryset),
        (names.cursors, _opens_database),
        (names.clients, _opens_client),
        (names.clock_reads, _reads_clock),
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


def _names_of(tree: ast.AST, outer: _Names | None = None) -> _Names:
    if outer is None:
        outer = _Names(related=_related_accessors())
    return _names_in(list(ast.walk(tree)), outer)


def _module_names(module_tree: ast.Module) -> _Names:
    """What names mean at a module's top level, for the functions in it."""
    return _names_in(list(_outside_functions(module_tree)), _Names(related=_related_accessors()))


def _has_zone(call: ast.Call, position: int) -> bool:
    """Whether ``call`` passes a zone (not ``None``) at ``position`` or as ``tz=``/``tzinfo=``."""
    given = [k.value for k in call.keywords if k.arg in {"tz", "tzinfo", None}]
    if len(call.args) > position:
        given.append(call.args[position])
    return any(not (isinstance(v, ast.Constant) and v.value is None) for v in given)


def _is_day_constant(node: ast.expr) -> bool:
    """Whether ``node`` is a literal number of seconds of whole hours (3600, 86400, 24 * 3600)."""

    def value(n: ast.expr) -> float | None:
        if isinstance(n, ast.Constant) and isinstance(n.value, int | float):
            return float(n.value)
        if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mult):
            left, right = value(n.left), value(n.right)
            return None if left is None or right is None else left * right
        return None

    seconds = value(node)
    return seconds is not None and seconds >= 3600 and seconds % 3600 == 0


def _dated_clock_read(node: ast.expr, parents: dict[ast.AST, ast.AST], names: _Names) -> bool:
    """Whether the clock read ``node`` (``time.time()`` or a name bound to it) becomes a date:
    given to ``datetime()``/``date()``/``timedelta()`` or cut into days or hours (``// 86400``).
    A difference (``time.time() - started``) is a duration, which is fine."""
    child: ast.AST = node
    parent = parents.get(child)
    while parent is not None:
        if isinstance(parent, ast.BinOp):
            if isinstance(parent.op, ast.Sub):
                return False
            if isinstance(parent.op, ast.FloorDiv | ast.Mod) and parent.left is child:
                return _is_day_constant(parent.right)
        elif isinstance(parent, ast.Call):
            called = _last(_dotted(parent.func, names))
            if child is parent.func or called not in NUMERIC_CONVERSIONS:
                return child is not parent.func and called in CALENDAR_BUILDERS
        elif not isinstance(parent, ast.keyword | ast.UnaryOp):
            return False
        child, parent = parent, parents.get(parent)
    return False


def _local_time_reads(tree: ast.AST, names: _Names) -> list[Finding]:
    found = []
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}

    def add(node: ast.expr, what: str) -> None:
        found.append(Finding(node.lineno, what, LOCAL_TIME))

    for node in ast.walk(tree):
        if not isinstance(node, ast.expr):
            continue
        if isinstance(node, ast.Attribute):
            if node.attr == "TIME_ZONE":
                add(node, "reads TIME_ZONE")
            elif _dotted(node, names) in LOCAL_ZONE_ATTRIBUTES:
                add(node, f"reads {_dotted(node, names)}")
        if _reads_clock(node, names) and _dated_clock_read(node, parents, names):
            add(node, "makes a date from time.time() (the host clock: use run.scheduled_at)")
        if not isinstance(node, ast.Call):
            continue
        dotted = _dotted(node.func, names)
        if "." in dotted:
            receiver, attribute = dotted.split(".")[-2:]
        elif isinstance(node.func, ast.Attribute):
            receiver, attribute = _receiver(node.func.value), node.func.attr
        else:
            continue
        if (receiver, attribute) in LOCAL_TIME_CALLS:
            add(node, f"{receiver}.{attribute}()")
        elif (receiver, attribute) == ("date", "fromtimestamp"):
            add(node, "date.fromtimestamp() (a machine-local date)")
        elif attribute == "astimezone" and not _has_zone(node, 0):
            add(node, "astimezone() without a zone (converts to machine-local time)")
        elif (
            receiver in {"datetime", "date"}
            and attribute in {"now", "fromtimestamp"}
            and not _has_zone(node, 1 if attribute == "fromtimestamp" else 0)
        ):
            add(node, f"naive {receiver}.{attribute}()")
    return found


def local_time_reads(source: str) -> list[Finding]:
    """Each machine-local or naive time read in ``source``: ``datetime.now()`` without a zone,
    ``date.today()``, ``.astimezone()`` without a zone, a date made from ``time.time()``..."""
    tree = ast.parse(source)
    return _sorted(_local_time_reads(tree, _names_of(tree)))


def _storage_write(target: ast.expr, names: _Names) -> tuple[str, str] | None:
    """The kind and description of the storage write ``target`` names (``obj.save``,
    ``M.objects.filter(...).update``, ``cursor.execute``), or None when it names none."""
    if not isinstance(target, ast.Attribute):
        return None
    name, receiver = target.attr, target.value
    plain = name[1:] if name in ASYNC_ORM_WRITES else name
    if (
        plain in {"save", "delete"}
        or (plain in ORM_WRITES and _is_queryset(receiver, names))
        or (name in RELATED_WRITES and _is_related_manager(receiver, names))
    ):
        return STORAGE, f"writes a model directly (.{name}())"
    if name in {"cursor", "raw"} or (name in EXECUTE_CALLS and _is_database(receiver, names)):
        return SQL, f"runs SQL directly (.{name}())"
    return None


def _storage_writes(tree: ast.AST, names: _Names) -> list[Finding]:
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        called = _dotted(node.func, names)
        if _last(called) == "RawSQL":
            found.append(Finding(node.lineno, "runs SQL directly (RawSQL())", SQL))
        elif called in DATABASE_CONNECTS:
            found.append(Finding(node.lineno, f"runs SQL directly ({called}())", SQL))
        write = _storage_write(node.func, names)
        # ``image.save(buffer)``, ``cache.delete(key)``: a model's save() and delete() take
        # no positional arguments.
        if write and isinstance(node.func, ast.Attribute) and node.args:
            plain = node.func.attr.removeprefix("a")
            if plain in {"save", "delete"} and not _is_queryset(node.func.value, names):
                write = None
        if write:
            found.append(Finding(node.lineno, write[1], write[0]))
        for arg in node.args:
            passed = _storage_write(arg, names)
            if passed:
                what = f"{passed[1]} through {_receiver(node.func)}()"
                found.append(Finding(node.lineno, what, passed[0]))
    return found


def storage_writes(source: str) -> list[Finding]:
    """Direct model writes (``.save()``, ``.objects.create()``, a queryset's ``.update()``
    through a chain or a variable, their async forms ...) and SQL (cursors, ``.raw()``,
    ``RawSQL``), whether called or passed to be called (``sync_to_async(M.objects.create)``)."""
    tree = ast.parse(source)
    return _sorted(_storage_writes(tree, _names_of(tree)))


def _http_calls(tree: ast.AST, names: _Names) -> list[Finding]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if _in_modules(alias.name, HTTP_MODULES):
                    found.append(Finding(node.lineno, f"imports {alias.name}", HTTP))
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            imported = [f"{node.module}.{alias.name}" for alias in node.names]
            if any(_in_modules(i, HTTP_MODULES) or i in HTTP_CLIENTS for i in imported):
                found.append(Finding(node.lineno, f"imports from {node.module}", HTTP))
        elif isinstance(node, ast.Call):
            called = _dotted(node.func, names)
            if called in HTTP_CLIENTS:
                found.append(Finding(node.lineno, f"opens an HTTP client ({called}())", HTTP))
            elif _in_modules(called, HTTP_MODULES):
                what = f"calls {called.split('.')[0]}.{_last(called)}()"
                found.append(Finding(node.lineno, what, HTTP))
            elif isinstance(node.func, ast.Attribute) and _root(node.func) in names.clients:
                what = f"calls an HTTP client ({_root(node.func)}.{node.func.attr}())"
                found.append(Finding(node.lineno, what, HTTP))
    return found


def http_calls(source: str) -> list[Finding]:
    """Imports of HTTP clients and calls through them, Django's test clients included."""
    tree = ast.parse(source)
    return _sorted(_http_calls(tree, _names_of(tree)))


RULES: tuple[Callable[[ast.AST, _Names], list[Finding]], ...] = (
    _storage_writes,
    _http_calls,
    _local_time_reads,
)


def _sorted(found: list[Finding]) -> list[Finding]:
    return sorted(found, key=lambda f: f.line)


def _findings(tree: ast.AST, outer: _Names) -> list[Finding]:
    names = _names_of(tree, outer)
    return _sorted([f for rule in RULES for f in rule(tree, names)])


def _module_tree(func: Any) -> ast.Module | None:
    try:
        return ast.parse(inspect.getsource(inspect.getmodule(func)))  # type: ignore[arg-type]
    except (OSError, TypeError, SyntaxError):
        return None


def _helpers(
    tree: ast.AST, module_tree: ast.Module, own: str
) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    """The top-level functions of the module that ``tree`` calls by bare name (``_pay()``) or
    hands to a call (``sync_to_async(_pay)``, ``run.once("pay", _pay)``)."""
    used = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            for part in [node.func, *node.args, *(k.value for k in node.keywords)]:
                if isinstance(part, ast.Name):
                    used.add(part.id)
    return [
        node
        for node in module_tree.body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name in used - {own}
    ]


@dataclass(frozen=True)
class HandlerCode:
    """A handler's parsed source and the same-module helpers it calls (one level down)."""

    tree: ast.AST
    offset: int  # add to the tree's line numbers for the module file's
    helpers: list[ast.FunctionDef | ast.AsyncFunctionDef]
    module_tree: ast.Module | None


def handler_code(func: Any) -> HandlerCode | None:
    """The code a handler runs of its own: its source and the top-level functions of its
    module it calls or hands on; None if its source cannot be read."""
    func = inspect.unwrap(func)
    try:
        lines, first = inspect.getsourcelines(func)
        tree = ast.parse(textwrap.dedent("".join(lines)))
    except (OSError, TypeError, SyntaxError):
        return None
    module_tree = _module_tree(func)
    helpers = _helpers(tree, module_tree, getattr(func, "__name__", "")) if module_tree else []
    return HandlerCode(tree, max(first - 1, 0), helpers, module_tree)


def handler_findings(func: Any) -> list[Finding] | None:
    """What a handler does that the specification forbids, by every rule: in its own source
    and in the functions of its module it calls (one level down, each finding naming the
    helper). Line numbers are the module file's. None if its source cannot be read."""
    code = handler_code(func)
    if code is None:
        return None
    module_tree = code.module_tree
    outer = _module_names(module_tree) if module_tree else _Names(related=_related_accessors())
    found = [replace(f, line=f.line + code.offset) for f in _findings(code.tree, outer)]
    for helper in code.helpers:
        found += [replace(f, helper=helper.name) for f in _findings(helper, outer)]
    return found
