"""The shapes a secret takes in a job's error message, and what redaction leaves alone.

The leaks below were reproduced by a security review; the property test then generates
secrets with symbols, separators, quotes, escapes and encodings under names with generated
prefixes and suffixes, and writes them the way real code does (``json.dumps``, ``repr``,
``urlencode``, ``shlex.join``, ``CalledProcessError``, logfmt's quoting, YAML's plain scalars).
"""

from __future__ import annotations

import json
import shlex
import string
import time
from collections.abc import Callable
from subprocess import CalledProcessError
from urllib.parse import quote, urlencode

import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from django_jobs.safe_error import redact


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # Key names with a prefix or a suffix.
        ("SECRET_KEY=django-insecure-x1", "SECRET_KEY=[redacted]"),
        ("DB_PASSWORD_PROD=hunter2 up", "DB_PASSWORD_PROD=[redacted] up"),
        ("password1=hunter2 up", "password1=[redacted] up"),
        ('{"secret_key": "hunter2"}', '{"secret_key": "[redacted]"}'),
        ("{'secretKey': 'hunter2'}", "{'secretKey': '[redacted]'}"),
        # Command lines, as CalledProcessError prints a string and a list.
        (
            "Command 'pg_dump --password hunter2 -h db' returned non-zero exit status 1.",
            "Command 'pg_dump --password [redacted] -h db' returned non-zero exit status 1.",
        ),
        (
            "Command '['pg_dump', '--password', 'hunter2']' returned non-zero exit status 1.",
            "Command '['pg_dump', '--password', '[redacted]']' returned non-zero exit status 1.",
        ),
        ("Command 'mysql -phunter2 db' failed", "Command 'mysql -p[redacted] db' failed"),
        ("['mysql', '-u', 'root', '-phunter2']", "['mysql', '-u', 'root', '-p[redacted]']"),
        ("curl -u admin:hunter2 https://api/x", "curl -u admin:[redacted] https://api/x"),
        ("['curl', '-u', 'admin:hunter2']", "['curl', '-u', 'admin:[redacted]']"),
        # URL-encoded.
        ("/cb?next=%2Flogin%3Fpassword%3Dhunter2", "/cb?next=%2Flogin%3Fpassword%3D[redacted]"),
        ("x%26token%3Dabc123%26u%3Dbob", "x%26token%3D[redacted]%26u%3Dbob"),
        ("%7B%22password%22%3A%22hun%5C%22ter2%22%7D", "%7B%22password%22%3A%22[redacted]%22%7D"),
        # A URL password holding #, /, ?, @ and a space: the last @ before the host ends it.
        (
            "postgres://svc:hun#ter/2?x y@db.example/prod down",
            "postgres://svc:[redacted]@db.example/prod down",
        ),
        ("redis://:p@ss w/rd@cache:6379/0", "redis://:[redacted]@cache:6379/0"),
        # Escaped quotes inside a JSON string, and JSON inside a JSON string.
        ('{"password": "hun\\"ter2"}', '{"password": "[redacted]"}'),
        ('{"body": "{\\"pwd\\": \\"a\\\\\\"b\\"}"}', '{"body": "{\\"pwd\\": \\"[redacted]\\"}"}'),
        # YAML: any indentation of the value, and a plain value with spaces.
        ("password:        hunter2", "password:        [redacted]"),
        (
            "db:\n  db_password: hun ter2\n  port: 5432",
            "db:\n  db_password: [redacted]\n  port: 5432",
        ),
    ],
)
def test_a_leak_found_by_the_security_review_is_redacted(text: str, expected: str) -> None:
    assert redact(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # Applied one after another, the header pattern ate the backslash that escaped a
        # quote, so the JSON string looked closed and its tail leaked.
        (
            '{"password": "a\\" Authorization: Bearer zzzzzzzzzz\\" tail-Q7w9"}',
            '{"password": "[redacted]"}',
        ),
        # And the name pattern read the URL pattern's [redacted] as a value: [redacted]].
        (
            "git clone https://x-access-token:ghs_" + "a1" * 18 + "@github.com/o/r.git failed",
            "git clone https://x-access-token:[redacted]@github.com/o/r.git failed",
        ),
    ],
)
def test_one_shape_does_not_disturb_another(text: str, expected: str) -> None:
    assert redact(text) == expected


