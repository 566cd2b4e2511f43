"""Model endpoints are the operator's: an agent names a model, the model service's
configuration says where that model is served and with which key.

- ``LOOPLINE_MODELS``: a named endpoint per model, as JSON text or the path of a JSON or
  TOML file: ``{"gpt-4o-mini": {"base_url": "https://...", "api_key_env":
  "OPENAI_API_KEY", "model": "gpt-4o-mini-2024-07-18"}}`` (every field optional;
  ``api_key_env`` names the variable that holds the key, so keys stay in the process's
  secrets, where log redaction knows them: name it ``*_API_KEY``; ``model`` is the name the
  endpoint knows the model by);
- ``OPENAI_BASE_URL`` / ``OPENAI_API_KEY``: the default endpoint, for the models the
  file does not name;
- ``LOOPLINE_ALLOW_FAKE_MODEL=true``: the scripted ``fake`` model may run here (tests,
  demos, benchmarks; the embedded default).

A spec that carries an endpoint itself (``base_url``, or a key, URL, header or client
among the model's parameters) is refused wherever it is checked: whoever wrote it would
otherwise receive the operator's key.
"""

from __future__ import annotations

import json
import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from contracts.agent import ModelSpec
from services.errors import ConfigurationError

MODELS_ENV = "LOOPLINE_MODELS"
FAKE_ENV = "LOOPLINE_ALLOW_FAKE_MODEL"

ENDPOINT_PARAMS = frozenset(
    {
        "base_url",
        "openai_api_base",
        "api_base",
        "api_key",
        "openai_api_key",
        "organization",
        "openai_organization",
        "default_headers",
        "default_query",
        "http_client",
        "http_async_client",
        "openai_proxy",
        "proxy",
        "root_client",
        "root_async_client",
        "client",
        "async_client",
    }
)
"""ChatOpenAI settings that say where a request goes or what credential it carries."""

_TRUE = {"1", "true", "yes", "on"}
_FIELDS = {"base_url", "api_key_env", "model"}
_models: dict[str, dict[str, Endpoint]] = {}
_fake_default = False
"""Set by the embedded runtime (``allow_fake_by_default``)."""


@dataclass(frozen=True)
class Endpoint:
    """Where one model is served: the URL, the key (None: a server that needs none) and
    the name the server knows the model by."""

    model: str
    base_url: str | None = None
    api_key: str | None = field(default=None, repr=False)  # never in a message


def allow_fake_by_default() -> None:
    """The embedded default: the scripted model may run unless the operator said no."""
    global _fake_default
    _fake_default = True


def fake_allowed() -> bool:
    raw = os.environ.get(FAKE_ENV)
    return _fake_default if raw is None else raw.strip().lower() in _TRUE


def is_fake(spec: ModelSpec) -> bool:
    return spec.ref is None and (spec.name == "fake" or spec.name.startswith("fake:"))


def endpoint_problem(spec: ModelSpec) -> str | None:
    """Why a model spec may not run anywhere: it names an endpoint or a credential."""
    if spec.base_url:
        return (
            f"model {spec.name!r}: base_url is not allowed in an agent: endpoints are the "
            f"operator's (the model service's {MODELS_ENV} or OPENAI_BASE_URL); name the model"
        )
    given = sorted(set(spec.params) & ENDPOINT_PARAMS)
    if given:
        return (
            f"model {spec.name!r}: {', '.join(given)} is not allowed in an agent: endpoints "
            f"and keys are the operator's (the model service's {MODELS_ENV} or "
            "OPENAI_BASE_URL/OPENAI_API_KEY)"
        )
    return None


def model_problem(spec: ModelSpec) -> str | None:
    """Why this process would not run the model: an endpoint in the spec, the fake model
    where it is off, a provider other than OpenAI-compatible ones."""
    found = endpoint_problem(spec)
    if found or spec.ref:
        return found
    if is_fake(spec):
        if fake_allowed():
            return None
        return (
            f"the scripted model {spec.name!r} is off here: set {FAKE_ENV}=true (tests, "
            "demos and benchmarks only)"
        )
    provider = spec.name.rpartition(":")[0]
    if provider and provider != "openai":
        return (
            f"model {spec.name!r}: only OpenAI-compatible endpoints are supported "
            "(use 'openai:NAME' or a plain name and set OPENAI_BASE_URL)"
        )
    return None


def configured_models(environ: dict[str, str] | None = None) -> dict[str, Endpoint]:
    """The named endpoints of ``LOOPLINE_MODELS`` (empty when unset); a bad file is one
    ConfigurationError line."""
    env = os.environ if environ is None else environ
    raw = env.get(MODELS_ENV, "").strip()
    if not raw:
        return {}
    cached = _models.get(raw) if environ is None else None
    if cached is not None:
        return cached
    data = _read(raw)
    if not isinstance(data, dict):
        raise ConfigurationError(f"{MODELS_ENV}: expected a mapping of model name to endpoint")
    found = {str(name): _endpoint(str(name), entry, env) for name, entry in data.items()}
    if environ is None:
        _models[raw] = found  # read once per process (a model is built per agent)
    return found


def _read(raw: str) -> Any:
    try:
        if raw.startswith("{"):
            return json.loads(raw)
        path = Path(raw)
        text = path.read_text()
        return tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)
    except OSError as exc:
        raise ConfigurationError(f"{MODELS_ENV}: cannot read {raw}: {exc.strerror}") from exc
    except (ValueError, tomllib.TOMLDecodeError) as exc:
        raise ConfigurationError(f"{MODELS_ENV}: not valid JSON/TOML: {exc}") from exc


def _endpoint(name: str, entry: Any, env: Any) -> Endpoint:
    if not isinstance(entry, dict) or set(entry) - _FIELDS:
        raise ConfigurationError(
            f"{MODELS_ENV}: model {name!r} must be a mapping of {', '.join(sorted(_FIELDS))}"
        )
    key = None
    if entry.get("api_key_env"):
        key = env.get(str(entry["api_key_env"]))
        if key is None:
            raise ConfigurationError(
                f"{MODELS_ENV}: model {name!r}: variable {entry['api_key_env']} is not set"
            )
    model = str(entry.get("model") or name)
    return Endpoint(model=model, base_url=entry.get("base_url"), api_key=key)


def default_endpoint(model: str, environ: dict[str, str] | None = None) -> Endpoint | None:
    env = os.environ if environ is None else environ
    base_url, key = env.get("OPENAI_BASE_URL"), env.get("OPENAI_API_KEY")
    if not (base_url or key):
        return None
    return Endpoint(model=model, base_url=base_url or None, api_key=key or None)


def endpoint_for(spec: ModelSpec, environ: dict[str, str] | None = None) -> Endpoint | None:
    """The operator's endpoint for the model the spec names: its own entry in
    ``LOOPLINE_MODELS`` (by the full name, then without ``openai:``), else the default
    endpoint; None when neither is configured."""
    named = configured_models(environ)
    found = named.get(spec.name) or named.get(spec.model_name)
    return found or default_endpoint(spec.model_name, environ)


def endpoint_configured(spec: ModelSpec) -> bool:
    """Whether this process could call the model the spec names."""
    return bool(spec.ref or is_fake(spec) or endpoint_for(spec) is not None)
