"""What of a job's exception may be stored, logged and shown to operators.

Only the exception's type and a bounded, single-paragraph message are kept: never frame locals,
never settings, and a traceback only for a job that asks for one (the Tasks handler: the
framework's ``TaskError.traceback``), its end redacted as one text and cut to its last
``TRACEBACK_MAX_CHARS``. Secrets in the message are replaced by ``[redacted]`` before it is
bounded, stored or logged.

Redaction is pattern matching over the first 64 KiB of the message; it hides a value by the
shape that carries it:

- a value assigned to a name with a secret word as one of its parts (``password``, ``passwd``,
  ``passphrase``, ``pwd``, ``secret``, ``token``, ``api_key``, ``access_key``, ``private_key``,
  ``credentials``, ``cookie``, ``session_id``, and ``auth``/``pass`` as a whole part), with any
  prefix and any ``_``/``-``/digit/camelCase suffix: ``SECRET_KEY=``, ``DB_PASSWORD_PROD=``,
  ``password1=``, ``"secretKey": ...``, in ``key=value``, JSON (escaped quotes, JSON inside a
  JSON string), Python reprs, YAML (a block value runs to the end of its line) and URL-encoded
  (``password%3D...``, ``%22token%22%3A%22...``) form;
- credentials in a URL: the password runs to the last ``@`` before the host on its line, so it
  may hold ``#``, ``/``, ``?``, ``@`` and spaces;
- command lines as ``CalledProcessError`` prints them (a shell string or a list's repr): a flag
  named for a secret and its argument (``--password x``, ``--api-key=x``), ``mysql -px``,
  ``curl -u user:x``;
- ``Authorization`` headers, JWTs and PEM private keys;
- token shapes that carry no name (``secret_shapes``: detect-secrets' plugin patterns and ours,
  among them AWS, Google, Slack, Stripe, OpenAI, Anthropic, SendGrid, npm, PyPI and Azure),
  plus the project's ``REDACT_PATTERNS``.

Each of these patterns (not a project's) names markers, text any match holds; a pattern whose
markers are absent is not run, so a message pays one substring search per absent shape.

Every pattern looks at the original text and the hidden spans are merged, so one shape cannot
disturb another (a pattern never sees a ``[redacted]`` another one wrote). What it cannot do:
see a secret with no name or known shape (``"login failed with hunter2"``), or a secret that
spans lines. It errs towards hiding: a value named for a secret is hidden even when it is not
one (``token_type=[redacted]``), and words that only contain a secret word are left alone
(``max_tokens``, ``author``, ``fe_sendauth``). Each pattern runs in time linear in the text
(possessive and atomic groups where backtracking could multiply, look-aheads bounded or stopped
by the next candidate), so a hostile 64 KiB message costs milliseconds, not minutes.

A pattern with named groups ``secret...`` has only those groups replaced (so
``password=[redacted]`` still says what was hidden); otherwise the whole match is.
"""

from __future__ import annotations

import functools
import json
import re
import traceback
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from . import secret_shapes
from .secret_shapes import Shape

REDACTED = "[redacted]"
_TYPE_MAX = 200
# Redaction scans at most this much of a message: a hostile message of megabytes costs no
# more than this, and whatever lies beyond is cut anyway.
_SCAN_MAX = 64 * 1024

# A name that says its value is secret: a secret word, then optionally a suffix that starts a
# new part ("_PROD", "-v2", "1", camelCase "Key"), never more lower-case letters ("tokens",
# "author"). The prefix is free ("PGPASSWORD", "client_secret") except for the short words
# "auth" and "pass", which must start a part ("basic_auth", "userPass", "%3Fpass", not "compass").
_NAME = (
    r"(?:password|passwd|passphrase|pwd|secret|token|credentials?|cookie|session[_-]?id"
    r"|(?:api|access|private|encryption|signing|master)[_-]?key"
    r"|(?-i:(?<![A-Za-z])|(?<=%[0-9A-Fa-f]{2})|(?=[AP]))(?:auth|pass))"
    r"(?:(?:[_-]\w|\d|(?-i:(?<=[a-z])[A-Z]))[\w-]{0,64}+)?"
)

