"""A tool and a detector for the PII tests, importable by path from the service processes
(a callable detector travels as ``{"callable": "tests.pii_helpers:detect_api_key"}``)."""

from __future__ import annotations

import re
from typing import Any

# One of each kind of PII the tests detect, plus a card number that fails the Luhn check
# (which must not be detected as a credit card).
EMAIL = "ada@example.com"
CARD = "4111 1111 1111 1111"
BAD_CARD = "4111 1111 1111 1112"
IP = "192.168.1.10"
MAC = "00:1A:2B:3C:4D:5E"
URL = "https://example.org/u/ada"
SSN = "123-45-6789"
API_KEY = "sk-abcdef1234567890"
SSN_PATTERN = r"\b\d{3}-\d{2}-\d{4}\b"
PII_LINE = (
    f"mail {EMAIL} card {CARD} old card {BAD_CARD} ip {IP} mac {MAC} url {URL} "
    f"ssn {SSN} key {API_KEY}"
)


def contact(name: str) -> str:
    """Look up the record of a contact by name."""
    if name == "ada":
        return f"Ada Lovelace: {PII_LINE}"
    return f"no record for {name}"


def detect_api_key(content: str) -> list[dict[str, Any]]:
    """A user's detector; it answers with ``text`` instead of ``value``, which LangChain
    normalizes."""
    return [
        {"text": m.group(), "start": m.start(), "end": m.end()}
        for m in re.finditer(r"\bsk-[A-Za-z0-9]{8,}\b", content)
    ]
