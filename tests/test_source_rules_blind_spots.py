"""Blind spots a review found in the handler scanner, one test each.

Each test fails if the scanner goes blind to its pattern again, or starts reporting what a
handler may do. The handlers below are never registered with ``@job``: only their source is
read.
"""

from __future__ import annotations

import functools
import importlib.util
import inspect
import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import django.test
import pytest
from asgiref.sync import sync_to_async
from django.utils import timezone

from django_jobs import Run
from django_jobs.source_rules import (
    HTTP,
    LOCAL_TIME,
    SQL,
    STORAGE,
    Finding,
    handler_findings,
    http_calls,
    local_time_reads,
    storage_writes,
)
from example_project.billing import statements
from example_project.billing.models import Statement
from example_project.billing.statements import send_for


def line_of(func: Callable[..., Any], text: str) -> int:
    """The line of ``func``'s module that holds ``text``, inside ``func``."""
    lines, first = inspect.getsourcelines(func)
    (offset,) = [i for i, line in enumerate(lines) if text in line]
    return first + offset


def every_rule(source: str) -> list[Finding]:
    return storage_writes(source) + http_calls(source) + local_time_reads(source)


def described(findings: list[Finding] | None) -> list[str]:
    assert findings is not None
    return [str(f) for f in findings]


# Handlers with one blind spot each ------------------------------------------------------


def writes_through_a_chain(run: Run) -> None:
    Statement.objects.filter(tenant=run.tenant).update(tenant="")


def writes_through_a_variable(run: Run) -> None:
    qs = Statement.objects.all()
    qs.update(tenant=run.tenant)


def posts_through_the_test_client(run: Run) -> None:
    django.test.Client().post("/pay", {"key": run.occurrence_key})


def converts_to_local_time(run: Run) -> None:
    day = timezone.now().astimezone().date()
    statements.send_for(day, idempotency_key=run.occurrence_key)


def _pay(run: Run) -> None:
    Statement.objects.filter(idempotency_key=run.occurrence_key).update(tenant=run.tenant)


def pays_through_a_helper(run: Run) -> None:
    _pay(run)


async def pays_through_a_helper_on_the_run_thread(run: Run) -> None:
    await sync_to_async(_pay)(run)


def dispatches_an_imported_command(run: Run) -> None:
    send_for(run.scheduled_at.date(), idempotency_key=run.occurrence_key)


# A queryset write through a chain, and through a variable -------------------------------


def test_a_queryset_write_through_a_chain() -> None:
    line = line_of(writes_through_a_chain, ".update(")
    assert described(handler_findings(writes_through_a_chain)) == [
        f"line {line}: writes a model directly (.update())"
    ]
    assert described(storage_writes("Invoice.objects.filter(due=True).update(paid=True)")) == [
        "line 1: writes a model directly (.update())"
    ]


def test_a_queryset_write_through_a_variable() -> None:
    line = line_of(writes_through_a_variable, "qs.update(")
    assert described(handler_findings(writes_through_a_variable)) == [
        f"line {line}: writes a model directly (.update())"
    ]
    source = "qs = Invoice.objects.all()\ndue = qs.filter(due=True)\ndue.update(paid=True)"
    assert described(storage_writes(source)) == ["line 3: writes a model directly (.update())"]


WRITES = [
    "update",
    "delete",
    "bulk_create",
    "bulk_update",
    "get_or_create",
    "update_or_create",
    "create",
]
ROOTS = [
    "Invoice.objects",
    "Invoice._default_manager",
    "Invoice.objects.filter(due=True).exclude(paid=True).select_for_update()",
    "customer.invoice_set",  # a reverse foreign key's default accessor
    "schedule.occurrences",  # a related_name of an installed model (django_jobs.Occurrence)
    "unpaid",  # a variable bound to a queryset
]


@pytest.mark.parametrize("root", ROOTS)
@pytest.mark.parametrize("method", WRITES + [f"a{m}" for m in WRITES])
def test_every_queryset_write_through_any_root(root: str, method: str) -> None:
    source = f"unpaid = Invoice.objects.filter(paid=False)\nawait {root}.{method}(x)"
    assert described(storage_writes(source)) == [f"line 2: writes a model directly (.{method}())"]


