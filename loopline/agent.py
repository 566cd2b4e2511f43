"""``create_agent``: LangChain's signature, loopline's pipeline underneath.

With ``REDIS_URL`` (or ``redis_url=``) set, tasks go to that deployment's services. Without,
the agent starts the embedded server and every service in this process; then tools and
the model may be any in-process objects.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any

from contracts.agent import AgentSpec, ModelSpec, ResponseFormatSpec
from contracts.events import AnyEvent, ApprovalRequested, TaskFailed, ToolInterrupted
from contracts.messages import (
    MESSAGE_TYPES,
    Message,
    SystemMessage,
    from_langchain,
    to_langchain,
)
from loopline.client import Client, TaskFailedError
from services.errors import ConfigurationError
from services.settings import Settings
from services.spec import imports, local, structured, toolbox
from services.spec.middleware import to_spec
from services.spec.validation import check_agent


def resolve_url(redis_url: str | None = None) -> tuple[str, bool]:
    """The Redis URL to use and whether it is the embedded server."""
    url = redis_url or os.environ.get("REDIS_URL")
    if url:
        return url, False
    from loopline.embedded import embedded_url, trust_this_process

    trust_this_process()  # its own operator: what it names, it runs itself
    return embedded_url(), True


def _model_spec(model: Any, embedded: bool) -> ModelSpec:
    if isinstance(model, ModelSpec):
        return model
    if isinstance(model, str | dict):
        return ModelSpec.model_validate(model)
    from langchain_core.language_models import BaseChatModel

    if not isinstance(model, BaseChatModel):
        raise TypeError(f"model must be a name, a ModelSpec or a chat model, not {model!r}")
    if embedded:
        from services.spec.models import register_local_model

        name = str(getattr(model, "model_name", None) or type(model).__name__)
        return ModelSpec(name=name, ref=register_local_model(model))
    if type(model).__name__ != "ChatOpenAI":
        raise TypeError(
            f"{type(model).__name__} cannot travel to the model service; give a model name "
            "(served by ChatOpenAI on OPENAI_BASE_URL) or run embedded (no REDIS_URL)"
        )
    base_url = getattr(model, "openai_api_base", None)
    if base_url and base_url != os.environ.get("OPENAI_BASE_URL"):
        raise TypeError(
            f"ChatOpenAI(base_url={base_url!r}) cannot travel to the model service: "
            "endpoints are the operator's (the model service's LOOPLINE_MODELS or "
            "OPENAI_BASE_URL); give the model by name"
        )
    params: dict[str, Any] = {}
    for key in ("temperature", "max_tokens", "top_p", "seed", "timeout", "max_retries"):
        value = getattr(model, key, None)
        if value is not None:
            params[key] = value
    return ModelSpec(name=str(model.model_name), params=params)  # type: ignore[attr-defined]


def _tool_refs(tools: Sequence[Any], embedded: bool) -> tuple[list[str], list[dict[str, Any]]]:
    refs: list[str] = []
    schemas: list[dict[str, Any]] = []
    for item in tools:
        ref = toolbox.register_local(item) if embedded and not isinstance(item, str) else None
        ref = ref or toolbox.tool_ref(item)
        if ref.startswith(toolbox.LOCAL_PREFIX) and not embedded:
            module = getattr(item, "__module__", None) or ""
            if module and module != "__main__" and not imports.is_allowed(module):
                raise TypeError(
                    f"tool {getattr(item, '__name__', item)!r}: module {module!r} is not "
                    f"allowed: add it to {imports.ALLOWED_ENV} (comma-separated module "
                    "prefixes) where the agent is deployed and run"
                )
            raise TypeError(
                f"tool {item!r} is not importable by path; with REDIS_URL set, tools must be "
                "module-level (package.module:name) so the tools service can import them"
            )
        refs.append(ref)
        schemas.append(toolbox.tool_schema(toolbox.resolve(ref)))
    return refs, schemas


def _schema_ref(schema: Any, embedded: bool) -> str | dict[str, Any]:
    """How a response schema travels: a JSON schema dict as it is; a class by import
    path, or (embedded) by ``local:`` reference when it has none."""
    if isinstance(schema, dict):
        return schema
    if not isinstance(schema, type):
        raise TypeError(
            f"response_format schema {schema!r} must be a pydantic model, dataclass, "
            "TypedDict or JSON schema dict (unions do not travel)"
        )
    module, qualname = schema.__module__, schema.__qualname__
    importable = module != "__main__" and "<" not in qualname
    if embedded:
        return local.register_instance(schema)
    if not importable:
        raise TypeError(
            f"response_format schema {qualname!r} is not importable by path; with "
            "REDIS_URL set, it must be module-level (package.module:Class)"
        )
    if not imports.is_allowed(module):
        raise TypeError(
            f"response_format schema {qualname!r}: module {module!r} is not allowed: add "
            f"it to {imports.ALLOWED_ENV} (comma-separated module prefixes) where the "
            "agent is deployed and run"
        )
    return f"{module}:{qualname}"


def _response_format_spec(response_format: Any, embedded: bool) -> ResponseFormatSpec | None:
    """LangChain's ``response_format`` as data: a ToolStrategy, ProviderStrategy or
    AutoStrategy, or a bare schema (the auto choice)."""
    from langchain.agents.structured_output import AutoStrategy, ProviderStrategy, ToolStrategy

    if response_format is None or isinstance(response_format, ResponseFormatSpec):
        return response_format
    if isinstance(response_format, ToolStrategy):
        handle = response_format.handle_errors
        data = isinstance(handle, bool | str)
        if not data and not embedded:
            raise TypeError(
                "ToolStrategy(handle_errors=...) travels as True, False or a message; "
                f"{handle!r} cannot (in-process, without REDIS_URL, it may be anything)"
            )
        return ResponseFormatSpec(
            strategy="tool",
            schema_=_schema_ref(response_format.schema, embedded),
            tool_message_content=response_format.tool_message_content,
            handle_errors=handle if isinstance(handle, bool | str) else True,
            # embedded: the strategy object itself, for handle_errors that is code
            ref=None if data else local.register_instance(response_format),
        )
    if isinstance(response_format, ProviderStrategy):
        return ResponseFormatSpec(
            strategy="provider",
            schema_=_schema_ref(response_format.schema, embedded),
            strict=response_format.schema_spec.strict,
        )
    schema = (
        response_format.schema if isinstance(response_format, AutoStrategy) else response_format
    )
    return ResponseFormatSpec(strategy="auto", schema_=_schema_ref(schema, embedded))


def _system_fields(system_prompt: Any) -> dict[str, Any]:
    """``system_prompt`` as LangChain takes it: text, or a SystemMessage (kept whole
    when more than its text would reach the model)."""
    if system_prompt is None or isinstance(system_prompt, str):
        return {"system_prompt": system_prompt}
    from langchain_core.messages import SystemMessage as LcSystemMessage

    if not isinstance(system_prompt, LcSystemMessage):
        raise TypeError(f"system_prompt must be a str or a SystemMessage, not {system_prompt!r}")
    message = from_langchain(system_prompt)
    if isinstance(message.content, str) and message == SystemMessage(content=message.content):
        return {"system_prompt": message.content}
    return {"system_prompt": message.text() or None, "system_message": message}


class Agent:
    """A loopline agent: ``invoke``/``ainvoke``/``astream`` like a LangChain agent."""

    def __init__(self, spec: AgentSpec, *, url: str, embedded: bool, settings: Settings):
        self.spec = spec
        self.url = url
        self.embedded = embedded
        self.settings = settings
        self.max_steps: int | None = None
        self.response_schema: Any = None
        """The ``response_format`` schema object, to give ``structured_response`` back
        as LangChain does (an instance of a pydantic model or dataclass)."""
        self.deployed: str | None = None
        """``NAME@VERSION`` this agent was registered as (with REDIS_URL: the services
        run only deployed agents, so the first task registers it)."""

    async def _agent_ref(self, client: Client) -> AgentSpec | str:
        """What a task names: the spec itself on the embedded default (the process is
        its own operator), else the registration, made once (an unchanged spec keeps its
        version)."""
        if self.embedded:
            return self.spec
        if self.deployed is None:
            found = await client.deploy(self.spec, max_steps=self.max_steps)
            self.deployed = found.ref
        return self.deployed

    def _start_services(self) -> None:
        if self.embedded:
            from loopline.embedded import ensure_services

            ensure_services(self.url, self.settings)

    def client(self) -> Client:
        return Client(self.url, self.settings.prefix)

    async def asubmit(self, input: dict[str, Any], *, task_id: str | None = None) -> str:
        """Submit a task and return its id at once."""
        self._start_services()
        messages = _input_messages(input)
        async with self.client() as client:
            agent = await self._agent_ref(client)
            max_steps = self.max_steps if self.embedded else None  # registered with it
            return await client.submit(agent, messages, task_id=task_id, max_steps=max_steps)

    async def aresult(
        self, task_id: str, *, after: str = "0", answered: Sequence[str] = ()
    ) -> dict[str, Any]:
        """Wait for the task and return ``{"messages": [...], "todos": [...]}``; a task
        waiting for a human returns with ``"__interrupt__"`` (LangChain's key) instead:
        the HITLRequest (batched mode), or every open ToolApprovalRequest (per-call mode).
        ``answered``: per-call decisions just sent for these calls (see ``aresume``)."""
        async with self.client() as client:
            if answered:
                _, outcome = await client.outcome_of_decisions(task_id, answered, after=after)
            else:
                _, outcome = await client.outcome(task_id, after=after)
            if isinstance(outcome, TaskFailed):
                raise TaskFailedError(outcome)
            if isinstance(outcome, ToolInterrupted):  # a decision the call's schema refused
                raise ValueError(f"decision for call {outcome.call.id} refused: {outcome.error}")
            open_calls = (
                await client.waiting_calls(task_id)
                if isinstance(outcome, ApprovalRequested)
                and outcome.request.get("type") == "tool_approval"
                else []
            )
            messages = await client.messages(task_id)
            todos = await client.todos(task_id)
            given, structured_json = await client.structured_response(task_id)
        result: dict[str, Any] = {
            "messages": [to_langchain(m) for m in messages],
            "todos": todos,
            "task_id": task_id,
        }
        if self.spec.response_format is not None:
            # LangChain's key is there, None, when the agent ended without one
            result["structured_response"] = self._structured(structured_json) if given else None
        if isinstance(outcome, ApprovalRequested):
            requests = [r.request for r in open_calls] or [outcome.request]
            result["__interrupt__"] = requests
        return result

    def _structured(self, value: Any) -> Any:
        rf = self.spec.response_format
        schema = self.response_schema
        if schema is None and rf is not None:
            try:
                schema = structured.response_schema(rf)
            except ConfigurationError:  # not importable here: the JSON as stored
                return value
        return structured.from_json(schema, value)

    async def aresume(
        self, task_id: str, decisions: Sequence[dict[str, Any]] | Mapping[str, Any]
    ) -> dict[str, Any]:
        """Answer a waiting task with decisions and wait for its next outcome. Batched
        mode: a list, one decision per gated call. Per-call mode: ``{tool_call_id:
        decision}``, or one decision when one call waits (``Client.decide``)."""
        self._start_services()
        async with self.client() as client:
            after = await client.last_entry(task_id)
            answered = await client.decide(task_id, decisions)
        return await self.aresult(task_id, after=after, answered=answered)

    def resume(
        self, task_id: str, decisions: Sequence[dict[str, Any]] | Mapping[str, Any]
    ) -> dict[str, Any]:
        return asyncio.run(self.aresume(task_id, decisions))

    async def acancel(self, task_id: str, reason: str = "cancelled by request") -> None:
        async with self.client() as client:
            await client.cancel(task_id, reason)

    async def ainvoke(self, input: dict[str, Any]) -> dict[str, Any]:
        return await self.aresult(await self.asubmit(input))

    def invoke(self, input: dict[str, Any]) -> dict[str, Any]:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(self.ainvoke(input))
        raise RuntimeError("invoke() called inside a running event loop; use ainvoke()")

    async def astream(self, input: dict[str, Any]) -> AsyncIterator[AnyEvent]:
        """The task's events as they happen, ending with TaskCompleted or TaskFailed."""
        task_id = await self.asubmit(input)
        async with self.client() as client:
            async for _, event in client.events(task_id):
                yield event

    async def aevents(self, task_id: str, *, after: str = "0") -> AsyncIterator[AnyEvent]:
        async with self.client() as client:
            async for _, event in client.events(task_id, after=after):
                yield event


def _input_messages(input: dict[str, Any]) -> list[Message]:
    if not isinstance(input, dict) or "messages" not in input:
        raise TypeError('input must be a dict with "messages", like {"messages": [...]}')
    raw = input["messages"]
    if isinstance(raw, str):
        raw = [{"role": "user", "content": raw}]
    if not raw:
        # LangChain would call the model with no messages; the loop refuses such a task,
        # so the caller hears it here rather than from a task that fails after submitting.
        raise ValueError('the input needs at least one message: "messages" is empty')
    return [m if isinstance(m, MESSAGE_TYPES) else from_langchain(m) for m in raw]


def create_agent(
    model: Any,
    tools: Sequence[Callable[..., Any] | Any] | None = None,
    *,
    system_prompt: str | Any | None = None,
    middleware: Sequence[Any] = (),
    response_format: Any = None,
    name: str | None = None,
    max_steps: int | None = None,
    tool_timeout_s: float | None = None,
    tool_timeouts: dict[str, float] | None = None,
    redis_url: str | None = None,
    settings: Settings | None = None,
) -> Agent:
    """Build an agent. ``model``: a name (``"openai:gpt-4o-mini"``) or a chat model;
    ``tools``: LangChain tools, typed functions with docstrings, or import paths;
    ``middleware``: loopline's or LangChain's built-in middleware instances, or specs;
    ``tool_timeout_s`` / ``tool_timeouts`` (per tool name): how long a tool call may run
    (default: the tools service's ``LOOPLINE_TOOL_TIMEOUT_S``); ``response_format``:
    LangChain's ToolStrategy, ProviderStrategy or a bare schema, giving
    ``structured_response``; ``name``: set on the agent's AI messages, as LangChain
    does."""
    settings = settings or Settings()
    url, embedded = resolve_url(redis_url or settings.redis_url)
    refs, schemas = _tool_refs(list(tools or ()), embedded)
    spec = AgentSpec(
        model=_model_spec(model, embedded),
        tools=refs,
        **_system_fields(system_prompt),
        middleware=[to_spec(m, embedded=embedded) for m in middleware],
        tool_schemas=schemas,
        name=name or "agent",
        message_name=name,
        response_format=_response_format_spec(response_format, embedded),
        tool_timeout_s=tool_timeout_s,
        tool_timeouts=dict(tool_timeouts or {}),
    )
    check_agent(spec)  # a parameter of the wrong type fails here, before any task runs
    agent = Agent(spec, url=url, embedded=embedded, settings=settings)
    agent.max_steps = max_steps
    if agent.spec.response_format is not None:
        agent.response_schema = structured.response_schema(agent.spec.response_format)
    return agent


async def subscribe(
    stream: str,
    *,
    from_start: bool = False,
    redis_url: str | None = None,
    prefix: str | None = None,
) -> AsyncIterator[AnyEvent]:
    """Follow a public stream: ``"todos"`` (TodosUpdated) or ``"edits"`` (ContextEdited)."""
    if stream not in ("todos", "edits", "dlq", "approvals"):
        raise ValueError('stream must be "todos", "edits", "approvals" or "dlq"')
    url, _ = resolve_url(redis_url)
    async with Client(url, prefix or Settings().prefix) as client:
        async for _, event in client.subscribe(stream, from_start=from_start):
            yield event


__all__ = ["Agent", "TaskFailed", "TaskFailedError", "create_agent", "subscribe"]
