"""The HTTP rule: HTTP clients a handler imports or calls itself, which belong to an approved
port."""

from __future__ import annotations

import ast

from .findings import HTTP, Finding, by_line
from .names import HTTP_CLIENTS, Names, dotted_name, in_modules, last_part, names_of, root_name

# Modules whose calls go over HTTP (``urllib.parse`` and ``http.HTTPStatus`` do not).
HTTP_MODULES = {"requests", "httpx", "urllib3", "aiohttp", "urllib.request", "http.client"}


def http_findings(tree: ast.AST, names: Names) -> list[Finding]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if in_modules(alias.name, HTTP_MODULES):
                    found.append(Finding(node.lineno, f"imports {alias.name}", HTTP))
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            imported = [f"{node.module}.{alias.name}" for alias in node.names]
            if any(in_modules(i, HTTP_MODULES) or i in HTTP_CLIENTS for i in imported):
                found.append(Finding(node.lineno, f"imports from {node.module}", HTTP))
        elif isinstance(node, ast.Call):
            called = dotted_name(node.func, names)
            if called in HTTP_CLIENTS:
                found.append(Finding(node.lineno, f"opens an HTTP client ({called}())", HTTP))
            elif in_modules(called, HTTP_MODULES):
                what = f"calls {called.split('.')[0]}.{last_part(called)}()"
                found.append(Finding(node.lineno, what, HTTP))
            elif isinstance(node.func, ast.Attribute) and root_name(node.func) in names.clients:
                what = f"calls an HTTP client ({root_name(node.func)}.{node.func.attr}())"
                found.append(Finding(node.lineno, what, HTTP))
    return found


def http_calls(source: str) -> list[Finding]:
    """Imports of HTTP clients and calls through them, Django's test clients included."""
    tree = ast.parse(source)
    return by_line(http_findings(tree, names_of(tree)))