@pytest.mark.parametrize("call", ["save()", "asave()", "delete()", "adelete()"])
def test_saving_or_deleting_an_instance(call: str) -> None:
    source = f"invoice = Invoice.objects.get(pk=1)\nawait invoice.{call}"
    assert described(storage_writes(source)) == [f"line 2: writes a model directly (.{call})"]


def test_a_related_manager_write_that_only_related_managers_have() -> None:
    source = "invoice.tag_set.add(tag)\nuser.groups.clear()"
    assert [f.kind for f in storage_writes(source)] == [STORAGE, STORAGE]


# Raw SQL -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "what"),
    [
        ("connection.cursor()", "runs SQL directly (.cursor())"),
        ("c = connection.cursor()\nc.execute('DELETE FROM t')", "runs SQL directly (.execute())"),
        ("connection.execute('DELETE FROM t')", "runs SQL directly (.execute())"),
        ("connections['default'].cursor()", "runs SQL directly (.cursor())"),
        ("Invoice.objects.raw('SELECT * FROM t')", "runs SQL directly (.raw())"),
        ("Invoice.objects.annotate(n=RawSQL('SELECT 1', ()))", "runs SQL directly (RawSQL())"),
        ("import psycopg\npsycopg.connect('')", "runs SQL directly (psycopg.connect())"),
    ],
)
def test_raw_sql(source: str, what: str) -> None:
    findings = storage_writes(source)
    assert what in [f.what for f in findings]
    assert {f.kind for f in findings} == {SQL}


# HTTP through any client ---------------------------------------------------------------


def test_http_through_the_django_test_client() -> None:
    line = line_of(posts_through_the_test_client, "Client()")
    assert described(handler_findings(posts_through_the_test_client)) == [
        f"line {line}: opens an HTTP client (django.test.Client())"
    ]


@pytest.mark.parametrize(
    ("source", "what"),
    [
        ("from django.test import Client\nClient().post('/pay')", "(django.test.Client())"),
        ("from django import test\ntest.AsyncClient().post('/pay')", "(django.test.AsyncClient())"),
        ("import requests\nrequests.Session().get(url)", "(requests.Session())"),
        ("import httpx\nhttpx.Client().post(url)", "(httpx.Client())"),
        ("from httpx import Client as C\nC().post(url)", "(httpx.Client())"),
        ("import httpx\nasync with httpx.AsyncClient() as c: ...", "(httpx.AsyncClient())"),
        ("import urllib.request\nurllib.request.urlopen(url)", "calls urllib.urlopen()"),
        ("from urllib.request import urlopen as get\nget(url)", "calls urllib.urlopen()"),
        (
            "import http.client\nhttp.client.HTTPSConnection(host)",
            "(http.client.HTTPSConnection())",
        ),
        ("import aiohttp\naiohttp.ClientSession()", "(aiohttp.ClientSession())"),
        ("import requests as r\ns = r.Session()\ns.post(url)", "calls an HTTP client (s.post())"),
    ],
)
def test_http_through_any_client(source: str, what: str) -> None:
    found = [f for f in http_calls(source) if f.line >= 2]
    assert any(what in f.what for f in found), described(found)
    assert {f.kind for f in found} == {HTTP}