# Quoted strings with backslash escapes (JSON, Python reprs, YAML double quotes), and the body
# of a JSON string inside a JSON string, where the outer escapes are doubled.
_DQ = r'(?:[^"\\\n]|\\.)*+'
_SQ = r"(?:[^'\\\n]|\\.)*+"
_JQ = r'(?:\\\\(?:\\.|[^\\"\n])|\\[^\\"\n]|[^\\"\n])*+'
# An unquoted value: it runs to ASCII whitespace (logfmt leaves a no-break space unquoted) or a
# double quote; other punctuation ends it only where a value cannot go on: before whitespace or
# the end (``(token=x)``, ``'password=x'``), or before the next ``name=`` (``password=x&u=y``).
_MARKS = r"',;)\]}>&"
_PLAIN = rf"""[^ \t\n\r\f\v"{_MARKS}]"""
_BARE = rf"(?:{_PLAIN}|(?>[{_MARKS}]+)(?={_PLAIN})(?![\w.%-]{{1,64}}=))++"
_VALUE = (
    # Adjacent quoted pieces are one value: shell 'hun'"'"'ter', YAML 'it''s'.
    rf"""(?:(?P<secret_joined>(?:"{_DQ}"|'{_SQ}'){{2,}}+(?:{_BARE})?)"""
    rf"""|"(?P<secret_dq>{_DQ})(?:"(?P<secret_dq_tail>{_BARE})?)?"""
    rf"""|'(?P<secret_sq>{_SQ})(?:'(?P<secret_sq_tail>{_BARE})?)?"""
    rf"""|\\"(?P<secret_jq>{_JQ})"""
    rf"""|(?P<secret>{_BARE}))"""
)

# Command lines. A shell word, with its quoting; where a shell word or an element of a list's
# repr starts (CalledProcessError prints either); the body of the repr quoted by group ``q``.
_WORD_PIECE = r"""(?:[^\s'"\\]|\\.|'[^'\n]*+'|"(?:[^"\\\n]|\\.)*+")"""
_SHELL = r"(?<![^\s])(?<!,\s)"
_ITEM = r"(?:(?<=\[)|(?<=,\s))"


def _repr_body(q: str) -> str:
    return rf"(?:(?!(?P={q}))[^\\\n]|\\.)*+"


_FLAG = rf"-{{1,2}}[\w.-]{{0,64}}?{_NAME}"
_USER_FLAG = r"(?:-u|-U|--user|--proxy-user)"

