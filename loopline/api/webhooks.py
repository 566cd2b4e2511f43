"""Webhooks as LangGraph's server has them: a run created with ``webhook=URL`` has its
run POSTed to that URL when it ends. This module holds the operator's policy for those
URLs and the record that a run has one; ``webhook_delivery`` sends them.

The policy is LangGraph's ``webhooks`` setting of ``langgraph.json``, given as JSON in
``LOOPLINE_API_WEBHOOKS`` (the same shape LangGraph reads from ``LANGGRAPH_WEBHOOKS``)::

    {"url": {"allowed_domains": ["hooks.example.com", "*.corp.example"],
             "require_https": true, "disable_loopback": true,
             "allowed_ports": [443], "max_url_length": 4096,
             "disable_private_ips": false},
     "headers": {"Authorization": "Bearer ${{ env.LG_WEBHOOK_TOKEN }}"},
     "env_prefix": "LG_WEBHOOK_",
     "allowed_fields": ["run_id", "status", "values"]}

As on LangGraph's server, a URL the policy refuses is answered 422 when the run (or the
cron) is created, so it is never called; loopback targets are refused unless the operator
sets ``disable_loopback`` to false, and link-local addresses (cloud metadata endpoints)
always.
"""

from __future__ import annotations

import asyncio
import functools
import ipaddress
import json
import os
import re
import time
from typing import Any
from urllib.parse import urlsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, SettingsConfigDict

from contracts.streams import Names
from loopline.api.wire import BadRequest

LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "host.docker.internal"})
"""Host names LangGraph's server counts as loopback before resolving them."""


class UrlPolicy(BaseModel):
    """``webhooks.url`` of LangGraph's configuration, with its defaults."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    allowed_domains: tuple[str, ...] = ()
    """Exact hosts, or ``*.example.com`` for its subdomains (not the apex); empty: any
    public host."""
    require_https: bool = False
    disable_loopback: bool = True
    allowed_ports: tuple[int, ...] | None = None
    max_url_length: int = Field(4096, ge=1)
    disable_private_ips: bool = False


PAYLOAD_FIELDS = frozenset(
    {
        "run_id", "thread_id", "assistant_id", "created_at", "updated_at", "metadata",
        "kwargs", "multitask_strategy", "status", "run_started_at", "run_ended_at",
        "webhook_sent_at", "values", "error",
    }
)  # fmt: skip
"""The fields of a webhook's body that ``allowed_fields`` may keep (LangGraph's list)."""

TEMPLATE = re.compile(r"\$\{\{\s*([^}]+?)\s*\}\}")
"""``${{ env.VAR }}`` in a header's value: the environment's ``VAR``, read at start."""


class WebhookPolicy(BaseModel):
    """The operator's ``webhooks`` setting: which URLs may be called, the headers every
    webhook request carries (``${{ env.VAR }}`` in a value is read from the environment
    when the gateway starts; ``VAR`` must begin with ``env_prefix``), and the fields of
    the body sent (``allowed_fields``; all when not set)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    url: UrlPolicy = Field(default_factory=UrlPolicy)
    headers: dict[str, str] = Field(default_factory=dict)
    env_prefix: str = "LG_WEBHOOK_"
    allowed_fields: frozenset[str] | None = None

    @field_validator("allowed_fields")
    @classmethod
    def _known_fields(cls, value: frozenset[str] | None) -> frozenset[str] | None:
        unknown = sorted(set(value or ()) - PAYLOAD_FIELDS)
        if unknown:
            raise ValueError(
                f"webhooks.allowed_fields contains invalid field '{unknown[0]}'. "
                f"Valid fields are: {sorted(PAYLOAD_FIELDS)}"
            )
        return value

    @model_validator(mode="after")
    def _rendered_headers(self) -> WebhookPolicy:
        rendered = {k: TEMPLATE.sub(self._env_value, v) for k, v in self.headers.items()}
        object.__setattr__(self, "headers", rendered)  # frozen: rendered once, here
        return self

    def _env_value(self, found: re.Match[str]) -> str:
        expression = found.group(1).strip()
        var = expression.removeprefix("env.")
        if var == expression or not var or "." in var:
            raise ValueError(
                "webhook headers: only env.VAR references are allowed "
                f"(e.g. ${{{{ env.{self.env_prefix}FOO_BAR }}}})"
            )
        if not var.startswith(self.env_prefix):
            raise ValueError(
                f"webhook headers: environment variable name '{var}' must start with the "
                f"configured env_prefix '{self.env_prefix}'"
            )
        value = os.environ.get(var)
        if value is None:
            raise ValueError(f"webhook headers: missing required environment variable '{var}'")
        return value

    def body(self, payload: dict[str, Any]) -> dict[str, Any]:
        """``payload`` with only the ``allowed_fields``."""
        if not self.allowed_fields:
            return payload
        return {k: v for k, v in payload.items() if k in self.allowed_fields}

    async def check(self, url: str) -> None:
        """``BadRequest`` (422) with LangGraph's reason when ``url`` may not be called."""
        policy = self.url
        if len(url) > policy.max_url_length:
            raise BadRequest("Webhook URL too long")
        if url.startswith("/"):
            raise BadRequest(
                "Webhook URLs relative to the server are not supported: give an absolute "
                "http(s) URL"
            )
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https"):
            raise BadRequest(f"Webhook URL must be http or https: {url!r}")
        if policy.require_https and parts.scheme != "https":
            raise BadRequest("Webhook must use https")
        try:
            port = parts.port or (443 if parts.scheme == "https" else 80)
        except ValueError as exc:
            raise BadRequest(f"Invalid webhook URL: {exc}") from exc
        if policy.allowed_ports and port not in policy.allowed_ports:
            raise BadRequest(f"Webhook port {port} not allowed")
        host = (parts.hostname or "").lower()
        if not host:
            raise BadRequest(f"Invalid webhook hostname '{host}'")
        if policy.allowed_domains and not self._allowed(host):
            raise BadRequest("Webhook domain not allowed")
        blocked = self._blocked_address(host, await _addresses(host))
        if blocked:
            raise BadRequest(f"Webhook host blocked: {blocked}")

    def _allowed(self, host: str) -> bool:
        for pattern in (d.strip().lower() for d in self.url.allowed_domains):
            if pattern.startswith("*.") and host.endswith(pattern[1:]):
                return True
            if host == pattern:
                return True
        return False

    def _blocked_address(
        self, host: str, addresses: list[ipaddress.IPv4Address | ipaddress.IPv6Address]
    ) -> str:
        """Why ``host`` may not be called for where it points ("" when it may). A name is
        resolved, so one that points at loopback counts as loopback."""
        if host in LOOPBACK_NAMES and self.url.disable_loopback:
            return f"{host} is a loopback host (webhooks.url.disable_loopback)"
        for address in addresses:
            if address.is_link_local:
                return f"{host} resolves to a link-local address ({address})"
            if address.is_loopback and self.url.disable_loopback:
                return f"{host} resolves to loopback ({address}; webhooks.url.disable_loopback)"
            if address.is_private and not address.is_loopback and self.url.disable_private_ips:
                return f"{host} resolves to a private address ({address})"
        return ""