def test_a_client_imported_under_an_alias_by_the_handlers_module(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The handler's source does not show the import: the module's does."""
    httpx = types.ModuleType("httpx")
    httpx.__dict__["Client"] = object
    monkeypatch.setitem(sys.modules, "httpx", httpx)
    path = tmp_path / "partner_jobs.py"
    path.write_text(
        "from httpx import Client as C\n"
        "\n"
        "\n"
        "def pays(run):\n"
        '    C().post("https://partner.example/pay")\n'
    )
    spec = importlib.util.spec_from_file_location("partner_jobs", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "partner_jobs", module)
    spec.loader.exec_module(module)
    assert described(handler_findings(module.pays)) == [
        "line 5: opens an HTTP client (httpx.Client())"
    ]


# Machine-local time --------------------------------------------------------------------


def test_astimezone_without_a_zone_is_machine_local_time() -> None:
    line = line_of(converts_to_local_time, ".astimezone()")
    assert described(handler_findings(converts_to_local_time)) == [
        f"line {line}: astimezone() without a zone (converts to machine-local time)"
    ]
    assert [f.kind for f in local_time_reads("datetime.now(timezone.utc).astimezone()")] == [
        LOCAL_TIME
    ]
    assert len(local_time_reads("x.astimezone(None)")) == 1


@pytest.mark.parametrize(
    "source",
    [
        "datetime.fromtimestamp(time.time())",
        "date.fromtimestamp(time.time())",
        "from time import time\nday = date.fromtimestamp(time())",
        "day = datetime(1970, 1, 1) + timedelta(seconds=time.time())",
        "day_number = int(time.time()) // 86400",
        "hour = time.time() % (24 * 60 * 60)",
        "now = time.time()\nstart = timedelta(seconds=now)",
        "offset = timedelta(seconds=time.timezone)",
    ],
)
def test_dates_made_from_time_time(source: str) -> None:
    assert [f.kind for f in local_time_reads(source)] == [LOCAL_TIME]


@pytest.mark.parametrize(
    "source",
    [
        "started = time.time()\nwork()\nlog.info('took', time.time() - started)",
        "deadline = time.time() + 30",
        "took = timedelta(seconds=time.time() - started)",
        "deadline = time.monotonic() + 30\nwhile time.monotonic() < deadline: ...",
        "now = datetime.fromtimestamp(time.time(), tz=UTC)",
    ],
)
def test_time_time_for_durations_is_fine(source: str) -> None:
    assert local_time_reads(source) == []


# Helpers beside the handler ------------------------------------------------------------


def test_a_helper_the_handler_calls_is_read_too() -> None:
    line = line_of(_pay, ".update(")
    expected = [f"line {line} in _pay(): writes a model directly (.update())"]
    assert described(handler_findings(pays_through_a_helper)) == expected
    assert described(handler_findings(pays_through_a_helper_on_the_run_thread)) == expected
    (finding,) = handler_findings(pays_through_a_helper) or []
    assert (finding.helper, finding.kind) == ("_pay", STORAGE)


def test_commands_of_other_modules_are_not_read() -> None:
    # send_for writes (get_or_create): that is what a command is for.
    assert handler_findings(dispatches_an_imported_command) == []


def test_a_wrapped_handler_is_read_through_its_wrapper() -> None:
    @functools.wraps(writes_through_a_chain)
    def wrapper(run: Run) -> None:
        writes_through_a_chain(run)

    assert handler_findings(wrapper) == handler_findings(writes_through_a_chain)


def test_a_handler_without_readable_source_gives_none() -> None:
    assert handler_findings(len) is None
    assert handler_findings(functools.partial(print, "x")) is None


# What a handler may do -----------------------------------------------------------------


@pytest.mark.parametrize(
    "source",
    [
        "options = {}\noptions.update(tenant='a')",
        "seen = set()\nseen.update(keys)",
        "keys = [2, 1]\nkeys.sort()",
        "cache.set('k', 1, 60)\ncache.delete('k')",
        "run.once('notify', lambda: statements.notify_accountant(at, idempotency_key=k))",
        "with run.atomic():\n    statements.send_for(day, idempotency_key=k)",
        "billing.commands.pay(invoice_id, idempotency_key=k)",
        "bus.execute(PayInvoice(k))",
        "logger.info('sent %s', k)",
        "now = datetime.now(UTC)",
        "now = datetime.now(tz=UTC)",
        "now = timezone.now()",
        "day = run.scheduled_at.astimezone(ZoneInfo('Europe/Berlin')).date()",
        "local = x.astimezone(tz)",
        "totals = Invoice.objects.aggregate(n=Count('id'))\ntotals.update(extra)",
        "n = Invoice.objects.filter(paid=False).count()",
        "image.save(buffer)",
        "import urllib.parse\nurllib.parse.urlencode(q)",
        "from http import HTTPStatus\nok = HTTPStatus.OK",
        "from django.test import RequestFactory\nRequestFactory().get('/')",
    ],
)
def test_what_a_handler_may_do_is_not_reported(source: str) -> None:
    assert every_rule(source) == []