# Redaction reads names and places (a name given a value, a URL's password, a command line's
# flags, a header); secret_shapes reads token shapes. Each of ours runs only on a text holding
# one of its markers (lower case), a substring search far cheaper than the regex's scan.
_NAME_MARKERS = ("pass", "pwd", "secret", "token", "credential", "cookie", "session", "key", "auth")
_RULES: tuple[tuple[str, tuple[str, ...]], ...] = (
    # Credentials in a URL: scheme://user:password@host. The password runs to the last @
    # followed by a host on its line (it may hold @, #, /, ? and spaces), not into another URL.
    (r"://[^\s:/?#]*+:(?P<secret>(?:(?!://)[^\n])+)@(?=[^\s@/?#:])", ("://",)),
    # Authorization: Bearer xxx (and Basic, Token, ...), as a header or a key-value pair.
    (
        r"(?i)\b(?:proxy-)?authorization[\"']?[ \t]*+[:=][ \t]*+[\"']?"
        r"(?:(?:bearer|basic|token|digest|negotiate)[ \t]++)?(?P<secret>[^\s\"',;]+)",
        ("authorization",),
    ),
    (r"(?i)\bbearer\s{1,5}(?P<secret>[A-Za-z0-9\-._~+/]{8,}=*)", ("bearer",)),
    # password=..., "DB_PASSWORD_PROD": "...", secretKey: ..., token => '...', {\"pwd\": \"...\"}
    # The whole name is read, so a URL's user (https://x-access-token:...@) is left to the
    # URL pattern, which knows where the host starts.
    (
        rf"(?i)(?<![\w.-])(?<!//)[\w.-]{{0,64}}?{_NAME}(?:\\?[\"']|\])?[ \t]*+(?::=|=>|==|[:=])\s*+"
        rf"{_VALUE}",
        _NAME_MARKERS,
    ),
    # A YAML block value is everything to the end of its line: "  db_password: two words".
    (
        rf"(?im)^[ \t]*+(?:-[ \t]+)?[\"']?[\w.-]{{0,64}}?{_NAME}[\"']?[ \t]*+:[ \t]++"
        r"(?![\"'])(?P<secret>\S(?:[^\n]*\S)?)",
        _NAME_MARKERS,
    ),
    # URL-encoded: password%3Dhunter2, %22token%22%3A%20%22...%22 (a JSON string, its \" as %5C%22)
    (
        rf"(?i){_NAME}(?:%2[27])?%3[AD](?:%20|\+)*+"
        r"(?:%22(?P<secret_q>(?:%5C(?:%[0-9A-F]{2}|[^\s&%])|(?!%22|%5C)[^\s&\"'<>])*+)"
        r"|(?P<secret>(?:(?!%26)[^\s&\"'<>])++))",
        ("%3",),
    ),
    # A flag named for a secret and its argument: --password x, --api-key='x y', and in a
    # list's repr '--password', 'x' or '--password=x'. pg_dump --password -h db has none.
    (
        rf"(?i){_SHELL}(?:'{_FLAG}=(?P<secret_q>[^'\n]*+)(?:'(?P<secret_q_tail>{_WORD_PIECE}*+))?"
        rf"|{_FLAG}(?:=|[ \t]++(?!-))(?P<secret>{_WORD_PIECE}++))",
        _NAME_MARKERS,
    ),
    (
        rf"(?i){_ITEM}(?P<q>['\"]){_FLAG}(?:=(?P<secret_eq>{_repr_body('q')})"
        rf"|(?P=q),\s(?P<q2>['\"])(?!-)(?P<secret>{_repr_body('q2')}))",
        _NAME_MARKERS,
    ),
    # mysql -phunter2: the password is glued to -p (and -p alone prompts). The look-ahead
    # stops at the next "mysql", so a message full of them is still read once.
    (
        rf"\b(?:mysql|mariadb)[\w-]*+(?:(?!mysql|mariadb)[^\n]){{0,300}}?"
        rf"(?:{_SHELL}(?:'-p(?P<secret_q>[^'\n]*+)(?:'(?P<secret_q_tail>{_WORD_PIECE}*+))?"
        rf"|-p(?P<secret>{_WORD_PIECE}++))"
        rf"|{_ITEM}(?P<q>['\"])-p(?P<secret_item>{_repr_body('q')}))",
        ("mysql", "mariadb"),
    ),
    # curl -u user:password (and --user, --proxy-user): the part after the first colon.
    (
        rf"{_SHELL}{_USER_FLAG}(?:=|[ \t]++)"
        rf"(?:[^\s:'\"\\]*+:(?P<secret>{_WORD_PIECE}*+)|(?=['\"][^'\"\n]*:)(?P<secret_q>{_WORD_PIECE}++))",
        ("-u",),
    ),
    (
        rf"{_ITEM}(?P<q>['\"]){_USER_FLAG}(?:=[^:'\"\\\n]*:(?P<secret_eq>{_repr_body('q')})"
        rf"|(?P=q),\s(?P<q2>['\"])[^:'\"\\\n]*:(?P<secret>{_repr_body('q2')}))",
        ("-u",),
    ),
    # Tokens that carry no name are secret_shapes'; these two span what a token shape cannot:
    # a JWT's three parts and a PEM block's lines.
    (r"(?<![A-Za-z0-9_-])eyJ[A-Za-z0-9_-]{5,}\.eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]*", ("eyj",)),
    (
        r"-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----[\s\S]*?"
        r"(?:-----END [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----|$)",
        ("private key",),
    ),
)
# The patterns above, as text (a project's REDACT_PATTERNS adds to them and to secret_shapes').
DEFAULT_PATTERNS: tuple[str, ...] = tuple(pattern for pattern, _ in _RULES)


