"""The shapes of secrets that carry no name: provider tokens and keys, hidden wherever they
appear in a job's error, a log line or an audit record (``safe_error.redact``).

Most shapes come from a maintained source, the regular expressions (``denylist``) of
`detect-secrets <https://github.com/Yelp/detect-secrets>`_' plugins, so a provider's new
format reaches us with an upgrade of that package. Ours add what it lacks or matches too
narrowly: Google API keys (``AIza...``, ``?key=`` in a URL) and OAuth tokens (``ya29.``),
Slack webhooks and app tokens (``xapp-``), OpenAI project and service keys (``sk-proj-``),
Anthropic keys (``sk-ant-``), SendGrid, npm, PyPI, Stripe restricted keys and webhook secrets
(``rk_live_``, ``whsec_``), Azure ``AccountKey=`` and SAS signatures, and AWS secret access keys
that carry no name (40 characters of base64 beside an access key id, or after
``aws_secret_access_key`` with no ``=``), Hugging Face, DigitalOcean and Shopify tokens.

Two things keep every shape cheap on every stored error and log line:

1. each shape names *markers*, lower-case text any match contains; a shape whose markers are
   all absent from the text is not run (one substring search instead of a regex scan);
2. each token shape begins with its literal prefix (``AIza``, ``xox``), so the regex engine
   jumps from one occurrence of the prefix to the next instead of trying every position, and
   runs to the end of the token, so a token longer than its provider's documented length is
   hidden whole. A shape may match inside a longer word: that errs towards hiding. None of
   them backtracks over a run of near misses (a hostile 64 KiB message per shape is tested);
   the two that would, detect-secrets' JWT and OpenAI patterns (``eyJ[...]+[.]`` on
   ``eyJeyJeyJ...``, ``sk-[...]*T3BlbkFJ`` on ``sk-ask-ask-...``), are held to a token's
   start.

The detect-secrets patterns are imported on first use (the package costs ~0.15 s to import),
then compiled once per process.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Shape:
    """A pattern whose matches are hidden; it is run only on a text holding one of
    ``markers`` (lower case; none: always run). Named groups ``secret...`` say what to hide
    (``safe_error``); without them, the whole match is."""

    pattern: re.Pattern[str]
    markers: tuple[str, ...] = ()
    source: str = "django_jobs"

    def applies(self, lowered: str) -> bool:
        """Whether the (lower-cased) text may hold a match."""
        return not self.markers or any(marker in lowered for marker in self.markers)


# A token runs to the end of its characters; a pattern that would backtrack over a run of near
# misses starts only where no letter or digit is before it (which costs the regex engine its
# jump to the literal prefix, so only where needed).
_START = r"(?<![A-Za-z0-9_=+/-])"
_TAIL = r"[A-Za-z0-9_-]*+"
_HELD_TO_START = {"JwtTokenDetector", "OpenAIDetector"}

# detect-secrets plugins whose denylist holds token shapes: the plugin, which of its patterns
# (None: all), and the markers of those patterns. Left out: its keyword, high-entropy and
# basic-auth detectors (the patterns in ``safe_error`` read names and URLs more precisely),
# its AWS pattern for a secret in a quoted context (``aws.{0,20}?key.{0,20}?'...'`` backtracks
# quadratically on a hostile message; ours below reads that context), npm's ``.npmrc`` line
# (``//.+/:_authToken``, quadratic on a line of ``//``), Artifactory's (its ``AP...`` matches
# ordinary words such as ``APEXCONNECTOR``) and IBM's, SoftLayer's and Cloudant's
# (context-bound shapes the keyword rules already cover).
_LIBRARY: tuple[tuple[str, str, tuple[int, ...] | None, tuple[str, ...]], ...] = (
    ("aws", "AWSKeyDetector", (0,), ("a3t", "abia", "acca", "akia", "asia")),
    ("azure_storage_key", "AzureStorageKeyDetector", None, ("accountkey=",)),
    ("slack", "SlackDetector", None, ("xox", "hooks.slack.com")),
    ("stripe", "StripeDetector", None, ("k_live_",)),
    ("sendgrid", "SendGridDetector", None, ("sg.",)),
    ("pypi_token", "PypiTokenDetector", None, ("pypi-",)),
    ("openai", "OpenAIDetector", None, ("t3blbkfj",)),
    ("github_token", "GitHubTokenDetector", None, ("gh",)),
    ("gitlab_token", "GitLabTokenDetector", None, ("gl", "gr1348941")),
    ("jwt", "JwtTokenDetector", None, ("eyj",)),
    ("private_key", "PrivateKeyDetector", None, ("private key", "putty-user-key")),
    ("discord", "DiscordBotTokenDetector", None, (".",)),
    ("telegram_token", "TelegramBotTokenDetector", None, (":",)),
    ("twilio", "TwilioKeyDetector", None, ("ac", "sk")),
    ("mailchimp", "MailchimpDetector", None, ("-us",)),
    ("square_oauth", "SquareOAuthDetector", None, ("sq0csp-",)),
)

# Our own: (pattern, markers). Each is followed by _TAIL (_token()).
_TOKENS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (r"AIza[0-9A-Za-z_-]{35}", ("aiza",)),  # Google API key
    (r"ya29\.[0-9A-Za-z_-]{20,}", ("ya29.",)),  # Google OAuth access token
    (r"1//0[0-9A-Za-z_-]{30,}", ("1//0",)),  # Google OAuth refresh token
    (r"xox[a-z]-[A-Za-z0-9-]{10,}", ("xox",)),  # Slack bot, user, refresh (xoxe) tokens
    (r"xapp-\d-[A-Za-z0-9-]{10,}", ("xapp-",)),  # Slack app-level token
    (r"sk-(?:proj|svcacct|admin)-[A-Za-z0-9_-]{20,}", ("sk-",)),  # OpenAI project/service
    (r"sk-[A-Za-z0-9]{48}", ("sk-",)),  # OpenAI, the older user key
    (r"sk-ant-[a-z]{2,10}\d{0,3}-[A-Za-z0-9_-]{20,}", ("sk-ant-",)),  # Anthropic
    (r"SG\.[A-Za-z0-9_-]{16,32}\.[A-Za-z0-9_-]{16,64}", ("sg.",)),  # SendGrid
    (r"npm_[A-Za-z0-9]{36}", ("npm_",)),  # npm
    (r"pypi-[A-Za-z0-9_-]{50,}", ("pypi-",)),  # PyPI (and TestPyPI) upload token
    (r"(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{10,}", ("k_live_", "k_test_")),  # Stripe
    (r"whsec_[A-Za-z0-9+/=]{20,}", ("whsec_",)),  # Stripe webhook signing secret
    (r"gh[pousr]_[A-Za-z0-9]{20,}", ("gh",)),  # GitHub
    (r"github_pat_[A-Za-z0-9_]{20,}", ("github_pat_",)),  # GitHub fine-grained
    (r"hf_[A-Za-z0-9]{30,}", ("hf_",)),  # Hugging Face
    (r"do[opr]_v1_[a-f0-9]{64}", ("_v1_",)),  # DigitalOcean
    (r"shp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}", ("shp",)),  # Shopify
    (r"(?:AKIA|ASIA)[0-9A-Z]{16}", ("akia", "asia")),  # AWS access key id
)

_AWS_ID = r"(?<![A-Za-z0-9])(?:AKIA|ASIA)[0-9A-Z]{16}(?![0-9A-Z])"
_AWS_SECRET = r"(?<![A-Za-z0-9/+])(?P<secret>[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])"

_CONTEXTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    # ?key=... in a URL (Google Maps, YouTube, and many more take the API key this way).
    (r"(?i)[?&](?:api[_-]?)?key=(?P<secret>[^&\s\"'<>#]+)", ("key=",)),
    # Azure: AccountKey=...; in a connection string, SharedAccessKey=..., a SAS URL's sig=.
    (
        r"(?i)(?:AccountKey|SharedAccessKey|SharedAccessSignature)=(?P<secret>[^;\s\"'<>]+)",
        ("accountkey=", "sharedaccesskey=", "sharedaccesssignature="),
    ),
    (r"[?&]sig=(?P<secret>[^&\s\"'<>#]+)", ("sig=",)),
    # AWS secret access keys with no name: 40 characters of base64 within 100 characters of
    # an access key id on its line, after it or before it ...
    (rf"{_AWS_ID}[^\n]{{1,100}}?{_AWS_SECRET}", ("akia", "asia")),
    (rf"{_AWS_SECRET}(?=[^\n]{{1,100}}?{_AWS_ID})", ("akia", "asia")),
    # ... or after their name without an = (aws configure set aws_secret_access_key ...).
    (
        r"(?i)aws_?secret(?:_?access)?_?key[\"']?[ \t]*+(?:[:=,][ \t]*+)?[\"']?"
        r"(?P<secret>[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])",
        ("aws",),
    ),
)


def _token(pattern: str, flags: int = 0, *, held: bool = False) -> re.Pattern[str]:
    return re.compile(rf"{_START if held else ''}(?:{pattern}){_TAIL}", flags)


def _library() -> Iterable[Shape]:
    """The chosen detect-secrets patterns, each as a token shape."""
    import importlib

    for module, name, which, markers in _LIBRARY:
        plugin = getattr(importlib.import_module(f"detect_secrets.plugins.{module}"), name)
        denylist = list(plugin.denylist)
        for index in range(len(denylist)) if which is None else which:
            found = denylist[index]
            yield Shape(
                _token(found.pattern, found.flags & re.IGNORECASE, held=name in _HELD_TO_START),
                markers,
                f"detect-secrets {name}",
            )


@functools.cache
def shapes() -> tuple[Shape, ...]:
    """Every shape: detect-secrets' patterns, then ours; compiled once per process."""
    return (
        *_library(),
        *(Shape(_token(p), markers) for p, markers in _TOKENS),
        *(Shape(re.compile(p), markers) for p, markers in _CONTEXTS),
    )


__all__ = ["Shape", "shapes"]
