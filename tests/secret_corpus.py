"""Secret shapes as they appear in real errors: each a realistic fake value of its provider's
format, in the text that carries it (a URL, a header, a config line, a command line).

``CORPUS`` is read by tests/test_trust_secret_shapes.py: every ``secret`` must be gone from
what redaction leaves of its ``text``, in every channel an error reaches. The values are made
by a seeded generator, so they look random (as real ones do) and are the same on every run;
none is a working credential.
"""

from __future__ import annotations

import random
import string
from dataclasses import dataclass

UPPER_DIGITS = string.ascii_uppercase + string.digits
ALNUM = string.ascii_letters + string.digits
URLSAFE = ALNUM + "-_"
BASE64 = ALNUM + "+/"
HEX = "0123456789abcdef"


def chars(label: str, n: int, alphabet: str = ALNUM) -> str:
    """``n`` characters of ``alphabet``, the same for the same ``label`` on every run."""
    rng = random.Random(label)
    return "".join(rng.choice(alphabet) for _ in range(n))


@dataclass(frozen=True)
class Shape:
    name: str
    text: str  # as it appears in an error
    secret: str  # what must not be seen after redaction


def _shape(name: str, template: str, secret: str) -> Shape:
    return Shape(name, template.format(s=secret), secret)


_AWS_ID = "AKIA" + chars("aws-id", 16, UPPER_DIGITS)
_AWS_SECRET = chars("aws-secret", 18, BASE64) + "/K7MDENG+" + chars("aws-secret-2", 13, BASE64)
_PEM_BODY = chars("pem", 64, BASE64)
_SSH_BODY = "b3BlbnNzaC1rZXktdjEAAAAA" + chars("ssh", 40, BASE64)