@functools.cache
def _compiled(patterns: tuple[str, ...]) -> tuple[tuple[Shape, ...], frozenset[str]]:
    """Ours, secret_shapes', then the project's ``patterns`` (always run), compiled once;
    and every marker among them."""
    shapes = (
        *(Shape(re.compile(pattern), markers) for pattern, markers in _RULES),
        *secret_shapes.shapes(),
        *(Shape(re.compile(pattern)) for pattern in patterns),
    )
    return shapes, frozenset(marker for shape in shapes for marker in shape.markers)


def _spans(match: re.Match[str]) -> Iterator[tuple[int, int]]:
    """What ``match`` hides: its non-empty ``secret...`` groups, or all of it if none took part."""
    groups = [n for n, v in match.groupdict().items() if n.startswith("secret") and v is not None]
    if not groups:
        yield match.span()
    for name in groups:
        if match.group(name):
            yield match.span(name)


def _hidden(text: str, spans: Iterable[tuple[int, int]]) -> str:
    """``text`` with each run of overlapping or touching spans replaced by one ``[redacted]``."""
    out: list[str] = []
    last = 0
    for lo, hi in sorted(spans):
        if lo < last or (lo == last and out):
            last = max(last, hi)
            continue
        out += [text[last:lo], REDACTED]
        last = hi
    return "".join([*out, text[last:]])


def redact(text: str, patterns: Iterable[str] = ()) -> str:
    """``text`` with every match of the default patterns and ``patterns`` hidden.

    Every pattern reads the original text and their spans are merged, so the order of the
    patterns does not matter and no pattern is misled by another's ``[redacted]``.
    """
    if len(text) > _SCAN_MAX:
        # Drop the last, possibly cut, word too: half a secret matches no pattern.
        text = text[:_SCAN_MAX].rsplit(maxsplit=1)[0] if text[:_SCAN_MAX].split() else ""
    return _hidden(text, _found(text, tuple(patterns)))


def _found(text: str, patterns: tuple[str, ...]) -> Iterator[tuple[int, int]]:
    """The spans of ``text`` that the patterns whose markers it holds hide."""
    every, markers = _compiled(patterns)
    lowered = text.lower()
    # Each marker is looked for once, not once per shape that names it.
    present = {marker for marker in markers if marker in lowered}
    shapes = [s for s in every if not s.markers or not present.isdisjoint(s.markers)]
    return (span for s in shapes for m in s.pattern.finditer(text) for span in _spans(m))


def shown_json(value: object, patterns: Iterable[str] = ()) -> str:
    """A JSON value (a job's arguments, an audit record's before and after) as an operator is
    shown it (``jobs inspect``, the admin): compact, keys in order, and what the default
    patterns and ``patterns`` match hidden, as in an error message."""
    text = json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)
    return redact(text, patterns)


# A key whose value a page hides (the name rule above, applied to a whole JSON key).
_SECRET_KEY = re.compile(rf"(?i)[\w.-]{{0,64}}?{_NAME}")
# Deeper than this, a value is hidden whole (the walk recurses; JSON input is bounded anyway).
_DEPTH_MAX = 100
# What only a whole value's text shows, shorter than this, is not looked for in its strings.
_PIECE_MIN = 8


