"""Secrets in job errors are redacted before they are stored or logged, then bounded."""

from __future__ import annotations

import re

import pytest
from django.core.checks import run_checks
from django.db import OperationalError
from django.test import override_settings
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from structlog.testing import capture_logs

from django_jobs.conf import get_settings
from django_jobs.exceptions import ConfigurationError
from django_jobs.models import Attempt, Occurrence, OccurrenceState
from django_jobs.registry import Registry
from django_jobs.safe_error import REDACTED, SafeError, loggable, redact
from django_jobs.testing import FakeClock
from django_jobs.worker.outage import OutageLog

from .factories import T0, ScheduleFactory
from .storeutil import plan

DB_PASSWORD = "Tr0ub4dor-and-3"
TOKEN = "ghp_" + "Z9y8X7w6V5u4T3s2R1q0" * 2
AWS_KEY = "AKIAIOSFODNN7EXAMPLE"
JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhbGljZSJ9.c2lnbmF0dXJlLWJ5dGVz"
SECRETS = (DB_PASSWORD, TOKEN, AWS_KEY, JWT, "hunter2-json", "bearer-abcdef123456")

HOSTILE_MESSAGE = (
    f"could not reach postgres://billing:{DB_PASSWORD}@db.internal:5432/prod "
    f"with token={TOKEN} (aws {AWS_KEY}, session {JWT}); "
    '{"password": "hunter2-json"} Authorization: Bearer bearer-abcdef123456'
)


class PartnerDown(Exception):
    pass


@pytest.fixture
def failing(clock) -> tuple[Registry, FakeClock]:
    jobs = Registry()

    def handler(run: object) -> None:
        database_url = f"postgres://billing:{DB_PASSWORD}@db.internal/prod"  # a frame local
        raise PartnerDown(HOSTILE_MESSAGE) from KeyError(database_url)

    jobs.register("tests.partner", handler)
    clock.set(T0)
    return jobs, clock


def stored_and_logged() -> str:
    attempt = Attempt.objects.get()
    occurrence = Occurrence.objects.get()
    return " ".join(
        [
            attempt.error_type,
            attempt.error_message,
            occurrence.last_error_type,
            occurrence.last_error_message,
        ]
    )


@pytest.mark.django_db
def test_a_failed_attempt_stores_and_logs_the_error_without_its_secrets(
    failing, inline_worker
) -> None:
    jobs, _clock = failing
    plan(ScheduleFactory.create(job="tests.partner", max_attempts=3), T0, now=T0)
    worker = inline_worker(jobs)
    with capture_logs() as logs:
        worker.run_pass()
    worker.close()
    assert Occurrence.objects.get().state == OccurrenceState.FAILED
    stored = stored_and_logged()
    (failed,) = [e for e in logs if e["event"] == "occurrence.failed"]
    for secret in SECRETS:
        assert secret not in stored
        assert secret not in repr(logs)
    # What is not secret stays, so the error still says what went wrong.
    assert "could not reach postgres://billing:[redacted]@db.internal:5432/prod" in stored
    assert '{"password": "[redacted]"}' in stored
    assert failed["error"] == Occurrence.objects.get().last_error_message
    assert failed["error_type"] == "tests.test_redaction.PartnerDown"


@pytest.mark.django_db
def test_a_dead_letter_stores_and_logs_the_error_without_its_secrets(
    failing, inline_worker
) -> None:
    jobs, _clock = failing
    plan(ScheduleFactory.create(job="tests.partner", max_attempts=1), T0, now=T0)
    worker = inline_worker(jobs)
    with capture_logs() as logs:
        worker.run_pass()
    worker.close()
    assert Occurrence.objects.get().state == OccurrenceState.DEAD
    (dead,) = [e for e in logs if e["event"] == "occurrence.dead"]
    for secret in SECRETS:
        assert secret not in stored_and_logged()
        assert secret not in repr(logs)
    assert REDACTED in dead["error"]


@pytest.mark.django_db
def test_no_traceback_cause_or_frame_locals_are_stored(failing, inline_worker) -> None:
    jobs, _clock = failing
    plan(ScheduleFactory.create(job="tests.partner"), T0, now=T0)
    worker = inline_worker(jobs)
    worker.run_pass()
    worker.close()
    stored = stored_and_logged()
    assert "Traceback" not in stored
    assert 'File "' not in stored
    assert "database_url" not in stored  # the frame local's name and its cause's message
    assert "KeyError" not in stored
    assert Attempt.objects.get().error_type == "tests.test_redaction.PartnerDown"