async def _addresses(host: str) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    try:
        return [ipaddress.ip_address(host)]
    except ValueError:
        pass
    try:
        found = await asyncio.get_running_loop().getaddrinfo(host, None)
    except OSError:
        return []  # a name that does not resolve now fails when it is called, and is logged
    return [ipaddress.ip_address(str(info[4][0]).partition("%")[0]) for info in found]


class _Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="LOOPLINE_API_", extra="ignore")

    webhooks: str = ""
    """LangGraph's ``webhooks`` setting as JSON; empty: its defaults."""


class BadWebhookSettings(ValueError):
    """``LOOPLINE_API_WEBHOOKS`` is not LangGraph's ``webhooks`` setting."""


@functools.cache
def policy() -> WebhookPolicy:
    """The operator's policy, read once from ``LOOPLINE_API_WEBHOOKS``."""
    return parse_policy(_Settings().webhooks)


def parse_policy(text: str) -> WebhookPolicy:
    if not text.strip():
        return WebhookPolicy()
    try:
        return WebhookPolicy.model_validate(json.loads(text))
    except (ValueError, ValidationError) as exc:
        raise BadWebhookSettings(
            f"LOOPLINE_API_WEBHOOKS must be LangGraph's webhooks setting as JSON, e.g. "
            f'{{"url": {{"allowed_domains": ["hooks.example.com"]}}}}: {exc}'
        ) from exc


def queue_webhook(pipe: Any, names: Names, run_id: str, url: str, keep_s: int) -> None:
    """Record, on ``pipe`` (the run's own submission), that ``run_id`` has a webhook: a
    sender of any gateway replica posts it once the run ends."""
    pipe.set(names.api_webhook(run_id), url, ex=keep_s)
    pipe.zadd(names.api_webhooks, {run_id: int(time.time() * 1000)})