def redacted_json(value: object, patterns: Iterable[str] = ()) -> object:
    """A JSON value (a job's arguments, an audit record's before and after) with what
    :func:`shown_json` hides hidden, kept as JSON for a record that stores it:

    1. a value under a key named for a secret (``api_token``, ``"password"``) becomes
       ``[redacted]``, whatever its type;
    2. every other string, keys included, is redacted as text (secret shapes, URLs, ...);
    3. the whole value is read as :func:`shown_json` reads it (if it finds nothing, the value
       is returned as it is, without steps 1 and 2), and a secret only the whole
       shows (an AWS secret in one field beside its key id in another) is hidden in every
       string that holds it."""
    patterns = tuple(patterns)
    text = json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)
    found = list(_found(text, patterns))
    if not found:  # nothing a page would hide (most records): one pass over the text
        return value
    walked = _walk(value, patterns, 0)
    pieces = {text[lo:hi] for lo, hi in found}
    pieces = {p for p in pieces if len(p) >= _PIECE_MIN and REDACTED not in p}
    return _hide_pieces(walked, pieces) if pieces else walked


def _walk(value: object, patterns: tuple[str, ...], depth: int) -> object:
    if depth > _DEPTH_MAX:
        return REDACTED
    if isinstance(value, dict):
        return {
            redact(str(key), patterns): REDACTED
            if _SECRET_KEY.fullmatch(str(key))
            else _walk(item, patterns, depth + 1)
            for key, item in value.items()
        }
    if isinstance(value, list | tuple):
        return [_walk(item, patterns, depth + 1) for item in value]
    if isinstance(value, str):
        return redact(value, patterns)
    return value


def _hide_pieces(value: object, pieces: set[str]) -> object:
    if isinstance(value, dict):
        return {key: _hide_pieces(item, pieces) for key, item in value.items()}
    if isinstance(value, list):
        return [_hide_pieces(item, pieces) for item in value]
    if isinstance(value, str):
        for piece in pieces:
            value = value.replace(piece, REDACTED)
    return value


@dataclass(frozen=True)
class SafeError:
    type: str
    message: str

    @classmethod
    def from_exception(
        cls, exc: BaseException, *, max_chars: int, patterns: Iterable[str] = ()
    ) -> SafeError:
        """The exception's type and message, redacted (``patterns`` add to the defaults),
        then cut to ``max_chars``."""
        kind = type(exc)
        name = (
            kind.__qualname__
            if kind.__module__ == "builtins"
            else f"{kind.__module__}.{kind.__qualname__}"
        )
        patterns = tuple(patterns)
        return cls(
            type=bound(redact(name, patterns), _TYPE_MAX),
            message=bound(redact(_message(exc), patterns), max_chars),
        )

    @classmethod
    def with_traceback(
        cls, exc: BaseException, *, max_chars: int = 0, patterns: Iterable[str] = ()
    ) -> SafeError:
        """The exception's type, and as its message its traceback (``format_exception``),
        redacted as one text, then cut to its last ``TRACEBACK_MAX_CHARS`` (or ``max_chars``,
        if larger): the end of a traceback (where it was raised, and the exception itself) is
        the part that says what went wrong. Only its end is redacted (``_traceback_end``)."""
        patterns = tuple(patterns)
        safe = cls.from_exception(exc, max_chars=max_chars or 1, patterns=patterns)
        try:
            text = "".join(traceback.format_exception(exc))
        except Exception:  # a hostile __str__ or __repr__: the message alone, as any job's
            return cls.from_exception(exc, max_chars=max_chars, patterns=patterns)
        keep = max(max_chars, TRACEBACK_MAX_CHARS)
        return cls(type=safe.type, message=_traceback_end(text, keep, patterns))

    def __str__(self) -> str:
        return f"{self.type}: {self.message}"


# The most of a traceback kept (``SafeError.with_traceback``): its last characters.
TRACEBACK_MAX_CHARS = 8192

