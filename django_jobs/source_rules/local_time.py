"""The local-time rule: reads of the host's local or naive time, which a job must not make
(its instants come from ``run.scheduled_at``), nor django_jobs itself."""

from __future__ import annotations

import ast

from .findings import LOCAL_TIME, Finding, by_line
from .names import Names, dotted_name, last_part, names_of, reads_clock, receiver_name

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
# Calls that turn a number of seconds into a date, a time or a timedelta.
CALENDAR_BUILDERS = {"datetime", "date", "timedelta"}
# Calls a number passes through unchanged in meaning (``int(time.time()) // 86400``).
NUMERIC_CONVERSIONS = {"int", "float", "round", "floor", "ceil", "trunc"}


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


def _dated_clock_read(node: ast.expr, parents: dict[ast.AST, ast.AST], names: Names) -> bool:
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
            called = last_part(dotted_name(parent.func, names))
            if child is parent.func or called not in NUMERIC_CONVERSIONS:
                return child is not parent.func and called in CALENDAR_BUILDERS
        elif not isinstance(parent, ast.keyword | ast.UnaryOp):
            return False
        child, parent = parent, parents.get(parent)
    return False


def local_time_findings(tree: ast.AST, names: Names) -> list[Finding]:
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
            elif dotted_name(node, names) in LOCAL_ZONE_ATTRIBUTES:
                add(node, f"reads {dotted_name(node, names)}")
        if reads_clock(node, names) and _dated_clock_read(node, parents, names):
            add(node, "makes a date from time.time() (the host clock: use run.scheduled_at)")
        if not isinstance(node, ast.Call):
            continue
        dotted = dotted_name(node.func, names)
        if "." in dotted:
            receiver, attribute = dotted.split(".")[-2:]
        elif isinstance(node.func, ast.Attribute):
            receiver, attribute = receiver_name(node.func.value), node.func.attr
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
    return by_line(local_time_findings(tree, names_of(tree)))
