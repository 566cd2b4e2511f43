"""The gateway's settings (``LOOPLINE_API_*``) and its API keys, each naming the tenant
(prefix) whose runs it may start and read.

``LOOPLINE_API_KEYS`` is a comma-separated list of ``KEY=PREFIX`` pairs, e.g.
``LOOPLINE_API_KEYS="k-acme-1=acme,k-acme-2=acme,k-beta=beta"``: a request's ``x-api-key``
header (what ``langgraph_sdk`` sends, from ``api_key=`` or ``LANGGRAPH_API_KEY``) picks
its tenant. With no keys configured the gateway serves the default prefix
(``LOOPLINE_PREFIX``) to clients on this machine only, as ``langgraph dev`` does, and
refuses to listen on any other interface.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from pydantic_settings import BaseSettings, SettingsConfigDict

from loopline.acl import check_prefix

DEFAULT_PORT = 2024
"""The port of ``langgraph dev``: clients' defaults point there."""


class ApiSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="LOOPLINE_API_", extra="ignore")

    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    keys: str = ""
    """``KEY=PREFIX[,KEY=PREFIX...]``; empty: the default prefix, local clients only."""
    cors_origins: str = ""
    """Web origins whose pages may call the API from a browser (comma-separated, e.g.
    ``https://chat.example.com``; ``*`` for any). None by default: a page of another
    site must not drive the runs of whoever opens it."""

    @property
    def origins(self) -> list[str]:
        return [o.strip() for o in self.cors_origins.split(",") if o.strip()]


class BadKeys(ValueError):
    """``LOOPLINE_API_KEYS`` is not a list of ``KEY=PREFIX`` pairs."""


def parse_keys(text: str) -> dict[str, str]:
    """``KEY=PREFIX`` pairs as {key: prefix}; a malformed pair or prefix is refused whole
    (a gateway that silently dropped a key would lock its tenant out)."""
    found: dict[str, str] = {}
    for pair in (p.strip() for p in text.split(",")):
        if not pair:
            continue
        key, sep, prefix = pair.partition("=")
        key, prefix = key.strip(), prefix.strip()
        if not sep or not key or not prefix:
            raise BadKeys(
                "LOOPLINE_API_KEYS takes comma-separated KEY=PREFIX pairs, "
                f"e.g. 'k1=acme,k2=beta' (one pair is {_masked(pair)!r})"
            )
        try:
            check_prefix(prefix)
        except ValueError as exc:
            raise BadKeys(f"LOOPLINE_API_KEYS: {exc}") from exc
        found[key] = prefix
    return found


def _masked(pair: str) -> str:
    key, _, rest = pair.partition("=")
    return f"{key[:3]}...={rest}" if rest else f"{key[:3]}..."


def is_loopback(host: str) -> bool:
    """A host name or address that only this machine reaches."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class Tenancy:
    """Who may call: by API key, or (no keys) local clients on the default prefix."""

    keys: dict[str, str]
    default_prefix: str

    @property
    def open_locally(self) -> bool:
        return not self.keys

    def prefix_for(self, api_key: str | None, client_host: str | None) -> str | None:
        """The tenant of a request, or None when it may not call."""
        if self.open_locally:
            return self.default_prefix if client_host and is_loopback(client_host) else None
        if api_key is None:
            return None
        return self.keys.get(api_key)
