"""Issue #33, info: the runbook export carries no owner text as markup.

``manage.py jobs runbooks`` writes markdown, read where markdown is rendered (a wiki, a
repository). An owner (or a zone reason) holding ``<script>`` or a ``[link](javascript:...)``
went into it as it was; now every text of a record is escaped and every command is a code
span no backtick inside can close. The admin's own page shows the same owner as text.
"""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from django_jobs import cron, services
from django_jobs.models import Runbook, Schedule

from .factories import T0, declaration

pytestmark = pytest.mark.django_db

SCRIPT = "<script>alert('owner')</script>"
LINK = "[click here](javascript:alert(1))"


@pytest.fixture
def hostile(root) -> Schedule:
    """A run-time schedule whose owners and zone reason are markup, written through the
    service (which accepts any printable owner text)."""
    timing = cron(
        "0 9 * * *",
        zone="America/New_York",
        skipped="skip",
        repeated="first",
        reason=f"**readers** in New York {SCRIPT}",
    )
    made = declaration(
        "acme.report",
        tenant="acme",
        timing=timing,
        operating_owner=f"ops {SCRIPT}",
        record_owner=f"billing {LINK}",
    )
    return services.upsert_schedule(made, actor=root, reason="signed up", now=T0)


def export() -> str:
    out = StringIO()
    call_command("jobs", "runbooks", "--tenant", "acme", "--actor", "root", stdout=out)
    return out.getvalue()


def test_owner_text_in_the_runbook_export_is_escaped(hostile) -> None:
    text = export()
    assert "<script" not in text
    assert "owned by ops &lt;script&gt;alert('owner')&lt;/script&gt; " in text
    assert r"(record: billing \[click here\](javascript:alert(1)))." in text


def test_a_zone_reason_in_the_runbook_export_is_escaped(hostile) -> None:
    text = export()
    assert r"because \*\*readers\*\* in New York &lt;script&gt;" in text
    assert "runs in America/New_York, because" in text  # a zone name stays readable


def test_runbook_texts_cannot_leave_their_code_span_or_become_tags(hostile) -> None:
    """A Runbook row written behind the services (a restored dump, a hand-made fix)."""
    Runbook.objects.filter(schedule=hostile, kind="inspect").update(
        interface="jobs inspect `</code><script>x()</script>`",
        verification="<img src=x onerror=alert(1)>",
    )
    text = export()
    assert "- Interface: `` jobs inspect `</code><script>x()</script>` ``" in text
    assert "- Verify: &lt;img src=x onerror=alert(1)&gt;" in text
    # Our own placeholders are text, not tags a renderer would swallow.
    assert "--actor &lt;your user&gt;" in text


def test_the_admin_page_shows_the_owner_as_text(root, hostile) -> None:
    client = Client()
    client.force_login(root)
    page = client.get(reverse("admin:django_jobs_schedule_change", args=[hostile.pk]))
    assert page.status_code == 200
    body = page.content.decode()
    assert SCRIPT not in body
    assert "ops &lt;script&gt;alert(&#x27;owner&#x27;)&lt;/script&gt;" in body
