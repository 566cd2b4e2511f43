"""The agent spec: what ``create_agent`` was given, as data every service can read.

A spec is stored once under its content hash (``agent_id``); events carry the id only.
A ``DeployedAgent`` is the operator's registration of a spec by name and version: what a
task names (``TaskSubmitted.agent``), with the overrides it allows.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from contracts.messages import SystemMessage

RunMode = Literal["sync", "async"]
"""How a run was started: LangChain's ``invoke`` (sync) or ``ainvoke`` (async)."""


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


class ResponseFormatSpec(BaseModel):
    """``create_agent(response_format=...)``: LangChain's ``ToolStrategy``,
    ``ProviderStrategy`` or a bare schema (``auto``: the provider's JSON-schema mode where
    LangChain finds the model supports it, else the tool).

    ``schema`` is an import path (``package.module:Class``, a pydantic model, dataclass or
    TypedDict, resolved through the import allow-list), a ``local:`` reference (embedded
    mode), a JSON schema dict, or a list of import paths: the union of those classes
    (``A | B``; ToolStrategy makes one structured-output tool per member, as LangChain's).
    """

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    strategy: Literal["auto", "tool", "provider"] = "auto"
    schema_: str | dict[str, Any] | list[str] = Field(alias="schema")
    tool_message_content: str | None = None
    """ToolStrategy's: the tool message that answers a valid structured call."""
    handle_errors: bool | str = True
    """ToolStrategy's: retry after invalid arguments (True: LangChain's error template; a
    string: that message); False: the task fails."""
    strict: bool | None = None
    """ProviderStrategy's ``strict``."""
    ref: str | None = None
    """Embedded mode: a ``local:`` reference to the strategy object itself, for what is
    not data (``handle_errors`` given as exception types or a function)."""

    @model_validator(mode="before")
    @classmethod
    def _from_schema(cls, data: Any) -> Any:
        """Agent files may give the schema alone: an import path, a list of them (a
        union), or a JSON schema dict (any dict without a ``schema`` key), as LangChain
        takes a bare schema."""
        if isinstance(data, str | list) or (
            isinstance(data, dict) and "schema" not in data and "schema_" not in data
        ):
            return {"schema": data}
        return data


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
    system_message: SystemMessage | None = None
    """``create_agent(system_prompt=SystemMessage(...))`` when more than its text matters
    (content blocks, a name, ids): the system message as given. A task's
    ``system_prompt`` override replaces it."""
    middleware: list[MiddlewareSpec] = Field(default_factory=list)
    tool_schemas: list[dict[str, Any]] | None = None
    name: str = "agent"
    tool_timeout_s: float | None = Field(default=None, gt=0)
    """How long one tool call may run (None: the tools service's LOOPLINE_TOOL_TIMEOUT_S)."""
    tool_timeouts: dict[str, float] = Field(default_factory=dict)
    """Per tool name, overriding ``tool_timeout_s``."""
    context: dict[str, Any] | None = None
    """The run's context (LangGraph's ``Runtime.context``, what middleware hooks and
    ``ToolRuntime.context`` read), as JSON: set by a task's ``context`` override of a
    deployed agent, or by ``invoke(..., context=...)``. With ``context_schema`` a
    dataclass or pydantic model, hooks and tools get an instance of it, as LangGraph
    coerces a dict context."""
    context_schema: str | None = None
    """``create_agent(context_schema=...)``: the class's import path
    (``package.module:Class``, through the import allow-list) or, embedded, its
    ``local:`` reference."""
    state_schema: str | None = None
    """``create_agent(state_schema=...)``: the ``AgentState`` TypedDict whose keys the
    task keeps (beside the middleware's own ``state_schema`` keys), by import path or
    ``local:`` reference. Its keys are taken from the input, kept across the run and
    returned in the result, as LangGraph's channels are."""
    response_format: ResponseFormatSpec | None = None
    """The structured answer the agent gives (``structured_response``)."""
    message_name: str | None = None
    """``create_agent(name=...)`` as LangChain sets it on the agent's AI messages (None:
    no name was given, the AI messages have none)."""
    run_mode: RunMode | None = None
    """Which variant of each middleware hook runs, as LangChain picks it: ``"sync"`` for
    a run started by ``invoke``/``stream`` (``before_model``, ``wrap_model_call``; an
    async-only hook fails as LangChain's does), ``"async"`` for ``ainvoke``/``astream``
    (``abefore_model``, ...; a sync-only ``wrap_*`` hook fails, a sync-only node hook
    runs in a thread). None (a task from the bus or the CLI): the async variant where
    there is one, else the sync one. Set per task from ``TaskSubmitted.run_mode``."""
    recursion_limit: int | None = Field(default=None, ge=1)
    """The run's ``config["recursion_limit"]`` (LangGraph's supersteps), set per task
    from ``TaskSubmitted.recursion_limit``: the loop derives the task's step limit from
    it (``services.tasks.recursion``). None: the task's ``max_steps``."""
    run_config: dict[str, Any] | None = None
    """The run's LangChain config besides its thread and limit (``{"tags": [...],
    "metadata": {...}}``), set per task from ``TaskSubmitted``: what a hook or a tool
    that takes LangGraph's ``RunnableConfig`` finds in it. None: none given."""

    @property
    def agent_id(self) -> str:
        """Content hash: equal specs share one stored copy (a spec without a context
        hashes as it did before the field existed)."""
        # fields that are None hash as they did before the field existed
        optional = (
            "context",
            "response_format",
            "message_name",
            "system_message",
            "context_schema",
            "state_schema",
            "run_mode",
            "recursion_limit",
            "run_config",
        )
        exclude = {k for k in optional if getattr(self, k) is None}
        canonical = json.dumps(
            self.model_dump(mode="json", exclude=exclude, by_alias=True), sort_keys=True
        )
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
