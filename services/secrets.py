"""Secrets never printed: Redis URLs with their password hidden, and every log line,
error and status text scrubbed of passwords, API keys and tokens.

A URL's password (``redis://user:S3cret@host``) shows as ``***``; so does the value of
every secret the process was configured with (``OPENAI_API_KEY``, the password in
``REDIS_URL``, any ``*_PASSWORD``, ``*_TOKEN``, ``*_API_KEY``, ``*_SECRET`` variable), and
any ``Bearer`` token, wherever it appears.
"""

from __future__ import annotations

import logging
import os
import re
from urllib.parse import unquote

MASK = "***"

# scheme://[user]:password@  (the password ends at the last @ before the host)
_URL_CREDENTIALS = re.compile(
    r"(?P<scheme>[a-z][a-z0-9+.-]*://)(?P<user>[^:/@\s]*):(?P<password>[^@\s]+)@"
)
_BEARER = re.compile(r"(?i)(bearer\s+)[A-Za-z0-9._~+/=-]{8,}")
_SECRET_NAMES = re.compile(r"(PASSWORD|TOKEN|API_KEY|SECRET)$")
SHORTEST = 8
"""Configured secret values shorter than this are not searched for in text (a URL's
password is hidden whatever its length): a short value (a test's ``OPENAI_API_KEY=test``)
is too likely to be an ordinary word of a log line, an error or an event (``tests``,
``pytest``), which masking it would garble; a real key or password is longer."""


def redact_url(url: str) -> str:
    """The URL with its password as ``***`` (the user name stays, to say who)."""
    return _URL_CREDENTIALS.sub(lambda m: f"{m['scheme']}{m['user']}:{MASK}@", url)


def configured_secrets(environ: dict[str, str] | None = None) -> list[str]:
    """The secret values this process was given, longest first."""
    env = os.environ if environ is None else environ
    found = {v for k, v in env.items() if _SECRET_NAMES.search(k) and len(v) >= SHORTEST}
    for name in ("REDIS_URL", "LOOPLINE_REDIS_URL"):
        match = _URL_CREDENTIALS.search(env.get(name, ""))
        if match and len(match["password"]) >= SHORTEST:
            found.update({match["password"], unquote(match["password"])})
    return sorted(found, key=len, reverse=True)


def redact(text: str, secrets: list[str] | None = None) -> str:
    """``text`` with URL passwords, Bearer tokens and the configured secrets hidden."""
    text = _BEARER.sub(lambda m: m[1] + MASK, redact_url(text))
    for secret in configured_secrets() if secrets is None else secrets:
        text = text.replace(secret, MASK)
    return text


def scrub(text: str) -> str:
    """``text`` that goes on the bus (a failure's error in an event, a dead letter's
    reason): URL passwords, Bearer tokens and the configured secrets hidden."""
    return redact(text)


class RedactingFormatter(logging.Formatter):
    """Formats a log record, then hides every secret in it (tracebacks included)."""

    def __init__(self, fmt: str | None = None) -> None:
        super().__init__(fmt)
        self._secrets = configured_secrets()

    def format(self, record: logging.LogRecord) -> str:
        return redact(super().format(record), self._secrets)


def install_redacting_logs(fmt: str, level: int = logging.INFO) -> None:
    """The process's log lines through ``RedactingFormatter`` (``logging.basicConfig``
    with secrets hidden)."""
    logging.basicConfig(level=level, format=fmt)
    for handler in logging.getLogger().handlers:
        handler.setFormatter(RedactingFormatter(fmt))
