"""#33 finding 7: secret shapes with no name (provider tokens and keys) are hidden in every
channel a job's error reaches: the stored error, the worker's log line, the ``occurrence_dead``
event and the dead-letter e-mail the example project sends from it.

The corpus (tests/secret_corpus.py) holds more than 40 shapes; on 8f518d8, 29 of them came
through redaction whole (Google, Slack webhooks and app tokens, OpenAI project keys, Anthropic,
SendGrid, npm, PyPI, Stripe restricted keys and webhook secrets, Azure, unnamed AWS secrets,
...). Each shape is checked alone (a unit check) and all of them together through one real
dead letter, so the end-to-end run stays one run.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.conf import settings
from django.core import mail
from django.test import override_settings
from structlog.testing import capture_logs

from django_jobs import signals
from django_jobs.models import Occurrence, OccurrenceState
from django_jobs.registry import Registry
from django_jobs.safe_error import REDACTED, loggable, redact, shown_json
from django_jobs.signals import OccurrenceEvent

from .factories import T0, ScheduleFactory
from .secret_corpus import CORPUS, Shape
from .storeutil import plan

EXAMPLE_HOOK = "example_project.billing.alerts.email_record_owner"
END = "end-of-the-corpus"
# Every shape, one per line, in one message: what a job that logs a config dump raises.
MESSAGE = "\n".join(shape.text for shape in CORPUS) + "\n" + END


def leaked(shape: Shape, out: str) -> list[str]:
    """The secret, or any 10 characters of it that its carrier text does not hold, in ``out``."""
    carrier = shape.text.replace(shape.secret, "\0")
    pieces = {shape.secret} | {
        shape.secret[i : i + 10]
        for i in range(len(shape.secret) - 9)
        if shape.secret[i : i + 10] not in carrier
    }
    return sorted(piece for piece in pieces if piece in out)


def test_the_corpus_holds_at_least_40_shapes() -> None:
    assert len(CORPUS) >= 40


@pytest.mark.parametrize("shape", CORPUS, ids=[s.name for s in CORPUS])
def test_a_secret_shape_is_redacted(shape: Shape) -> None:
    out = redact(shape.text)
    assert leaked(shape, out) == []
    assert REDACTED in out


@pytest.mark.parametrize("shape", CORPUS, ids=[s.name for s in CORPUS])
def test_a_secret_shape_in_arguments_is_redacted_as_the_pages_show_them(shape: Shape) -> None:
    out = shown_json({"job": "billing.sync", "options": [{"note": shape.text}]})
    assert leaked(shape, out) == []


def test_every_secret_in_one_log_text_is_redacted() -> None:
    out = loggable(MESSAGE, max_chars=100_000)
    assert [s.name for s in CORPUS if leaked(s, out)] == []
    assert out.endswith(END)


def test_shapes_come_from_detect_secrets_and_ours() -> None:
    from django_jobs.secret_shapes import shapes

    sources = {shape.source for shape in shapes()}
    assert {"detect-secrets SlackDetector", "detect-secrets AWSKeyDetector"} <= sources
    assert "django_jobs" in sources


def test_what_is_not_secret_is_left_alone() -> None:
    sentences = [
        "GET https://api.example.com/v1/objects?page=2&sort=name returned 503",
        'duplicate key value violates unique constraint "billing_invoice_pkey"',
        "sk-learn failed; the ask-me button; desk-top; Skipped 3 of 40 rows",
        "AccountName=acme;EndpointSuffix=core.windows.net",
        "commit 3f1c2b9a8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a is not on main",
    ]
    assert [redact(s) for s in sentences] == sentences


# Hostile messages: each shape's markers repeated with near misses, so every shape runs.
NEAR_MISSES = [
    "AKIA" + "A" * 15 + " ",
    "AKIAAAAAAAAAAAAAAAAA" + "a/" * 30,
    "a" * 39 + " AKIA",
    "sk-a" * 10,
    "sk-" + "a" * 19 + "T3BlbkFJ",
    "eyJ" + "a" * 50,
    "eyJ",
    "sk-ask-a",
    "-sk-" + "a" * 19 + "T3BlbkFJ",
    "-eyJa",
    "eyJa.",
    "glpat-" + "a" * 49,
    "xoxb-1-" * 5,
    "aws_secret_access_key " + "a" * 39 + " ",
    "https://hooks.slack.com/services/T",
    "?key=&key=",
    "pypi-" * 5,
    "M" + "a" * 30 + ".",
    "123456789:" + "a" * 30,
    "a" * 31 + "-us",
    "glpat-" * 4,
    "AccountKey=;",
    "-----BEGIN RSA PRIVATE KEY-----",
]


# ... and every corpus secret cut in half, repeated.
HALVES = sorted({s.secret[: max(4, len(s.secret) // 2)] for s in CORPUS})


@pytest.mark.parametrize("filler", NEAR_MISSES + HALVES)
def test_a_hostile_64_kib_message_is_redacted_in_bounded_time(filler: str) -> None:
    secret = CORPUS[0]
    text = (secret.text + " " + filler * (64 * 1024 // len(filler)))[: 64 * 1024]
    redact("warm up")  # detect-secrets is imported and every shape compiled on first use
    started = time.thread_time()
    out = redact(text)
    elapsed = time.thread_time() - started
    assert secret.secret not in out
    # Linear patterns take milliseconds here; backtracking would take minutes. (CPU time of
    # this thread: a loaded machine's wait for a core does not count.)
    assert elapsed < 2.0, f"{elapsed:.2f}s to redact 64 KiB of {filler!r}"


# --- one dead letter carrying every shape: stored, logged, sent, mailed ---------------------


@pytest.fixture
def mailed_on_dead() -> Iterator[None]:
    """Long stored errors (the whole corpus fits), and the example project's dead-letter
    e-mail connected as ``AppConfig.ready`` connects ON_DEAD."""
    jobs_settings = {
        **settings.DJANGO_JOBS,
        "ON_DEAD": EXAMPLE_HOOK,
        "ERROR_MESSAGE_MAX_CHARS": 100_000,
    }
    with override_settings(DJANGO_JOBS=jobs_settings):
        assert signals.connect_on_dead()
        yield
    signals.connect_on_dead()  # the suite's settings name none: disconnected


@pytest.mark.django_db(transaction=True)
def test_no_secret_shape_reaches_the_stored_error_log_event_or_email(
    clock: Any, mailed_on_dead: None, inline_worker
) -> None:
    jobs = Registry()

    def leaky(run: object) -> None:
        raise RuntimeError(MESSAGE)

    jobs.register("tests.leaky", leaky)
    schedule = ScheduleFactory.create(
        tenant="acme",
        key="acme.leaky",
        job="tests.leaky",
        max_attempts=1,
        record_owner="billing-lead@example.com",
    )
    plan(schedule, T0, now=T0)
    events: list[OccurrenceEvent] = []

    def receiver(sender: type, *, event: OccurrenceEvent, **kwargs: Any) -> None:
        events.append(event)

    signals.occurrence_dead.connect(receiver, weak=False)
    clock.set(T0)
    worker = inline_worker(jobs)
    try:
        with capture_logs() as logs:
            assert list(worker.run_pass().outcomes.elements()) == ["dead"]
    finally:
        worker.close()
        signals.occurrence_dead.disconnect(receiver)

    occurrence = Occurrence.objects.get()
    assert occurrence.state == OccurrenceState.DEAD
    (dead_line,) = [line for line in logs if line["event"] == "occurrence.dead"]
    (event,) = events
    (email,) = mail.outbox
    channels = {
        "stored error": occurrence.last_error_message,
        "log line": dead_line["error"],
        "occurrence_dead event": event.error,
        "dead-letter e-mail": email.subject + "\n" + email.body,
    }
    for channel, text in channels.items():
        # The whole message arrived (nothing was cut before the last shape) ...
        assert END in text, channel
        # ... and none of its secrets did.
        assert [s.name for s in CORPUS if leaked(s, text)] == [], channel
