"""``create_agent``: LangChain's signature, loopline's pipeline underneath.

With ``REDIS_URL`` (or ``redis_url=``) set, tasks go to that deployment's services. Without,
the agent starts the embedded server and every service in this process; then tools and
the model may be any in-process objects.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import os
import time
import warnings
import weakref
from collections.abc import (
    AsyncGenerator,
    AsyncIterator,
    Awaitable,
    Callable,
    Iterator,
    Mapping,
    Sequence,
)
from functools import partial
from types import UnionType
from typing import Any, TypeVar, Union, get_args, get_origin

from langchain_core.runnables import Runnable, RunnableConfig
from langchain_core.runnables.config import merge_configs
from langgraph.errors import ParentCommand

from contracts.agent import AgentSpec, ModelSpec, ResponseFormatSpec, RunMode
from contracts.chunks import BLOCKS, SUBTASKS, Subtask
from contracts.events import (
    AnyEvent,
    ApprovalRequested,
    DecisionsRefused,
    TaskFailed,
    ToolInterrupted,
    new_task_id,
)
from contracts.messages import (
    MESSAGE_ADAPTER,
    MESSAGE_TYPES,
    Message,
    SystemMessage,
    from_langchain,
    to_langchain,
    with_input_ids,
)
from loopline.checkpoints import (
    is_saver,
    take_in,
    write_run,
    write_update,
    written_by_loopline,
)
from loopline.client import Client
from loopline.conversation import (
    TOOLS_NODE,
    RunConfig,
    WaitingInterrupt,
    answers_of,
    is_command,
    state_codec,
    waiting_interrupts,
    with_pending,
)
from loopline.errors import TaskFailedError, decision_refusal_of, failure_of, refusal_of
from loopline.graph import GRAPH_ATTRIBUTES, GraphArguments, reference_graph, refuse_unimplemented
from loopline.history import START as START_NODE
from loopline.history import (
    ThreadHistory,
    current_snapshot,
    record_fork,
    record_update,
    set_working_copy,
    update_thread,
)
from loopline.nested import CallerNode, caller_node, earlier_run, for_caller, interrupted
from loopline.result import AgentResult
from loopline.run_callbacks import GraphRun
from loopline.stream_modes import MESSAGES_ONLY, SUBTASK, Item, StateView, state_view
from loopline.syncrun import iter_sync, run_sync
from loopline.threads import space_of
from services.agent_view import has_todos
from services.errors import ConfigurationError
from services.held_callbacks import holding
from services.hooks import LS_INTEGRATION, hooks_for
from services.interrupts import jsonable
from services.lending import waiting_on_runs
from services.settings import Settings
from services.spec import imports, local, schemas, structured, toolbox
from services.spec.middleware import to_spec
from services.spec.statecodec import CORE_CODEC
from services.spec.validation import check_agent

T = TypeVar("T")


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


def _schema_ref(
    schema: Any, embedded: bool, what: str = "response_format schema"
) -> str | dict[str, Any] | list[str]:
    """How a response, context or state schema travels: a JSON schema dict as it is; a
    class by import path, or (embedded) by ``local:`` reference when it has none; a union
    of classes (a response schema: ToolStrategy's one tool per member) embedded as the
    object itself, deployed as its members' import paths."""
    if isinstance(schema, dict):
        return schema
    if get_origin(schema) in (Union, UnionType):
        if embedded:
            return local.register_instance(schema)  # the very object, as LangChain has it
        members = [_schema_ref(member, embedded, what) for member in get_args(schema)]
        return [m for m in members if isinstance(m, str)]
    if not isinstance(schema, type):
        raise TypeError(
            f"{what} {schema!r} must be a pydantic model, dataclass, "
            "TypedDict, a union of them or a JSON schema dict"
        )
    module, qualname = schema.__module__, schema.__qualname__
    importable = module != "__main__" and "<" not in qualname
    if embedded:
        return local.register_instance(schema)
    if not importable:
        raise TypeError(
            f"{what} {qualname!r} is not importable by path; with "
            "REDIS_URL set, it must be module-level (package.module:Class)"
        )
    if not imports.is_allowed(module):
        raise TypeError(
            f"{what} {qualname!r}: module {module!r} is not allowed: add "
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


def _class_ref(schema: Any, embedded: bool, what: str) -> str | None:
    """``context_schema`` / ``state_schema`` as they travel: a class by import path, or
    (embedded) by ``local:`` reference."""
    if schema is None:
        return None
    if not isinstance(schema, type):
        raise TypeError(f"{what} must be a class, not {schema!r}")
    ref = _schema_ref(schema, embedded, what)
    assert isinstance(ref, str)
    return ref


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


class _LoopClient:
    """An event loop's client, closed when the loop shuts down: a caller's loop (an
    ``asyncio.run``, a test's loop) ends without telling the agent, and a client left
    open then leaks its connections (``ResourceWarning: unclosed Connection``). asyncio
    closes every async generator still suspended in a loop when the loop shuts down
    (``shutdown_asyncgens``, which ``asyncio.run`` and its ``Runner`` call): the client
    is closed in the ``finally`` of one kept suspended for the loop's life."""

    def __init__(self, client: Client, guard: AsyncGenerator[None, None]) -> None:
        self.client = client
        self._guard = guard  # the loop keeps only a weak reference to it

    @classmethod
    async def start(cls, client: Client) -> _LoopClient:
        guard = _closed_with_loop(client)
        await anext(guard)  # now the loop knows it, and closes it on shutdown
        return cls(client, guard)

    async def close(self) -> None:
        await self._guard.aclose()


async def _closed_with_loop(client: Client) -> AsyncGenerator[None, None]:
    try:
        yield
    finally:
        await client.close()


class Agent(Runnable[Any, dict[str, Any]]):
    """A loopline agent: to every caller the compiled graph LangChain's ``create_agent``
    returns (a ``Runnable``: ``invoke``/``ainvoke``/``batch``/``stream``/``astream``,
    ``with_config``, ``get_graph``, ``nodes``, schemas), executed on the bus;
    ``config={"configurable": {"thread_id": ...}}`` continues a thread, and
    ``get_state`` / ``get_state_history`` read it back."""

    def __init__(
        self,
        spec: AgentSpec,
        *,
        url: str,
        embedded: bool,
        settings: Settings,
        checkpointer: Any = None,
        graph_arguments: GraphArguments | None = None,
    ):
        self.spec = spec
        self.name = spec.message_name or "LangGraph"
        """The graph's name, as LangGraph names a compiled graph (``name`` or
        ``"LangGraph"``)."""
        self.config: RunnableConfig = {}
        """The config bound by ``with_config``, under every call's own (as LangGraph's
        ``Pregel.with_config`` binds it)."""
        self.graph_arguments = graph_arguments or GraphArguments(
            tools=spec.tools, middleware=spec.middleware, name=spec.message_name
        )
        """What LangChain's graph for this agent is built from (``reference``)."""
        self._reference: Any = None
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
        self.given_store: Any = None
        self.checkpointer = checkpointer
        """Decides where the agent's threads live (``loopline.threads.space_of``): an
        in-process saver (``InMemorySaver``) keeps its own threads, apart from every other
        saver's; none, or a persistent saver, the deployment's. With one, a call without
        ``configurable.thread_id`` is refused, as LangGraph refuses it."""
        self.thread_space = space_of(checkpointer)
        self._clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopClient] = (
            weakref.WeakKeyDictionary()
        )
        """Each event loop's client (see ``client``)."""

    @property
    def store(self) -> Any:
        """The deployment's store, as hooks and tools see it (``runtime.store``): a
        ``services.redis_store.RedisStore``."""
        from services.redis_store import RedisStore

        return RedisStore(self.url, self.settings.prefix, self.settings.store)

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
            from loopline.embedded import check_endpoint, ensure_services

            check_endpoint(self.spec.model)  # this process is the model service
            ensure_services(self.url, self.settings)

    @contextlib.asynccontextmanager
    async def client(self) -> AsyncIterator[Client]:
        """The running event loop's client, kept for the loop's later calls: a new one
        per call cost a connection and a read of the settings, milliseconds before a
        streamed run's first token. It is closed with its loop (``_LoopClient``); sync
        callers' private loops give theirs back when the call ends
        (``_on_private_loop``)."""
        loop = asyncio.get_running_loop()
        found = self._clients.get(loop)
        if found is None:
            client = Client(
                self.url,
                self.settings.prefix,
                self.settings.max_event_bytes,
                space=self.thread_space,
            )
            found = self._clients[loop] = await _LoopClient.start(client)
        yield found.client

    async def _release_client(self) -> None:
        found = self._clients.pop(asyncio.get_running_loop(), None)
        if found is not None:
            await found.close()

    async def _on_private_loop(self, coro: Awaitable[T]) -> T:
        """``coro`` on a sync caller's event loop, which ends with the call."""
        try:
            return await coro
        finally:
            await self._release_client()

    async def _iter_on_private_loop(self, source: AsyncIterator[T]) -> AsyncIterator[T]:
        try:
            async for item in source:
                yield item
        finally:
            await self._release_client()

    def _run_config(self, config: Mapping[str, Any] | None) -> RunConfig:
        return RunConfig.of(self._merged_config(config), checkpointer=self.checkpointer)

    def _merged_config(self, config: Mapping[str, Any] | None) -> RunnableConfig:
        """The run's whole config, as LangGraph's ``ensure_config`` makes it: what the
        caller's run passes on (``inherited_config``), what ``create_agent`` and
        ``with_config`` bound, the call's own; not the thread of a graph that calls this
        agent as its node."""
        merged = merged_configs(
            inherited_config(),  # type: ignore[arg-type]
            self._name_binding(),
            self.config,
            dict(config or {}),  # type: ignore[arg-type]
        )
        return _outside_parent_thread(merged, self.checkpointer)

    def _name_binding(self) -> RunnableConfig:
        """What LangChain's ``create_agent`` binds to its graph besides the recursion limit:
        the agent's name as ``lc_agent_name``. Bound under ``with_config``'s and the call's
        config and over the caller's (a sub-agent's parent's), in LangGraph's order
        (``ensure_config``: ambient, bound, given), so a name bound later (deepagents'
        ``CompiledSubAgent``) wins and an unnamed agent shows the one it inherited."""
        if not self.spec.message_name:
            return {}
        return {"metadata": {"lc_agent_name": self.spec.message_name}}

    # -- the compiled graph's interface ------------------------------------------------

    def with_config(self, config: RunnableConfig | None = None, **kwargs: Any) -> Agent:
        """This agent with ``config`` bound under every call's own: a copy, as LangGraph's
        compiled graph returns one (not a ``RunnableBinding``)."""
        bound = copy.copy(self)
        bound.config = merged_configs(self.config, config, kwargs)  # type: ignore[arg-type]
        return bound

    @property
    def reference(self) -> Any:
        """LangChain's compiled graph for this agent's arguments, built on first use; it
        answers introspection (``get_graph``, ``nodes``, schemas) and never runs."""
        if self._reference is None:
            self._reference = reference_graph(self.graph_arguments)
        return self._reference

    def __getattr__(self, name: str) -> Any:
        if name in GRAPH_ATTRIBUTES:
            return getattr(self.reference, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def get_graph(self, config: RunnableConfig | None = None, *, xray: int | bool = False) -> Any:
        return self.reference.get_graph(config, xray=xray)

    @property
    def InputType(self) -> Any:
        return self.reference.InputType

    @property
    def OutputType(self) -> Any:
        return self.reference.OutputType

    @property
    def input_schema(self) -> Any:
        return self.reference.input_schema

    @property
    def output_schema(self) -> Any:
        return self.reference.output_schema

    @property
    def config_specs(self) -> Any:
        return self.reference.config_specs

    def get_input_schema(self, config: RunnableConfig | None = None) -> Any:
        return self.reference.get_input_schema(config)

    def get_output_schema(self, config: RunnableConfig | None = None) -> Any:
        return self.reference.get_output_schema(config)

    def get_input_jsonschema(self, config: RunnableConfig | None = None) -> dict[str, Any]:
        return dict(self.reference.get_input_jsonschema(config))

    def get_output_jsonschema(self, config: RunnableConfig | None = None) -> dict[str, Any]:
        return dict(self.reference.get_output_jsonschema(config))

    def config_schema(self, *, include: Sequence[str] | None = None) -> Any:
        return self.reference.config_schema(include=include)

    def get_config_jsonschema(self, *, include: Sequence[str] | None = None) -> dict[str, Any]:
        return dict(self.reference.get_config_jsonschema(include=include))

    async def asubmit(
        self,
        input: dict[str, Any],
        *,
        task_id: str | None = None,
        config: Mapping[str, Any] | None = None,
        multitask_strategy: str = "reject",
        context: Any = None,
        run_mode: RunMode | None = None,
        stream_replies: bool = False,
        stream_blocks: bool = False,
        stream_subtasks: bool = False,
    ) -> str:
        """Submit a task (with ``config``'s thread: a run of it) and return its id at once.
        ``context``: the run's context (LangGraph's ``Runtime.context``): a dict, or an
        instance of the agent's ``context_schema``. ``run_mode``: ``"sync"`` runs the sync
        variant of each middleware hook, as LangChain's ``invoke`` does, ``"async"`` the
        async one (``ainvoke``). ``stream_replies``: stream its model replies' tokens
        (``Client.stream_replies``), asked in the submit's round trip; ``stream_blocks``:
        as content-block events (LangGraph's v3 streaming); ``stream_subtasks``: the
        agents its tool calls run too (a stream with subgraphs)."""
        run = self._run_config(config)
        self._start_services()
        messages = _input_messages(input)
        if context is None:  # a sub-agent's run takes its parent's, as LangGraph's
            context = inherited_context()
        given_context = schemas.context_as_json(context)
        if given_context is not None and self.spec.context_schema is not None:
            # a context that does not fit its schema raises here, as LangGraph's coercion
            # raises from invoke (the services check it again where the task starts)
            schemas.run_context(self.spec.model_copy(update={"context": given_context}))
        async with self.client() as client:
            if run.thread_id is not None:
                await self._take_in_saved(client, run.thread_id)
            agent = await self._agent_ref(client)
            overrides: dict[str, Any] = {}
            if given_context is not None:
                # the run's context travels with its task: inline in the spec it carries,
                # else as the deployed agent's context override
                if isinstance(agent, AgentSpec):
                    agent = agent.model_copy(update={"context": given_context})
                else:
                    overrides["context"] = given_context
            # deployed: the step limit registered with the agent (or the recursion limit)
            max_steps = self.max_steps if self.embedded else None
            if run.recursion_limit is not None:
                max_steps = None  # derived from it where the task starts
            parent = await streamed_parent(client)
            if parent is not None:  # a sub-agent of a streamed task streams as its parent
                task_id = task_id or new_task_id()
                stream_replies, stream_blocks = True, parent[1] == BLOCKS
                stream_subtasks = True  # its own sub-agents are followed too
            submitted = await client.submit(
                agent,
                messages,
                # encoded as a task's state travels (services.spec.statecodec)
                state=CORE_CODEC.encode(_input_state(input)),
                overrides=overrides,
                task_id=task_id,
                max_steps=max_steps,
                thread_id=run.thread_id,
                multitask_strategy=multitask_strategy,
                run_name=run.run_name,
                tags=run.tags,
                metadata=run.metadata,
                run_mode=run_mode,
                stream_ttl_s=self.settings.stream_ttl_s if stream_replies else None,
                recursion_limit=run.recursion_limit,
                stream_blocks=stream_blocks,
                stream_subtasks=stream_subtasks,
            )
            if parent is not None:  # the parent's stream follows it (once it exists)
                meta = self.item_metadata(run)
                inputs = [m.model_dump() for m in with_input_ids(submitted, messages)]
                link = Subtask(
                    task_id=submitted,
                    name=meta.get("lc_agent_name"),
                    messages=inputs,
                    tags=list(run.tags),
                    metadata=jsonable(meta),
                )
                parent[0].subtask(link)
            return submitted

    async def aresult(
        self,
        task_id: str,
        *,
        after: str = "0",
        answered: Sequence[str] = (),
        answering: bool = False,
    ) -> dict[str, Any]:
        """Wait for the task and return its output state as LangChain's (``messages``,
        ``todos`` once TodoListMiddleware's tool wrote them, the schemas' keys; the task's id as
        ``task_id``, ``loopline.result``); a task
        waiting for an answer returns with ``"__interrupt__"`` (LangChain's key) instead:
        the value a hook's ``interrupt()`` asked (HITL's HITLRequest in batched mode), or
        each waiting tool call's (per-call mode: its ToolApprovalRequest). ``answered``:
        tool calls whose answers were just sent (see ``aresume``); ``answering``: the
        task's interrupt was just answered (after ``after``): a refused answer raises the
        exception of the node that refused it, as LangGraph's resume does."""
        async with self.client() as client:
            outcome: Any
            if answered:
                _, outcome = await client.outcome_of_decisions(task_id, answered, after=after)
            elif answering:
                _, outcome = await client.outcome_of_answer(task_id, after=after)
            else:
                _, outcome = await client.outcome(task_id, after=after)
            if isinstance(outcome, TaskFailed):
                raise failure_of(outcome)
            if isinstance(outcome, DecisionsRefused):
                raise refusal_of(outcome)
            if isinstance(outcome, ToolInterrupted):  # a decision the call's schema refused
                raise decision_refusal_of(outcome)
            open_calls = []
            per_call = isinstance(outcome, ApprovalRequested) and outcome.per_call
            if per_call:
                await client.step_settled(task_id)
                open_calls = await client.waiting_calls(task_id)
            messages = await client.messages(task_id)
            todos = await client.written_todos(task_id) if has_todos(self.spec) else None
            codec = state_codec(self.spec)
            state = codec.decode(await client.state(task_id))
            if per_call:  # what the step's ended calls gave: LangGraph's state at the
                written = await client.step_written(task_id)  # interrupt holds them
                messages += written.messages
                state = with_pending(self.spec, state, codec.decode_pairs(written.writes))
        given, structured_json = "structured_response" in state, state.get("structured_response")
        result = AgentResult(task_id, messages=[to_langchain(m) for m in messages])
        if todos is not None:  # TodoListMiddleware's key, once write_todos wrote it
            result["todos"] = todos
        result.update(self._output_state(state))
        if self.spec.response_format is not None:
            # LangChain's key is there, None, when the agent ended without one
            result["structured_response"] = self._structured(structured_json) if given else None
        elif structured_json is not None:  # set by a wrap_model_call's response
            result["structured_response"] = structured_json
        if isinstance(outcome, ApprovalRequested):
            requests = [r.request for r in open_calls] or [outcome.request]
            result["__interrupt__"] = requests
        return result

    def _output_state(self, state: Mapping[str, Any]) -> dict[str, Any]:
        """The task's state keys LangChain's result gives (its output schema: the
        agent's ``state_schema`` and its middleware's, less what they omit from
        output), those set; ``structured_response`` and ``todos`` are given apart."""
        apart = ("structured_response", "todos")
        try:
            keys = hooks_for(self.spec.agent_id, self.spec).output_keys()
        except Exception:  # middleware or schemas this process cannot import: all keys
            return {k: v for k, v in state.items() if k not in (*apart, "jump_to")}
        return {k: v for k, v in state.items() if k in keys and k not in apart}

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
        return await self.aresult(task_id, after=after, answered=answered, answering=True)

    def resume(
        self, task_id: str, decisions: Sequence[dict[str, Any]] | Mapping[str, Any]
    ) -> dict[str, Any]:
        return run_sync(self._on_private_loop(self.aresume(task_id, decisions)))

    async def aanswer(self, task_id: str, answers: Mapping[str, Any]) -> dict[str, Any]:
        """Answer a waiting task's interrupts by id (``Interrupt.id``: each
        ``interrupt()`` returns its value) and wait for its next outcome."""
        self._start_services()
        async with self.client() as client:
            after = await client.last_entry(task_id)
            answered = await client.answer(task_id, answers)
        return await self.aresult(task_id, after=after, answered=answered, answering=True)

    async def acancel(self, task_id: str, reason: str = "cancelled by request") -> None:
        async with self.client() as client:
            await client.cancel(task_id, reason)

    async def ainvoke(
        self, input: Any, config: Mapping[str, Any] | None = None, **kwargs: Any
    ) -> dict[str, Any]:
        """LangChain's ``ainvoke``: ``input`` the new messages, or ``Command(resume=...)``
        answering the thread's waiting interrupt(s); ``config`` LangChain's (thread id,
        recursion limit, run name, tags, metadata); ``multitask_strategy`` for a thread
        that has a run going (default ``reject``). Middleware run their async hooks
        (``abefore_model``, ``awrap_model_call``, ...), as LangChain's ``ainvoke``."""
        with waiting_on_runs():  # a sub-agent's caller lends its slot back meanwhile
            return await self._ainvoke(input, config, "async", **kwargs)

    async def _ainvoke(
        self, input: Any, config: Mapping[str, Any] | None, run_mode: RunMode, **kwargs: Any
    ) -> dict[str, Any]:
        """One run, reported to the caller's callback handlers as LangGraph's graph run
        (``loopline.run_callbacks``)."""
        strategy = str(kwargs.pop("multitask_strategy", "reject"))
        context = kwargs.pop("context", None)
        kwargs.pop("version", None)  # LangGraph's output version: one shape here
        check_durability(kwargs.pop("durability", None), self.checkpointer)
        if kwargs:
            raise TypeError(f"unexpected arguments: {', '.join(sorted(kwargs))}")
        merged = self._merged_config(config)
        merged["metadata"] = {**LS_INTEGRATION, **(merged.get("metadata") or {})}
        run_id = dict(config or {}).get("run_id")
        reported = await GraphRun.start(merged, input, self.name or "LangGraph", run_id)
        try:
            submit = {"multitask_strategy": strategy, "context": context, "run_mode": run_mode}
            result = await self._ainvoke_run(input, config, reported, submit)
        except ParentCommand as handed:  # a tool's handoff, to the graph that runs this one
            if reported is not None:
                await reported.error(handed)
            raise for_caller(handed) from None
        except BaseException as exc:
            if reported is not None:
                await reported.error(exc)
            raise
        if reported is not None:
            await reported.end(result)
        return result

    async def _ainvoke_run(
        self,
        input: Any,
        config: Mapping[str, Any] | None,
        reported: GraphRun | None,
        submit: dict[str, Any],
    ) -> dict[str, Any]:
        """``_ainvoke``'s run: a resume, a time travel, a run inside another run's node
        (``loopline.nested``), or a run of its own; its tools hold ``reported``'s
        handlers (``services.held_callbacks``)."""
        callbacks = None if reported is None else reported.children()
        if is_command(input):
            return await self._aresume_thread(input, config, callbacks)
        if self._travels(input, config):
            ended = await self._travel(input, config)
            if ended is not None:
                return ended
            input = {"messages": []} if input is None else input
        thread_id = self._run_config(config).thread_id
        node = caller_node() if thread_id is None else None
        if node is not None:  # LangGraph's subgraph: it waits with the caller's node
            with holding(node.task_id, callbacks):
                return await self._ainvoke_in_node(input, config, node, submit)
        task_id = new_task_id()
        with holding(task_id, callbacks):
            await self.asubmit(input, config=config, task_id=task_id, **submit)
            try:
                result = await self.aresult(task_id)
            except Exception:
                if thread_id is not None:  # LangGraph keeps the supersteps before it too
                    await self._save_checkpoint({}, config, task_id)
                raise
        if thread_id is not None:
            result = await self._thread_result(result, config)
            await self._save_checkpoint(result, config, task_id)
        return result

    async def _ainvoke_in_node(
        self,
        input: Any,
        config: Mapping[str, Any] | None,
        node: CallerNode,
        submit: dict[str, Any],
    ) -> dict[str, Any]:
        """A run inside another run's node, as LangGraph runs a subgraph: its interrupts
        stop the node (``GraphInterrupt``); the node run again on a resume finds the run
        it started (``CallerNode.task_id``) and answers it from the node's resume values
        instead of starting another."""
        task_id = node.task_id
        async with self.client() as client:
            earlier = await earlier_run(client, task_id)
        waits: list[WaitingInterrupt] | None = None
        if earlier is None:
            await self.asubmit(input, config=config, task_id=task_id, **submit)
            result = await self.aresult(task_id)
        else:  # the node runs again: its resume values before these were the run's
            node.skip(earlier.answered)
            waits = earlier.waits
            result = {} if waits else await self.aresult(task_id, after=earlier.after)
        while True:
            if waits is None and "__interrupt__" in result:
                async with self.client() as client:
                    waits = await waiting_interrupts(
                        client, await client.threads().of_run("", task_id)
                    )
            if not waits:
                return result
            found, answer = node.next_answer()
            if not found:
                raise interrupted(waits)
            ids = [str(w.interrupt.id) for w in waits]
            result, waits = await self.aanswer(task_id, answers_of(answer, ids)), None

    def invoke(
        self, input: Any, config: Mapping[str, Any] | None = None, **kwargs: Any
    ) -> dict[str, Any]:
        """LangChain's ``invoke``: blocks until the run ends, also inside a running event
        loop (async code, Jupyter), as LangChain's does. Middleware run their sync hooks
        (``before_model``, ``wrap_model_call``, ...)."""
        with waiting_on_runs():  # a sub-agent's caller lends its slot and thread back
            return run_sync(self._on_private_loop(self._ainvoke(input, config, "sync", **kwargs)))

    async def astream(  # type: ignore[override]  # LangGraph's own signature
        self,
        input: Any,
        config: Mapping[str, Any] | None = None,
        *,
        stream_mode: str | Sequence[str] = "values",
        **kwargs: Any,
    ) -> AsyncGenerator[Any, None]:
        """LangChain's ``astream``: ``stream_mode`` ``"messages"`` (``(AIMessageChunk or
        ToolMessage, metadata)`` pairs, the model's tokens as they are generated),
        ``"updates"`` (``{node: update}``), ``"values"`` (the state after each step; the
        default, as LangGraph's), ``"custom"`` (what hooks write with
        ``get_stream_writer()`` and tools with ``ToolRuntime.stream_writer``), or a list
        of them (``(mode, data)`` tuples); ``config`` and ``multitask_strategy`` as for
        ``ainvoke``. A run that stops for a human ends with LangGraph's
        ``{"__interrupt__": (Interrupt(...),)}`` (``updates``) and the state with it
        (``values``); ``Command(resume=...)`` with the thread's ``config`` streams the rest
        of that run. loopline's own events: ``astream_task_events``."""
        with waiting_on_runs():
            async for item in self._astream(input, config, stream_mode, "async", **kwargs):
                yield item

    async def _astream(
        self,
        input: Any,
        config: Mapping[str, Any] | None,
        stream_mode: str | Sequence[str],
        run_mode: RunMode,
        **kwargs: Any,
    ) -> AsyncGenerator[Any, None]:
        from loopline.stream_modes import modes_of
        from loopline.stream_parts import internal_modes, nested, parts_of

        subgraphs = bool(kwargs.pop("subgraphs", False))
        version = kwargs.pop("version", "v1")
        if version not in ("v1", "v2"):
            raise ValueError(f"stream version must be 'v1' or 'v2', not {version!r}")
        refuse_breakpoints(kwargs)
        config, messages_v2 = without_v3_flag(config)
        modes, tagged = modes_of(stream_mode, internal=messages_v2)
        read = internal_modes(modes, subgraphs=subgraphs)
        items = self._stream_items(input, config, read, kwargs, run_mode, blocks=messages_v2)
        run = self._run_config(config)
        follow = partial(self._follow_subtask, read, run.thread_id) if subgraphs else None
        run_meta = self.item_metadata(run)
        triples = nested(items, modes, follow, metadata=run_meta)
        if version == "v2":  # LangGraph's StreamPart dicts
            async for part in parts_of(triples, messages_v2=messages_v2):
                yield part
            return
        async for ns, mode, data in triples:
            item = (mode, data) if tagged else (data,)
            if subgraphs:  # LangGraph's (namespace, ...) items
                yield (ns, *item)
            else:
                yield item if tagged else data

    async def _follow_subtask(
        self, modes: list[str], thread_id: str | None, link: Subtask, ns: tuple[str, ...]
    ) -> AsyncIterator[Item]:
        """The items of an agent a tool call of this run ran (``stream_parts.nested``),
        read from its own task's log and chunk stream, placed in the graph namespace
        ``ns`` (their metadata's checkpoint namespaces, as LangGraph's subgraph's), with
        the thread of the run that follows it (``thread_id``: a subgraph's items show its
        parent's); its ``values`` show its messages (its agent's spec is the tools
        service's)."""
        from loopline.stream_modes import Placement, stream_task
        from loopline.stream_parts import subtask_metadata

        inputs = [to_langchain(MESSAGE_ADAPTER.validate_python(m)) for m in link.messages]
        async with self.client() as client:
            thread = {"thread_id": thread_id} if thread_id else {}
            meta = {**subtask_metadata(link), **thread}
            stream = stream_task(
                client,
                link.task_id,
                modes,
                inputs,
                view=MESSAGES_ONLY,
                metadata=meta,
                placement=Placement(ns, tuple(link.tags)),
            )
            async for item in stream:
                yield item

    async def _stream_items(
        self,
        input: Any,
        config: Mapping[str, Any] | None,
        modes: list[str],
        kwargs: dict[str, Any],
        run_mode: RunMode,
        task_id: str | None = None,
        *,
        blocks: bool = False,
    ) -> AsyncIterator[tuple[str, Any]]:
        """Submit ``input`` and yield its ``(mode, data)`` items (``astream``'s reading,
        which ``astream_events`` builds on); hooks run their ``run_mode`` variants;
        ``blocks``: the model's replies stream as content-block events (v3)."""
        from loopline.stream_modes import Placement, stream_task

        strategy = str(kwargs.pop("multitask_strategy", "reject"))
        context = kwargs.pop("context", None)
        check_durability(kwargs.pop("durability", None), self.checkpointer)
        if kwargs:
            raise TypeError(f"unexpected arguments: {', '.join(sorted(kwargs))}")
        if is_command(input):
            async for item in self._stream_resumed(input, config, modes, blocks=blocks):
                yield item
            return
        if self._travels(input, config):
            values = await self._travel(input, config)
            if values is not None:  # nothing runs from that checkpoint: its state
                if "values" in modes:
                    yield ("values", values)
                return
            input = {"messages": []} if input is None else input
        task_id = task_id or new_task_id()
        inputs = [to_langchain(m) for m in with_input_ids(task_id, _input_messages(input))]
        self._start_services()
        run = self._run_config(config)
        merged = self._merged_config(config)
        merged["metadata"] = self.item_metadata(run)
        reported = await GraphRun.start(merged, input, self.name or "LangGraph")
        try:
            with holding(task_id, None if reported is None else reported.children()):
                await self.asubmit(
                    input,
                    task_id=task_id,
                    config=config,
                    multitask_strategy=strategy,
                    context=context,
                    run_mode=run_mode,
                    stream_replies=bool({"messages", "custom", "tools", SUBTASK} & set(modes)),
                    stream_blocks=blocks,
                    stream_subtasks=SUBTASK in modes,
                )
                async with self.client() as client:
                    stream = stream_task(
                        client,
                        task_id,
                        modes,
                        inputs,
                        view=self.state_view(input),
                        thread_id=run.thread_id,
                        metadata=self.item_metadata(run),
                        placement=Placement((), run.tags),
                    )
                    async for item in stream:
                        yield item
        except BaseException as exc:
            if reported is not None:
                await reported.error(exc)
            raise
        if reported is not None:  # the run's output, as LangGraph's graph run ends with
            await reported.end(await self.aresult(task_id))
        if run.thread_id is not None and await self._ended(task_id):
            await self._save_checkpoint({}, config, task_id)

    async def _stream_resumed(
        self,
        command: Any,
        config: Mapping[str, Any] | None,
        modes: list[str],
        *,
        blocks: bool = False,
    ) -> AsyncIterator[tuple[str, Any]]:
        """``Command(resume=...)`` streamed: the thread's waiting run gets its answers and
        goes on, streamed as LangGraph streams a resumed run (from the node that asked)."""
        from loopline.stream_modes import Placement, prepare_resume, stream_resumed

        thread_id = self._thread_id(config)
        run = self._run_config(config)
        self._start_services()
        async with self.client() as client:
            state, answers = await _waiting_answers(client, thread_id, command)
            task_id = state.run_id
            if {"messages", "custom", "tools", SUBTASK} & set(modes):
                ttl = self.settings.stream_ttl_s
                subtasks = SUBTASK in modes
                await client.stream_replies(task_id, ttl, blocks=blocks, subtasks=subtasks)
            checkpoint = [to_langchain(m) for m in state.messages]
            keys = state_codec(self.spec).decode(state.keys)
            resumption = await prepare_resume(
                client,
                task_id,
                modes,
                checkpoint,
                list(answers),
                keys=keys,
                view=self.state_view({}),
                thread_id=thread_id,
                metadata=self.item_metadata(run),
                placement=Placement((), run.tags),
            )
            await client.answer(task_id, answers)
            async for item in stream_resumed(client, task_id, resumption):
                yield item

    def item_metadata(self, run: RunConfig) -> dict[str, Any]:
        """What LangGraph puts in every stream item's metadata from the run's config:
        the call's own, and what LangChain's ``create_agent`` binds to its graph
        (``ls_integration``, ``lc_agent_name`` when the agent has a name)."""
        # the run's metadata has the agent's name in LangGraph's order (``_name_binding``)
        return {**LS_INTEGRATION, **run.metadata}

    async def _ended(self, task_id: str) -> bool:
        async with self.client() as client:
            return await client.status(task_id) == "completed"

    def state_view(self, input: dict[str, Any]) -> StateView:
        """What ``values`` (and a node's ``updates``) show besides the messages for a
        run of ``input``: every state key, as LangGraph's ``stream``
        (``loopline.stream_modes.state_view``); the messages only when the agent's
        middleware or schemas cannot be imported in this process."""
        structured = self._structured
        try:
            return state_view(self.spec, _input_state(input), structured)
        except Exception:  # middleware or schemas this process cannot import: messages
            return MESSAGES_ONLY

    def astream_events(  # LangGraph's own signature
        self,
        input: Any,
        config: Mapping[str, Any] | None = None,
        *,
        version: str = "v2",
        transformers: Sequence[Any] | None = None,
        **kwargs: Any,
    ) -> Any:
        """LangChain's ``astream_events``. ``version="v2"``: the graph's and its nodes'
        chain events, the chat model's start / stream / end and each tool's start / end,
        as ``create_agent`` emits them (``loopline.stream_events``); ``config`` and
        ``multitask_strategy`` as for ``ainvoke``. ``version="v3"``: an awaitable of
        LangGraph's ``AsyncGraphRunStream``, built by LangGraph's own v3 entry over this
        agent's ``astream`` (``loopline.stream_parts``): its projections (``values``,
        ``messages``, ``tool_calls``, ``subagents``, a middleware's) and the agent's
        ``stream_transformers`` with ``transformers`` after them."""
        if version == "v3":
            return langgraph_v3("_apregel_stream_v3", self, input, config, transformers, kwargs)
        if transformers is not None:
            raise ValueError("astream_events(transformers=...) is for version='v3'")
        return self._astream_events_v2(input, config, version=version, **kwargs)

    def stream_events(  # LangGraph's own signature
        self,
        input: Any,
        config: Mapping[str, Any] | None = None,
        *,
        version: str = "v2",
        transformers: Sequence[Any] | None = None,
        **kwargs: Any,
    ) -> Any:
        """LangGraph's ``stream_events``: ``version="v3"`` gives LangGraph's
        ``GraphRunStream`` over this agent's ``stream`` (see ``astream_events``); v1 and v2
        have no synchronous form, in LangChain as here (langchain-core raises)."""
        if version == "v3":
            return langgraph_v3("_pregel_stream_v3", self, input, config, transformers, kwargs)
        return super().stream_events(input, config, version=version, **kwargs)  # type: ignore[call-overload]

    async def _astream_events_v2(
        self,
        input: Any,
        config: Mapping[str, Any] | None = None,
        *,
        version: str = "v2",
        **kwargs: Any,
    ) -> AsyncIterator[dict[str, Any]]:
        from loopline.stream_events import EVENTS_MODES, EventTranslator, events_of

        if version != "v2":
            raise ValueError(f"astream_events supports version='v2' or 'v3', not {version!r}")
        task_id = new_task_id()
        inputs = [to_langchain(m) for m in _input_messages(input)]
        translator = EventTranslator(task_id, input, inputs, self.spec.system_prompt)
        items = self._stream_items(input, config, list(EVENTS_MODES), kwargs, "async", task_id)
        async for event in events_of(items, translator):
            yield event

    def stream(  # type: ignore[override]  # LangGraph's own signature
        self,
        input: Any,
        config: Mapping[str, Any] | None = None,
        *,
        stream_mode: str | Sequence[str] = "values",
        **kwargs: Any,
    ) -> Iterator[Any]:
        """``astream`` for synchronous callers (also inside a running event loop); the
        middleware's sync hooks run, as in LangChain's ``stream``."""
        source = self._astream(input, config, stream_mode, "sync", **kwargs)
        return _waiting_while(iter_sync(self._iter_on_private_loop(source)))

    async def astream_task_events(
        self, input: Any, config: Mapping[str, Any] | None = None, **kwargs: Any
    ) -> AsyncIterator[AnyEvent]:
        """The task's loopline events as they happen, ending with TaskCompleted or
        TaskFailed (or the ApprovalRequested a run parks on); ``Command(resume=...)``
        answers the thread's waiting run and gives its events. What ``astream`` yielded
        before it took LangChain's stream modes."""
        if is_command(input):
            result = await self._aresume_thread(input, config)
            task_id = str(result["task_id"])
            async with self.client() as client:
                async for _, event in client.events(task_id, follow=False):
                    yield event
            return
        strategy = str(kwargs.pop("multitask_strategy", "reject"))
        context = kwargs.pop("context", None)
        task_id = await self.asubmit(
            input, config=config, multitask_strategy=strategy, context=context
        )
        async with self.client() as client:
            async for _, event in client.events(task_id):
                yield event
                if isinstance(event, ApprovalRequested):
                    return

    def stream_task_events(
        self, input: Any, config: Mapping[str, Any] | None = None, **kwargs: Any
    ) -> Iterator[AnyEvent]:
        """``astream_task_events`` for synchronous code."""
        source = self.astream_task_events(input, config, **kwargs)
        return iter_sync(self._iter_on_private_loop(source))

    async def aevents(self, task_id: str, *, after: str = "0") -> AsyncIterator[AnyEvent]:
        async with self.client() as client:
            async for _, event in client.events(task_id, after=after):
                yield event

    # -- threads (LangGraph's checkpointer API) ----------------------------------------

    def _travels(self, input: Any, config: Mapping[str, Any] | None) -> bool:
        """A thread's run from a checkpoint: an earlier one named, or no input (going on
        from the newest, as LangGraph's ``invoke(None, config)``)."""
        run = self._run_config(config)
        return run.thread_id is not None and (input is None or run.checkpoint_id is not None)

    def _thread_id(self, config: Mapping[str, Any] | None) -> str:
        thread_id = self._run_config(config).thread_id
        if thread_id is None:
            raise ValueError('config needs {"configurable": {"thread_id": ...}}')
        return thread_id

    def _history(self, client: Client) -> ThreadHistory:
        """The thread model's reading of the agent's threads (``loopline.history``)."""
        return ThreadHistory(client.threads(), self.spec)

    async def aget_state(self, config: Mapping[str, Any], *, subgraphs: bool = False) -> Any:
        """The thread's ``StateSnapshot``: ``values`` (messages, todos, the middleware's
        state), ``next`` and ``tasks`` (with the interrupts a waiting run asked); with a
        ``checkpoint_id`` in the config, the state at that checkpoint (one per
        superstep, folded from the runs' logs: ``loopline.history``)."""
        thread_id = self._thread_id(config)
        at = self._run_config(config).checkpoint_id
        async with self.client() as client:
            await self._take_in_saved(client, thread_id)
            history = self._history(client)
            if at is not None:
                return await history.snapshot_at(thread_id, at)
            return await current_snapshot(client, history, thread_id)

    def get_state(self, config: Mapping[str, Any], *, subgraphs: bool = False) -> Any:
        return run_sync(self._on_private_loop(self.aget_state(config, subgraphs=subgraphs)))

    async def aupdate_state(
        self,
        config: Mapping[str, Any],
        values: dict[str, Any] | Any | None,
        as_node: str | None = None,
        task_id: str | None = None,
    ) -> RunnableConfig:
        """LangGraph's ``update_state`` on a thread between runs: a new checkpoint whose
        values are the given checkpoint's (the newest without ``checkpoint_id``) with
        ``values`` through the state's reducers (``messages`` through ``add_messages``),
        written as node ``as_node`` (``model``, ``tools`` or None), which decides what
        runs next (``next``). ``get_state`` shows it and the next run starts from it; with
        a checkpointer that persists, its values are saved to it. Returns the config of
        the new checkpoint. ``as_node`` naming a middleware's hook and ``task_id`` are
        refused: the bus runs on from the model or the tools only."""
        if task_id is not None:
            raise NotImplementedError(
                "update_state(task_id=...) is not implemented: an update is applied "
                "between runs, as a node's whole write"
            )
        if values is None:
            values = {}
        if not isinstance(values, dict):
            raise TypeError(f"update_state takes a dict of state values, not {values!r}")
        thread_id = self._thread_id(config)
        at = self._run_config(config).checkpoint_id
        async with self.client() as client:
            await self._take_in_saved(client, thread_id)
            history = self._history(client)
            checkpoint = await update_thread(history, thread_id, values, as_node, at)
            if is_saver(self.checkpointer):
                expires_at = await self._expiry(thread_id)
                await write_update(
                    self.checkpointer, self.reference, history, thread_id, checkpoint, expires_at
                )
        return checkpoint.config(thread_id)  # type: ignore[return-value]

    def update_state(
        self,
        config: Mapping[str, Any],
        values: dict[str, Any] | Any | None,
        as_node: str | None = None,
        task_id: str | None = None,
    ) -> RunnableConfig:
        update = self.aupdate_state(config, values, as_node, task_id)
        return run_sync(self._on_private_loop(update))

    async def abulk_update_state(
        self, config: Mapping[str, Any], supersteps: Sequence[Sequence[Any]]
    ) -> RunnableConfig:
        """LangGraph's ``bulk_update_state``: each superstep's update applied in turn,
        each from the checkpoint the one before made. A superstep of several updates
        (several nodes writing at once) is refused: loopline writes one node's."""
        if not supersteps:
            raise ValueError("No supersteps provided")
        if any(len(updates) == 0 for updates in supersteps):
            raise ValueError("No updates provided")
        if any(len(updates) > 1 for updates in supersteps):
            raise NotImplementedError(
                "bulk_update_state with several updates in one superstep is not "
                "implemented: give each its own superstep"
            )
        current: Mapping[str, Any] = config
        for (update,) in supersteps:
            values, as_node, *rest = update
            current = await self.aupdate_state(current, values, as_node, *(rest[:1] or [None]))
        return dict(current)  # type: ignore[return-value]

    def bulk_update_state(
        self, config: Mapping[str, Any], supersteps: Sequence[Sequence[Any]]
    ) -> RunnableConfig:
        return run_sync(self._on_private_loop(self.abulk_update_state(config, supersteps)))

    async def aget_state_history(
        self,
        config: Mapping[str, Any],
        *,
        filter: dict[str, Any] | None = None,
        before: Mapping[str, Any] | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[Any]:
        """The thread's states, one per superstep as LangGraph checkpoints them, newest
        first (``loopline.history``): those whose metadata has every item of ``filter``,
        older than the checkpoint of ``before``, at most ``limit``. Runs whose log the
        deployment no longer keeps (``Settings.retention_s``) are not in it."""
        thread_id = self._thread_id(config)
        before_id = ((before or {}).get("configurable") or {}).get("checkpoint_id")
        async with self.client() as client:
            await self._take_in_saved(client, thread_id)
            history = self._history(client)
            states = await history.snapshots(
                thread_id, filter=filter, before=before_id, limit=limit
            )
        for state in states:
            yield state

    def get_state_history(self, config: Mapping[str, Any], **kwargs: Any) -> Iterator[Any]:
        return iter_sync(self._iter_on_private_loop(self.aget_state_history(config, **kwargs)))

    async def _travel(self, input: Any, config: Mapping[str, Any] | None) -> dict[str, Any] | None:
        """A run from a checkpoint (LangGraph's time travel): ``checkpoint_id`` in the
        config names an earlier one, whose state becomes the thread's (a fork: the
        checkpoints after it stay in the history); ``input`` None goes on from the
        checkpoint's next node (none: nothing runs, and its values are the result).
        None: a run is to be submitted (with no input: ``{"messages": []}``)."""
        run = self._run_config(config)
        thread_id = self._thread_id(config)
        async with self.client() as client:
            await self._take_in_saved(client, thread_id)
            reader, history = client.threads(), self._history(client)
            made = await history.checkpoints(thread_id)
            latest = max(made, key=lambda c: c.id) if made else None
            target = latest
            if run.checkpoint_id is not None:
                target = next((c for c in made if c.id == run.checkpoint_id), None)
                if target is None:
                    raise ValueError(f"thread {thread_id} has no checkpoint {run.checkpoint_id}")
            if target is None and input is None:  # a new thread: nothing to go on from
                from langgraph.errors import EmptyInputError

                raise EmptyInputError(f"Received no input for {START_NODE}")
            if target is None:
                return None
            if input is None and TOOLS_NODE in target.next:
                raise NotImplementedError(
                    "running on from a checkpoint whose next node is the tools is not "
                    "implemented: the bus starts a run at the model"
                )
            if target is latest:
                if input is None and target.next:
                    await record_fork(reader, thread_id, target.id, resume="continue")
                return history.values(target) if input is None and not target.next else None
            await set_working_copy(history, thread_id, target)
            await record_fork(reader, thread_id, target.id, resume="copy" if input is None else "")
            if input is None and not target.next:
                return history.values(target)
        return None

    async def _aresume_thread(
        self, command: Any, config: Mapping[str, Any] | None, callbacks: Any = None
    ) -> dict[str, Any]:
        """``Command(resume=...)``: answer the thread's waiting interrupt(s); the run's
        tools hold ``callbacks`` (``services.held_callbacks``)."""
        thread_id = self._thread_id(config)
        async with self.client() as client:
            state, answers = await _waiting_answers(client, thread_id, command)
        with holding(state.run_id, callbacks):
            result = await self.aanswer(state.run_id, answers)
        result = await self._thread_result(result, config)
        await self._save_checkpoint(result, config, state.run_id)
        return result

    async def _take_in_saved(self, client: Client, thread_id: str) -> None:
        """The checkpointer is the record of the agent's threads: a state in it that
        loopline did not write (LangGraph ran the thread) becomes the thread's working
        copy before the run (``loopline.checkpoints``)."""
        if is_saver(self.checkpointer):
            key = client.space.key(thread_id)
            history = self._history(client)

            async def is_ours(checkpoint_id: str) -> bool:
                return await written_by_loopline(history, thread_id, checkpoint_id)

            given = await take_in(
                client.redis, client.names, key, self.checkpointer, thread_id, is_ours=is_ours
            )
            if given is not None:  # the thread's history goes on from the saver's state
                await record_update(client.threads(), thread_id, given, None, None, replace=True)

    async def _save_checkpoint(self, result: dict[str, Any], config: Any, run_id: str) -> None:
        """A thread's run ended: its checkpoints, one per superstep, go to the
        checkpointer in LangGraph's format (``loopline.checkpoints.write_run``), so
        LangGraph's agent on the same saver lists the same history and continues the
        thread from any of them. A run that waits for a human writes nothing yet (its
        interrupt is loopline's): its checkpoints are written once it ends."""
        if not is_saver(self.checkpointer) or "__interrupt__" in result:
            return
        thread_id = self._thread_id(config)
        expires_at = await self._expiry(thread_id)
        async with self.client() as client:
            history = self._history(client)
            await write_run(
                self.checkpointer,
                self.reference,
                history,
                thread_id,
                run_id,
                expires_at=expires_at,
            )

    async def _expiry(self, thread_id: str) -> float | None:
        """When the thread expires where the deployment's threads do (``thread_ttl_s``
        from its last change, as its keys in Redis), so that the saver forgets it with
        Redis; None: never."""
        ttl = self.settings.thread_ttl_s
        if not ttl:
            return None
        async with self.client() as client:
            key = client.names.thread_state(client.space.key(thread_id))
            updated: Any = await client.redis.hget(key, "updated")
        return (float(updated) if updated else time.time()) + ttl

    async def _thread_result(
        self, result: dict[str, Any], config: Mapping[str, Any] | None
    ) -> dict[str, Any]:
        """A thread call's result as LangGraph returns it: interrupts as ``Interrupt``s."""
        if "__interrupt__" not in result:
            return result
        snap = await self.aget_state(config or {})
        return {**result, "__interrupt__": list(snap.interrupts)}


INHERITED_KEYS = ("tags", "metadata", "recursion_limit", "callbacks")


def merged_configs(*configs: RunnableConfig | None) -> RunnableConfig:
    """LangChain's ``merge_configs`` of exactly ``configs``, tags in LangGraph's order.
    Its own ``ensure_config`` merges the ambient config into each: called inside a tool
    of another agent, that would hand a sub-agent the parent's thread
    (``configurable.thread_id``) and make its run a second run of the parent's busy
    thread. What a run takes from its caller is ``inherited_config``'s, given here as one
    of ``configs``."""
    from langchain_core.runnables.config import var_child_runnable_config

    token = var_child_runnable_config.set(None)
    try:
        merged = merge_configs(*configs)
    finally:
        var_child_runnable_config.reset(token)
    # in the order given, each once, as LangGraph's ensure_config concatenates them
    # (LangChain's merge_configs sorts them)
    tags = [tag for config in configs if config for tag in config.get("tags") or ()]
    if tags:
        merged["tags"] = list(dict.fromkeys(tags))
    return merged


def _outside_parent_thread(config: RunnableConfig, checkpointer: Any) -> RunnableConfig:
    """``config`` without the thread of the graph that calls this agent as one of its
    nodes. A graph's node gets its graph's config, thread and node namespace
    (``checkpoint_ns``) included, and passes it on (a ``StateGraph`` whose node is an
    agent, a sub-agent called with the tool's config): LangGraph then runs the agent as a
    subgraph, in a namespace of the caller's thread, never as a run of that thread. An
    agent without a checkpointer of its own runs as a task of its own, as a sub-agent
    does; one with its own keeps the thread it is given."""
    from langgraph._internal._constants import CONFIG_KEY_CHECKPOINT_NS

    configurable = dict(config.get("configurable") or {})
    if checkpointer is not None or not configurable.get(CONFIG_KEY_CHECKPOINT_NS):
        return config
    configurable.pop("thread_id", None)
    return {**config, "configurable": configurable}


def inherited_config() -> dict[str, Any]:
    """What a run started inside another run (a sub-agent called from a tool, an agent
    inside a LangChain runnable) takes from the caller's config, as LangGraph's
    ``ensure_config`` seeds a run from the ambient one: its tags, metadata, recursion
    limit and callbacks (the caller's tool's run manager, whose handlers then see this
    run as its child). Not its thread: the sub-agent runs as a task of its own (LangGraph gives it a
    checkpoint namespace of its own inside the parent's thread)."""
    from langchain_core.runnables.config import var_child_runnable_config

    parent = var_child_runnable_config.get() or {}
    return {k: parent[k] for k in INHERITED_KEYS if k in parent}  # type: ignore[literal-required]


def inherited_context() -> Any:
    """The caller's run context (``Runtime.context``) for a run started inside it given
    none, as LangGraph merges a subgraph's runtime into its parent's."""
    from langchain_core.runnables.config import var_child_runnable_config
    from langgraph._internal._constants import CONFIG_KEY_RUNTIME

    parent = var_child_runnable_config.get() or {}
    runtime = (parent.get("configurable") or {}).get(CONFIG_KEY_RUNTIME)
    return getattr(runtime, "context", None)


def langgraph_v3(
    entry: str,
    agent: Agent,
    input: Any,
    config: Mapping[str, Any] | None,
    transformers: Sequence[Any] | None,
    kwargs: dict[str, Any],
) -> Any:
    """LangGraph's own v3 entry (``Pregel._pregel_stream_v3`` or its async twin) run on
    the agent: it builds LangGraph's ``StreamMux`` from its transformers, the agent's
    ``stream_transformers`` and ``transformers``, and drives the agent's ``stream``."""
    from langgraph.pregel import Pregel
    from langgraph.pregel.main import _reject_v3_invariant_kwargs

    _reject_v3_invariant_kwargs(kwargs)
    run: Any = getattr(Pregel, entry)
    return run(agent, input, config, transformers=transformers, **kwargs)


async def streamed_parent(client: Client) -> tuple[Any, str] | None:
    """Inside a tool call of a task a client streams with its sub-agents (subgraphs; the
    tools service's writer of the call, ``services.custom_stream``): the call's writer,
    where the run of an agent the tool starts is noted for the parent's stream
    (``stream_parts.nested``), and what the parent's client asked (chunks or
    ``BLOCKS``)."""
    from services.custom_stream import current

    writer = current()
    if writer is None or writer.stage != "tools" or writer.call_id is None:
        return None
    key = client.names.task_streaming(writer.task_id)
    asked, subtasks = await client.redis.hmget(key, ["asked", SUBTASKS])
    if asked is None or subtasks is None:
        return None
    return writer, asked.decode() if isinstance(asked, bytes) else str(asked)


def refuse_breakpoints(kwargs: dict[str, Any]) -> None:
    """LangGraph's ``stream`` keywords the bus does not implement, taken when unset (as
    LangGraph's v3 entry passes them): static breakpoints and run control."""
    for name in ("interrupt_before", "interrupt_after", "control"):
        if kwargs.pop(name, None) is not None:
            raise NotImplementedError(
                f"stream({name}=...) is not implemented on the bus: "
                "HumanInTheLoopMiddleware or interrupt() stop a run for a human"
            )


def without_v3_flag(config: Mapping[str, Any] | None) -> tuple[dict[str, Any] | None, bool]:
    """``config`` without LangGraph's internal flag that its v3 entry sets for its
    ``stream`` call (``CONFIG_KEY_STREAM_MESSAGES_V2``: the ``messages`` mode as
    content-block events), and whether it was set."""
    from langgraph._internal._constants import CONFIG_KEY_STREAM_MESSAGES_V2

    configurable = dict((config or {}).get("configurable") or {})
    if CONFIG_KEY_STREAM_MESSAGES_V2 not in configurable:
        return (dict(config) if config is not None else None), False
    flag = bool(configurable.pop(CONFIG_KEY_STREAM_MESSAGES_V2))
    return {**(config or {}), "configurable": configurable}, flag


def _waiting_while(items: Iterator[T]) -> Iterator[T]:
    """``items``, with what a sub-agent's caller holds lent back while it iterates
    (``services.lending``)."""
    with waiting_on_runs():
        yield from items


DURABILITY = ("sync", "async", "exit")


def check_durability(durability: Any, checkpointer: Any) -> None:
    """LangGraph's ``durability``: when a run's state is persisted. The bus commits
    every step before the next starts, whichever is asked: what ``"sync"`` promises, and
    more than ``"async"`` and ``"exit"`` do. Warns as LangGraph does when no checkpointer
    keeps the state."""
    if durability is None:
        return
    if durability not in DURABILITY:
        raise ValueError(f"durability must be one of {DURABILITY}, not {durability!r}")
    if checkpointer is None:
        warnings.warn("`durability` has no effect when no checkpointer is present.", stacklevel=3)


def _input_state(input: dict[str, Any]) -> dict[str, Any]:
    """The input's state keys besides ``messages`` (those the agent's input schema takes
    start the task's state; the loop drops the others, as LangGraph does)."""
    return {k: v for k, v in input.items() if k != "messages"}


def _input_messages(input: dict[str, Any]) -> list[Message]:
    """The new messages of ``input``; none (``{"messages": []}`` or ``{}``) is a run
    too, whose model call gets no messages, as LangChain's agent makes it."""
    if not isinstance(input, dict):
        raise TypeError('input must be a dict with "messages", like {"messages": [...]}')
    raw = input.get("messages", [])
    if raw is None:
        raise TypeError('"messages" must be a list of messages or a string, not None')
    if isinstance(raw, str):
        raw = [{"role": "user", "content": raw}]
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
    checkpointer: Any = None,
    store: Any = None,
    state_schema: Any = None,
    context_schema: Any = None,
    interrupt_before: list[str] | None = None,
    interrupt_after: list[str] | None = None,
    debug: bool = False,
    cache: Any = None,
    transformers: Sequence[Any] | None = None,
) -> Agent:
    """Build an agent. ``model``: a name (``"openai:gpt-4o-mini"``) or a chat model;
    ``tools``: LangChain tools, typed functions with docstrings, or import paths;
    ``middleware``: loopline's or LangChain's built-in middleware instances, or specs;
    ``tool_timeout_s`` / ``tool_timeouts`` (per tool name): how long a tool call may run
    (default: the tools service's ``LOOPLINE_TOOL_TIMEOUT_S``); ``response_format``:
    LangChain's ToolStrategy, ProviderStrategy or a bare schema, giving
    ``structured_response``; ``name``: set on the agent's AI messages, as LangChain
    does; ``checkpointer``: any
    LangGraph checkpointer; it decides where the agent's threads live, as in LangGraph:
    an ``InMemorySaver`` instance keeps threads of its own (two savers, two threads of
    one id; one saver shared by two agents, one thread), none or a persistent saver the
    deployment's (kept by loopline's services in Redis either way); with one a call must
    name its thread (``config["configurable"]["thread_id"]``), as LangGraph requires; ``store``:
    accepted likewise: hooks (``runtime.store``) and tools (``ToolRuntime.store``) get
    the deployment's Redis-backed store (``services.store.RedisStore``, ``agent.store``)
    in every service, whichever store is given; ``state_schema``: an ``AgentState``
    TypedDict whose keys the task takes from its input, keeps and returns;
    ``context_schema``: the class of ``invoke(..., context=...)``, which hooks get as
    ``runtime.context`` and tools as ``ToolRuntime.context`` (both travel by import
    path with REDIS_URL set); ``cache``: LangGraph's node cache, kept on the graph as
    LangChain keeps it (its agent's nodes declare no cache policy, so nothing is cached
    there either); ``transformers``: LangGraph stream transformer factories, registered
    after the agent's own (``ToolCallTransformer``, ``SubagentTransformer``, the
    middleware's) for ``stream_events(version="v3")``, as LangChain registers them;
    ``interrupt_before``, ``interrupt_after`` and ``debug=True`` are refused with the
    reason (``loopline.graph.REFUSED_KEYWORDS``)."""
    refuse_unimplemented(
        {
            "interrupt_before": interrupt_before,
            "interrupt_after": interrupt_after,
            "debug": debug,
        }
    )
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
        context_schema=_class_ref(context_schema, embedded, "context_schema"),
        state_schema=_class_ref(state_schema, embedded, "state_schema"),
    )
    check_agent(spec)  # a parameter of the wrong type fails here, before any task runs
    arguments = GraphArguments(
        tools=list(tools or ()),
        system_prompt=system_prompt,
        middleware=list(middleware),
        response_format=response_format,
        state_schema=state_schema,
        context_schema=context_schema,
        name=name,
        cache=cache,
        store=store,
        checkpointer=checkpointer,
        transformers=tuple(transformers or ()),
    )
    agent = Agent(
        spec,
        url=url,
        embedded=embedded,
        settings=settings,
        checkpointer=checkpointer,
        graph_arguments=arguments,
    )
    agent.given_store = store
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


async def _waiting_answers(client: Client, thread_id: str, command: Any) -> tuple[Any, Any]:
    """The thread's state and ``command.resume`` as answers to its waiting interrupt(s);
    a thread with none waiting is refused."""
    state = await client.threads().current(thread_id)
    waits = await waiting_interrupts(client, state)
    if not waits:
        raise ValueError(f"thread {thread_id} has no interrupt waiting for a resume")
    return state, answers_of(command.resume, [str(w.interrupt.id) for w in waits])