# A private key's first and last lines, as ``_RULES``' PEM block pattern reads them (a line
# is at most ``_PEM_LINE`` characters long); the last BEGIN line: the greedy run goes to the
# end, then gives back one character at a time until a BEGIN line ends there.
_PEM_BEGIN = r"-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----"
_PEM_END = re.compile(r"-----END [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----")
_PEM_LINE = 80
_LAST_PEM_BEGIN = re.compile(rf"(?s).*({_PEM_BEGIN})")
_CUT = "[truncated]…\n"
_SPACE = re.compile(r"\s+")


def _traceback_end(text: str, keep: int, patterns: tuple[str, ...]) -> str:
    """The last ``keep`` characters of a traceback, redacted as one text (so the patterns
    that span lines, a PEM block and a value on the line after its name, still match).

    Only its end is redacted: the last ``keep + _SCAN_MAX`` characters, from the first word
    that starts within them, so a traceback of megabytes costs little more than a message.
    A secret the cut splits starts at least ``_SCAN_MAX`` characters before what is kept,
    but for a private key, whose body may be longer: the rest of a key whose BEGIN line
    starts before the cut is hidden, up to its END line (``_rest_of_key``)."""
    if len(text) <= keep + _SCAN_MAX:
        return bound_tail(_hidden(text, _found(text, patterns)), keep)
    # From the first whole word: half a secret matches no pattern.
    space = _SPACE.search(text, len(text) - keep - _SCAN_MAX)
    cut = space.end() if space else len(text)
    window = text[cut:]
    spans = list(_found(window, patterns))
    if rest := _rest_of_key(text, cut):
        spans.append((0, rest))
    tail = bound_tail(_hidden(window, spans), keep - len(_CUT))
    return _CUT + tail.removeprefix(_CUT)


def _rest_of_key(text: str, cut: int) -> int:
    """How much of ``text[cut:]`` is the rest of a private key whose BEGIN line starts before
    ``cut`` (possibly running past it): up to its END line, or all of it if it has none; 0 if
    no key is open at ``cut``. Read back from ``cut``, only when a key is named at all."""
    endpos = min(len(text), cut + _PEM_LINE)
    if text.find("PRIVATE KEY", 0, endpos) < 0:
        return 0
    while True:  # the last BEGIN line that starts before the cut (at most 3 start after it)
        last = _LAST_PEM_BEGIN.match(text, 0, endpos)
        if last is None:
            return 0
        if last.start(1) < cut:
            break
        endpos = last.start(1)
    end = _PEM_END.search(text, last.end(1))
    return len(text) - cut if end is None else max(0, end.end() - cut)


def loggable(
    error: BaseException | str, *, patterns: Iterable[str] = (), max_chars: int = 300
) -> str:
    """An error's text for a log line: redacted like a stored error, then bounded."""
    text = error if isinstance(error, str) else _message(error)
    return bound(redact(text.strip(), patterns), max_chars)


def _message(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception:  # a hostile __str__ must not turn a job failure into a crash
        return f"<{type(exc).__name__} whose message cannot be read>"


def bound(text: str, max_chars: int) -> str:
    """`text` without control characters, cut to `max_chars` with a visible marker."""
    cleaned = "".join(ch if ch.isprintable() or ch in "\n\t" else "?" for ch in text)
    if len(cleaned) <= max_chars:
        return cleaned
    marker = "…[truncated]"
    return cleaned[: max(0, max_chars - len(marker))] + marker


def bound_tail(text: str, max_chars: int) -> str:
    """`text` without control characters (newlines and tabs kept), cut to its last
    `max_chars` with a visible marker in front."""
    cleaned = "".join(ch if ch.isprintable() or ch in "\n\t" else "?" for ch in text)
    if len(cleaned) <= max_chars:
        return cleaned
    marker = "[truncated]…\n"
    return marker + cleaned[len(cleaned) - max(0, max_chars - len(marker)) :]
