"""The agent spec: what ``create_agent`` was given, as data every service can read.

A spec is stored once under its content hash (``agent_id``); events carry the id only.
A ``DeployedAgent`` is the operator's registration of a spec by name and version: what a
task names (``TaskSubmitted.agent``), with the overrides it allows.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator


class MiddlewareSpec(BaseModel):
    """One middleware: its class name and constructor parameters.

    Agent files write it flat, ``{"type": "ContextEditingMiddleware", "edits": [...]}``;
    the keys other than ``type`` become ``params``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    type: str
    params: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _collect_flat_params(cls, data: Any) -> Any:
        if isinstance(data, dict) and "params" not in data:
            params = {k: v for k, v in data.items() if k != "type"}
            return {"type": data.get("type"), "params": params}
        return data


class ModelSpec(BaseModel):
    """The chat model: an OpenAI-compatible model name and its settings.

    ``name`` may carry LangChain's provider prefix (``openai:gpt-4o-mini``). ``ref`` names an
    in-process model object registered by the embedded runtime (``local:...``).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    base_url: str | None = None
    params: dict[str, Any] = Field(default_factory=dict)
    ref: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _from_string(cls, data: Any) -> Any:
        if isinstance(data, str):
            return {"name": data}
        return data

    @property
    def model_name(self) -> str:
        """The name without LangChain's ``provider:`` prefix."""
        return self.name.split(":", 1)[1] if ":" in self.name else self.name


class AgentSpec(BaseModel):
    """Everything that defines an agent, the fields of ``create_agent``.

    ``tools`` are import paths (``package.module:name``) or, in embedded mode, ``local:``
    references to in-process callables. ``tool_schemas`` are the OpenAI tool schemas the
    model sees, computed where the tools are importable; when absent the model service
    imports the tools to compute them.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: ModelSpec
    tools: list[str] = Field(default_factory=list)
    system_prompt: str | None = None
    middleware: list[MiddlewareSpec] = Field(default_factory=list)
    tool_schemas: list[dict[str, Any]] | None = None
    name: str = "agent"
    tool_timeout_s: float | None = Field(default=None, gt=0)
    """How long one tool call may run (None: the tools service's LOOPLINE_TOOL_TIMEOUT_S)."""
    tool_timeouts: dict[str, float] = Field(default_factory=dict)
    """Per tool name, overriding ``tool_timeout_s``."""
    context: dict[str, Any] | None = None
    """The run's context (LangGraph's ``Runtime.context``, what middleware hooks read):
    set by a task's ``context`` override of a deployed agent."""

    @property
    def agent_id(self) -> str:
        """Content hash: equal specs share one stored copy (a spec without a context
        hashes as it did before the field existed)."""
        exclude = {"context"} if self.context is None else None
        canonical = json.dumps(self.model_dump(mode="json", exclude=exclude), sort_keys=True)
        return hashlib.sha256(canonical.encode()).hexdigest()[:16]

    def middleware_of(self, type_name: str) -> list[MiddlewareSpec]:
        return [m for m in self.middleware if m.type == type_name]


OVERRIDABLE = ("system_prompt", "max_steps", "context")
"""What a task may override of a deployed agent, at most; a registration allows these
unless the operator narrows them."""

AGENT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")


def parse_agent_ref(ref: str) -> tuple[str, int | None]:
    """``NAME`` (the latest version) or ``NAME@VERSION``; ValueError for anything else."""
    name, sep, version = ref.partition("@")
    if not AGENT_NAME.match(name) or (sep and not version.isdigit()):
        raise ValueError(
            f"agent {ref!r} must be NAME or NAME@VERSION (NAME: letters, digits, '_', '.', '-')"
        )
    return name, int(version) if sep else None


class DeployedAgent(BaseModel):
    """An agent the operator registered (``loopline deploy``): stored in the registry hash
    (``Names.deployed``) as field ``NAME@VERSION``; tasks name it instead of carrying a
    spec. Each deploy of a changed registration is a new version."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    name: str
    version: int = Field(ge=1)
    spec: AgentSpec
    overridable: list[str] = Field(default_factory=lambda: list(OVERRIDABLE))
    """The fields a task may override (a subset of ``OVERRIDABLE``)."""
    max_steps: int | None = Field(default=None, ge=1)
    """The agent's step limit (None: the loop's LOOPLINE_MAX_STEPS)."""
    digest: str = ""
    """Content hash of spec, overridable and max_steps: an unchanged deploy is no new
    version."""
    deployed_at: float = 0.0

    @property
    def ref(self) -> str:
        return f"{self.name}@{self.version}"