def test_a_sentence_without_a_secret_comes_through_unchanged() -> None:
    """A secret word that is not a name given a value, or only part of a longer word, is
    left alone: these are the messages an operator needs to read."""
    sentences = [
        "the token bucket refilled",
        'connection failed: FATAL:  password authentication failed for user "app"',
        "fe_sendauth: no password supplied",
        "The SECRET_KEY setting must not be empty.",
        "max_tokens=100 author=bob passed: 3 tokens: 5 compass: north",
        "GET https://api.example.com:443/v1/users returned 503",
        "sudo -u postgres psql -P pager=off",
    ]
    assert [redact(s) for s in sentences] == sentences


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("token_type=bearer", "token_type=[redacted]"),
        ("--password-file /run/pw", "--password-file [redacted]"),
        # A URL's password may hold spaces and @, so it runs to the last @ on the line.
        (
            "GET https://api.example:8443/v1 failed, paged ops@example.com",
            "GET https://api.example:[redacted]@example.com",
        ),
    ],
)
def test_what_looks_like_a_secret_is_hidden_even_when_it_is_not_one(
    text: str, expected: str
) -> None:
    """The chosen side of the trade-off: where the shape says secret, hide it."""
    assert redact(text) == expected


# Hostile messages: many near misses of every shape, each stopping just short of a match.
NEAR_MISSES = [
    "password_password_password_",
    "://a:",
    "password='a'b,c)d;",
    '\\"password\\": \\"\\\\',
    '"pwd": "' + "\\" * 40,
    "%22token%22%3A%22%5C",
    "mysql ",
    "'--password', '-",
    "  - auth: " + " " * 40 + "\n",
    "Authorization: Bearer ",
    "eyJhbGciOi.eyJ",
    "-----BEGIN PRIVATE KEY-----",
]