@pytest.mark.django_db
def test_a_project_pattern_from_settings_is_redacted_too(clock, inline_worker) -> None:
    jobs = Registry()

    def handler(run: object) -> None:
        raise PartnerDown("customer acct-884211 was refused by the bank")

    jobs.register("tests.bank", handler)
    plan(ScheduleFactory.create(job="tests.bank"), T0, now=T0)
    clock.set(T0)
    with override_settings(DJANGO_JOBS={"REDACT_PATTERNS": [r"acct-(?P<secret>\d{6})"]}):
        worker = inline_worker(jobs)
        with capture_logs() as logs:
            worker.run_pass()
        worker.close()
    assert Attempt.objects.get().error_message == "customer acct-[redacted] was refused by the bank"
    assert "884211" not in repr(logs)


@pytest.mark.django_db
def test_the_length_bound_holds_after_redaction_and_a_cut_secret_never_leaks(
    clock, inline_worker
) -> None:
    jobs = Registry()
    # 31 characters, then the key: a bound applied before redaction would keep 13 of its 20
    # characters, too few for the pattern to recognise.
    message = "x" * 30 + " " + AWS_KEY + " and then " + "y" * 5000

    def handler(run: object) -> None:
        raise PartnerDown(message)

    jobs.register("tests.long", handler)
    plan(ScheduleFactory.create(job="tests.long"), T0, now=T0)
    clock.set(T0)
    with override_settings(DJANGO_JOBS={"ERROR_MESSAGE_MAX_CHARS": 56}):
        worker = inline_worker(jobs)
        worker.run_pass()
        worker.close()
    stored = Attempt.objects.get().error_message
    assert len(stored) <= 56
    assert stored.endswith("…[truncated]")
    assert "AKIAIOSF" not in stored
    assert stored.startswith("x" * 30 + " [redacted]")


def test_a_secret_cut_by_the_scan_limit_is_dropped_with_its_word() -> None:
    text = "a " * 32_767 + AWS_KEY  # the key straddles the 64 KiB scan limit
    assert "AKIA" not in redact(text)
    error = SafeError.from_exception(PartnerDown("z" * 10**6), max_chars=1000)
    assert len(error.message) == 1000


KEY_LINE = "MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gun"


def _key(body_lines: int, *, end: bool = True) -> str:
    lines = ["-----BEGIN RSA PRIVATE KEY-----", *[KEY_LINE] * body_lines]
    return "\n".join([*lines, "-----END RSA PRIVATE KEY-----"] if end else lines)


def _traceback_cut_at(message: str, cut: int) -> str:
    """The stored traceback of ``ValueError(message)`` whose end, as read for redaction (the
    kept characters and 64 KiB more), starts ``cut`` characters into ``message``."""
    text_length = len("ValueError: ") + len(message) + 1
    keep = text_length - 64 * 1024 - len("ValueError: ") - cut
    assert keep >= 8192
    return SafeError.with_traceback(PartnerDown(message), max_chars=keep).message


# Where a key's BEGIN line starts, lies, and ends: the cut falls before, inside and after it.
@pytest.mark.parametrize("into", [-1, 0, 1, 5, 11, 20, 30, 31, 32, 40])
@pytest.mark.parametrize("end", [True, False])
def test_a_private_key_whose_begin_line_the_traceback_cut_leaves_out_is_hidden(
    into: int, end: bool
) -> None:
    message = "failed: " + _key(3_000, end=end) + "\ngone" + " after" * 100
    stored = _traceback_cut_at(message, message.index("-----BEGIN") + into)
    assert stored.startswith("[truncated]")
    assert "MIIE" not in stored
    assert "/VDL5" not in stored  # nor half a line of it
    assert "ezV6ffAt0gun" not in stored
    assert stored.endswith(" after\n") == end  # with no END, the key runs to the end


@pytest.mark.parametrize("into", [-1, 0, 1, 5, 10, 20, 28, 29, 30])
def test_a_traceback_cut_inside_a_keys_end_line_hides_no_more_than_the_key(into: int) -> None:
    message = "failed: " + _key(3_000) + "\nthen" + " after" * 20_000
    stored = _traceback_cut_at(message, message.index("-----END") + into)
    assert "MIIE" not in stored
    assert "PRIVATE KEY" not in stored
    assert stored.count(" after") > 9_000  # what follows the key is kept (56 KiB of it)