CORPUS: tuple[Shape, ...] = (
    # AWS
    _shape("aws access key id", "boto3 used {s} and was refused", _AWS_ID),
    _shape(
        "aws temporary key id", "AssumeRole gave {s}", "ASIA" + chars("aws-tmp", 16, UPPER_DIGITS)
    ),
    _shape("aws secret beside its id", f"credentials {_AWS_ID}:{{s}} rejected", _AWS_SECRET),
    _shape(
        "aws secret beside its id, before it",
        f"('{{s}}', '{_AWS_ID}') rejected",
        chars("aws-secret-b", 38, BASE64) + "/+",
    ),
    _shape(
        "aws secret in the cli",
        "Command 'aws configure set aws_secret_access_key {s}' returned non-zero exit status 1.",
        chars("aws-secret-c", 39, BASE64) + "/",
    ),
    _shape(
        "aws secret in sts json",
        '{{"AccessKeyId": "ASIAXYZ", "SecretAccessKey": "{s}"}}',
        chars("aws-secret-d", 40, BASE64),
    ),
    # Source forges
    _shape("github classic token", "git push failed for {s}", "ghp_" + chars("ghp", 36)),
    _shape("github oauth token", "token {s} expired", "gho_" + chars("gho", 36)),
    _shape(
        "github fine-grained token",
        "clone with {s} failed",
        "github_pat_11" + chars("pat", 20, UPPER_DIGITS) + "_" + chars("pat2", 59),
    ),
    _shape("gitlab personal token", "PRIVATE-TOKEN {s} refused", "glpat-" + chars("glpat", 20)),
    # Slack
    _shape(
        "slack bot token",
        "slack_sdk: invalid_auth for {s}",
        f"xoxb-{chars('xb1', 12, string.digits)}-{chars('xb2', 13, string.digits)}-"
        + chars("xb3", 24),
    ),
    _shape(
        "slack user token",
        "chat.postMessage with {s}",
        f"xoxp-{chars('xp1', 11, string.digits)}-{chars('xp2', 12, string.digits)}-"
        f"{chars('xp3', 13, string.digits)}-{chars('xp4', 32, HEX)}",
    ),
    _shape(
        "slack app token",
        "socket mode refused {s}",
        f"xapp-1-A{chars('xa1', 10, UPPER_DIGITS)}-{chars('xa2', 13, string.digits)}-"
        + chars("xa3", 64, HEX),
    ),
    _shape(
        "slack webhook url",
        "POST https://hooks.slack.com/services/T0A1B2C3D/B0E4F5G6H/{s} returned 404",
        chars("slack-hook", 24),
    ),
    # Payments
    _shape("stripe secret key", "Stripe: {s} is invalid", "sk_live_51" + chars("sk-live", 97)),
    _shape("stripe restricted key", "Stripe: {s} is invalid", "rk_live_51" + chars("rk-live", 97)),
    _shape("stripe webhook secret", "signature check with {s} failed", "whsec_" + chars("wh", 32)),
    _shape("square oauth secret", "square said no to {s}", "sq0csp-" + chars("sq", 43, URLSAFE)),
    # Google
    _shape("google api key", "Maps refused {s}", "AIza" + chars("aiza", 35, URLSAFE)),
    _shape(
        "google key in a url",
        "GET https://www.googleapis.com/youtube/v3/videos?part=id&key={s} returned 403",
        chars("gkey", 39, URLSAFE),
    ),
    _shape(
        "google oauth access token",
        "Drive API: {s} expired",
        "ya29.a0" + chars("ya29", 150, URLSAFE),
    ),
    _shape(
        "google oauth refresh token",
        "refresh with {s} failed",
        "1//0g" + chars("refresh", 98, URLSAFE),
    ),
    # AI providers
    _shape(
        "openai project key",
        "openai.AuthenticationError: Incorrect API key provided: {s}.",
        "sk-proj-" + chars("proj", 156, URLSAFE),
    ),
    _shape(
        "openai legacy key",
        "openai refused {s}",
        "sk-" + chars("oai1", 20) + "T3BlbkFJ" + chars("oai2", 20),
    ),
    _shape(
        "openai service account key",
        "openai refused {s}",
        "sk-svcacct-" + chars("svc", 74, URLSAFE),
    ),
    _shape(
        "anthropic key",
        "anthropic.AuthenticationError: invalid x-api-key {s}",
        "sk-ant-api03-" + chars("ant", 93, URLSAFE) + "AA",
    ),
    _shape("hugging face token", "hub download with {s} failed", "hf_" + chars("hf", 34)),
    # Mail, chat, hosting
    _shape(
        "sendgrid key",
        "python_http_client.exceptions.UnauthorizedError for {s}",
        "SG." + chars("sg1", 22, URLSAFE) + "." + chars("sg2", 43, URLSAFE),
    ),
    _shape("mailchimp key", "mailchimp refused {s}", chars("mc", 32, HEX) + "-us6"),
    _shape("twilio api key", "twilio refused {s}", "SK" + chars("tw", 32, HEX)),
    _shape(
        "discord bot token",
        "discord login failed with {s}",
        "MT" + chars("d1", 24, URLSAFE) + "." + chars("d2", 6, URLSAFE) + "." + chars("d3", 27),
    ),
    _shape(
        "telegram bot token",
        "getUpdates with {s} failed",
        chars("tg1", 10, string.digits) + ":AA" + chars("tg2", 33, URLSAFE),
    ),
    _shape("digitalocean token", "doctl refused {s}", "dop_v1_" + chars("do", 64, HEX)),
    _shape("shopify token", "shopify refused {s}", "shpat_" + chars("shp", 32, HEX)),
    # Package registries
    _shape("npm token", "npm publish: 401 with {s}", "npm_" + chars("npm", 36)),
    _shape(
        "pypi token",
        "twine upload rejected {s}",
        "pypi-AgEIcHlwaS5vcmc" + chars("pypi", 120, URLSAFE),
    ),
    # Azure
    _shape(
        "azure storage account key",
        "DefaultEndpointsProtocol=https;AccountName=acme;AccountKey={s};"
        "EndpointSuffix=core.windows.net",
        chars("azure", 86, BASE64) + "==",
    ),
    _shape(
        "azure sas signature",
        "GET https://acme.blob.core.windows.net/c/x.csv?sv=2022-11-02&sr=b&sig={s} returned 403",
        chars("sas", 30) + "%2B" + chars("sas2", 10) + "%3D",
    ),
    _shape(
        "azure service bus key",
        "Endpoint=sb://acme.servicebus.windows.net/;SharedAccessKeyName=Root;SharedAccessKey={s}",
        chars("sb", 43, BASE64) + "=",
    ),
    # Tokens in general
    _shape(
        "jwt",
        "session {s} rejected",
        "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9."
        + "eyJzdWIiOiI"
        + chars("jwt1", 40)
        + "."
        + chars("jwt2", 43, URLSAFE),
    ),
    _shape(
        "pem private key",
        "-----BEGIN RSA PRIVATE KEY-----\n{s}\n-----END RSA PRIVATE KEY-----",
        _PEM_BODY,
    ),
    _shape(
        "openssh private key",
        "-----BEGIN OPENSSH PRIVATE KEY-----\n{s}\n-----END OPENSSH PRIVATE KEY-----",
        _SSH_BODY,
    ),
    # Named and placed secrets (what redaction caught before secret shapes)
    _shape(
        "password in a url",
        "could not reach postgres://app:{s}@db:5432/prod",
        "Tr0ub4d-" + chars("u", 8),
    ),
    _shape("bearer header", "Authorization: Bearer {s}", chars("bearer", 32, URLSAFE)),
    _shape("basic header", "Authorization: Basic {s}", chars("basic", 28, BASE64) + "=="),
    _shape("password assignment", "login failed: password={s} user=bob", "pw-" + chars("pw", 12)),
    _shape("environment variable", "DB_PASSWORD_PROD={s} ./run", "env-" + chars("env", 14)),
    _shape("json api key", '{{"api_key": "{s}", "user": "bob"}}', "ak-" + chars("ak", 20)),
    _shape(
        "url-encoded token", "/cb?next=%2Flogin%3Ftoken%3D{s}%26u%3Dbob", "tk" + chars("tk", 20)
    ),
    _shape(
        "command-line flag",
        "Command 'pg_dump --password {s} -h db' returned non-zero exit status 1.",
        "fl-" + chars("flag", 12),
    ),
    _shape("mysql -p", "Command 'mysql -p{s} db' failed", "my-" + chars("my", 12)),
    _shape("curl -u", "curl -u admin:{s} https://api/x", "cu-" + chars("cu", 12)),
)

assert len(CORPUS) >= 40
assert len({s.name for s in CORPUS}) == len(CORPUS)