@pytest.mark.parametrize("filler", NEAR_MISSES)
def test_a_hostile_64_kib_message_is_redacted_in_bounded_time(filler: str) -> None:
    # Exactly the 64 KiB redaction reads: nothing is cut before the patterns see it.
    text = ("DB_PASSWORD_PROD=Xq7-secret " + filler * (64 * 1024 // len(filler)))[: 64 * 1024]
    started = time.thread_time()
    out = redact(text)
    elapsed = time.thread_time() - started
    assert "Xq7-secret" not in out
    # Linear patterns take milliseconds here; backtracking would take minutes. (CPU time of
    # this thread: a loaded machine's wait for a core does not count.)
    assert elapsed < 2.0, f"{elapsed:.2f}s to redact 64 KiB of {filler!r}"


# --- The property: any secret, under any secret name, in any realistic carrier. -------------

WORDS = [
    ["password"],
    ["passwd"],
    ["pwd"],
    ["passphrase"],
    ["secret"],
    ["token"],
    ["api", "key"],
    ["apikey"],
    ["access", "key"],
    ["private", "key"],
    ["credentials"],
    ["auth"],
    ["pass"],
]
PART = st.from_regex(r"[a-z][a-z0-9]{0,5}", fullmatch=True)


@st.composite
def secret_names(draw: st.DrawFn) -> str:
    """``DB_PASSWORD_PROD``, ``my_api_key_v2``, ``secretKey``, ``x-auth-token``, ``password1``."""
    prefix = draw(st.lists(PART, max_size=2))
    suffix = draw(st.lists(PART, max_size=2))
    parts = [*prefix, *draw(st.sampled_from(WORDS)), *suffix]
    style = draw(st.sampled_from(["snake", "SCREAMING", "camel", "kebab", "dotted"]))
    if style == "camel":
        name = parts[0] + "".join(p.capitalize() for p in parts[1:])
    elif style == "dotted":
        name = ".".join(prefix) + ("." if prefix else "") + "_".join(parts[len(prefix) :])
    else:
        name = {"snake": "_", "SCREAMING": "_", "kebab": "-"}[style].join(parts)
        name = name.upper() if style == "SCREAMING" else name
    return name + draw(st.sampled_from(["", "1", "2"]))


SEGMENT = st.text(string.ascii_letters + string.digits, min_size=4, max_size=10)
# Symbols and separators, and pieces that look like encodings or escapes themselves.
GLUE = st.text(string.punctuation + " \u00a0€", max_size=3) | st.sampled_from(
    ["%22", "%5C%22", "%40", "\\", '\\"', "\\\\", "\\u0022", "&amp;", "+", "%", "''", '"\'"']
)


@st.composite
def secrets(draw: st.DrawFn) -> tuple[str, list[str]]:
    """A secret and its alphanumeric runs: a leak of any part of it shows as one of them."""
    pieces = draw(st.lists(st.tuples(GLUE, SEGMENT), min_size=1, max_size=4))
    return "".join(g + s for g, s in pieces) + draw(GLUE), [s for _, s in pieces]


def logfmt(value: str) -> str:
    """go-logfmt quotes a value with whitespace, ``=`` or ``"``, with Go (JSON-like) escapes."""
    plain = value and not any(c <= " " or c in '="' for c in value)
    return value if plain else json.dumps(value)


def yaml_scalar(value: str) -> str:
    """A plain YAML scalar where YAML allows one (spaces and all), else a double-quoted one."""
    plain = (
        value == value.strip()
        and value[:1] not in set("-?:,[]{}#&*!|>'\"%@`")
        and ": " not in value
        and " #" not in value
        and not value.endswith(":")
    )
    return value if value and plain else json.dumps(value)


def failed(command: str | list[str]) -> str:
    return str(CalledProcessError(1, command))


def flag(name: str, secret: str) -> list[str]:
    # A value starting with - must be glued on, or the parser reads it as an option.
    return [f"--{name}={secret}"] if secret.startswith("-") else [f"--{name}", secret]


CARRIERS: dict[str, Callable[[str, str], str]] = {
    "logfmt": lambda n, s: f"level=error {n}={logfmt(s)} msg=refused",
    "json": lambda n, s: json.dumps({"user": "bob", n: s, "retry": True}),
    "json in a json string": lambda n, s: json.dumps({"body": json.dumps({n: s, "id": 7})}),
    "python repr": lambda n, s: repr({"user": "bob", n: s, "retry": True}),
    "yaml": lambda n, s: f"bad config:\n  host: db\n  {n}: {yaml_scalar(s)}\n  port: 5432",
    "url userinfo": lambda n, s: f"cannot reach postgres://svc:{s}@db.example:5432/prod",
    "url userinfo, encoded": lambda n, s: f"at redis://app:{quote(s, safe='')}@cache/0",
    "query": lambda n, s: "GET /login?" + urlencode({"user": "bob", n: s, "next": "/"}),
    "query in a query": lambda n, s: (
        "to /cb?" + urlencode({"next": "/login?" + urlencode({n: s, "u": "bob"})})
    ),
    "json, url-encoded": lambda n, s: "body=" + quote(json.dumps({n: s, "id": 7}), safe=""),
    "cli flag, string": lambda n, s: failed(shlex.join(["deploy", *flag(n, s), "-h", "db"])),
    "cli flag, list": lambda n, s: failed(["deploy", *flag(n, s), "-h", "db"]),
    "mysql, string": lambda n, s: failed(shlex.join(["mysql", "-u", "root", f"-p{s}", "db"])),
    "mysql, list": lambda n, s: failed(["mysqldump", "-u", "root", f"-p{s}", "db"]),
    "curl, string": lambda n, s: failed(shlex.join(["curl", "-u", f"admin:{s}", "https://h/"])),
    "curl, list": lambda n, s: failed(["curl", "-sS", "-u", f"admin:{s}", "https://h/"]),
}


@pytest.mark.slow
@settings(max_examples=1000, deadline=None)
@given(
    before=st.text(max_size=30),
    after=st.text(max_size=30),
    carrier=st.sampled_from(sorted(CARRIERS)),
    name=secret_names(),
    secret=secrets(),
)
@example(before="", after="", carrier="json", name="secret_key", secret=('hun"ter2', ["ter2"]))
def test_a_generated_secret_in_a_realistic_carrier_is_redacted(
    before: str, after: str, carrier: str, name: str, secret: tuple[str, list[str]]
) -> None:
    """No alphanumeric run of the secret survives, whatever text surrounds its carrier."""
    value, segments = secret
    write = CARRIERS[carrier]
    if carrier.startswith("url userinfo"):
        assume("://" not in value)  # a password holding a URL's own :// is not followed
    around = before + after + write(name, "\x00")
    assume(not any(s in around for s in segments))
    out = redact(f"{before} {write(name, value)} {after}")
    leaked = [s for s in segments if s in out]
    assert not leaked, f"{leaked} of {value!r} left in {out!r}"