@pytest.mark.django_db
def test_an_exception_whose_message_cannot_be_read_still_fails_the_attempt(
    clock, inline_worker
) -> None:
    """Regression: ``str(exc)`` raising inside SafeError crashed the run instead of failing it."""

    class Unprintable(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no")

    jobs = Registry()

    def handler(run: object) -> None:
        raise Unprintable()

    jobs.register("tests.unprintable", handler)
    plan(ScheduleFactory.create(job="tests.unprintable"), T0, now=T0)
    clock.set(T0)
    worker = inline_worker(jobs)
    summary = worker.run_pass()
    worker.close()
    assert list(summary.outcomes.elements()) == ["retry"]
    attempt = Attempt.objects.get()
    assert attempt.error_message == "<Unprintable whose message cannot be read>"


def test_a_store_outage_is_logged_without_the_credentials_in_its_message(clock) -> None:
    outage = OutageLog(clock, patterns=(r"internal-\w+",))
    with capture_logs() as logs:
        outage.failed(
            OperationalError(
                f'connection to "postgres://app:{DB_PASSWORD}@internal-db:5432" failed\nmore'
            )
        )
    (line,) = logs
    assert DB_PASSWORD not in line["error"]
    assert "internal-db" not in line["error"]
    assert line["error"].startswith("OperationalError: connection to")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("postgres://u:pa@ss@h/db", "postgres://u:[redacted]@h/db"),
        ("redis://:hunter2@cache:6379/0", "redis://:[redacted]@cache:6379/0"),
        ("amqp://guest:guest@rabbit//", "amqp://guest:[redacted]@rabbit//"),
        ("password=hunter2 next", "password=[redacted] next"),
        (
            "PGPASSWORD=x1 passwd: x2 pwd='x 3'",
            "PGPASSWORD=[redacted] passwd: [redacted] pwd='[redacted]'",
        ),
        ('{"db_password": "two words"}', '{"db_password": "[redacted]"}'),
        ("{'api_key': 'k-1', 'secret': 's'}", "{'api_key': '[redacted]', 'secret': '[redacted]'}"),
        ("access_token=abc&x=1", "access_token=[redacted]&x=1"),
        ("Authorization: Bearer abc.def", "Authorization: Bearer [redacted]"),
        ("authorization=Basic dXNlcjpwYXNz", "authorization=Basic [redacted]"),
        ("sent bearer Zm9vYmFyYmF6cXV4", "sent bearer [redacted]"),
        ("key AKIAIOSFODNN7EXAMPLE used", "key [redacted] used"),
        ("gho_" + "a" * 36 + " rest", "[redacted] rest"),
        ("xoxb-123456789012-abc", "[redacted]"),
        (f"jwt {JWT}.", "jwt [redacted]."),
        ("-----BEGIN PRIVATE KEY-----\nMIIE\n-----END PRIVATE KEY-----!", "[redacted]!"),
        # Words that only look like keys are left alone.
        ("max_tokens=100 author=bob passed: 3", "max_tokens=100 author=bob passed: 3"),
    ],
)
def test_default_patterns(text: str, expected: str) -> None:
    assert redact(text) == expected


SHAPES = [
    "postgres://app:{s}@db:5432/x",
    "mysql://root:{s}@localhost",
    "password={s}",
    "api_key: {s}",
    '"token": "{s}"',
    "Authorization: Bearer {s}",
    "secret='{s}'",
]


@settings(max_examples=300, deadline=None)
@given(
    before=st.text(max_size=40),
    after=st.text(max_size=40),
    shape=st.sampled_from(SHAPES),
    secret=st.text(
        alphabet="abcdefghijkmnpqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ23456789",
        min_size=12,
        max_size=30,
    ),
)
def test_a_secret_in_any_surrounding_text_is_redacted(before, after, shape, secret) -> None:
    assume(secret[:8] not in before + after)
    text = f"{before} {shape.format(s=secret)} {after}"
    out = SafeError.from_exception(PartnerDown(text), max_chars=10_000).message
    assert secret not in out
    assert secret[:8] not in bound_free(out)


def bound_free(text: str) -> str:
    return re.sub(r"\[redacted\]", "", text)


def test_log_text_is_redacted_and_bounded() -> None:
    text = loggable(RuntimeError("password=hunter2 " + "z" * 1000), max_chars=100)
    assert "hunter2" not in text
    assert len(text) == 100


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("secret-\\d+", "DJANGO_JOBS['REDACT_PATTERNS'] must be a list of regular expressions"),
        ([r"ok-\d+", "(unclosed"], "DJANGO_JOBS['REDACT_PATTERNS']: '(unclosed' is not a valid"),
        ([42], "DJANGO_JOBS['REDACT_PATTERNS'] must hold non-empty strings"),
        ([r"x*"], "DJANGO_JOBS['REDACT_PATTERNS']: 'x*' matches the empty string"),
    ],
)
def test_bad_redact_patterns_are_refused_naming_the_setting_and_the_pattern(value, message) -> None:
    with override_settings(DJANGO_JOBS={"REDACT_PATTERNS": value}):
        with pytest.raises(ConfigurationError) as raised:
            get_settings()
        assert str(raised.value).startswith(message)
        assert "django_jobs.E003" in [m.id for m in run_checks()]


def test_a_valid_list_of_patterns_is_kept() -> None:
    with override_settings(DJANGO_JOBS={"REDACT_PATTERNS": [r"acct-\d{6}"]}):
        assert get_settings().REDACT_PATTERNS == (r"acct-\d{6}",)
    assert get_settings().REDACT_PATTERNS == ()
