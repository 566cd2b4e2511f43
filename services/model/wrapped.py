"""The model call inside the ``wrap_model_call`` chain, for agents whose middleware wrap
it (retry, fallback, tool selection, dynamic prompts, users' own). The chain is the
middleware list in order, the todo and context-editing middleware at their places:
LangChain's composition. So middleware listed before ``ContextEditingMiddleware`` see the
transcript unedited, and those after it the edited view, as in LangChain."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from langchain_core.messages import AIMessage as LcAIMessage
from langchain_core.messages import SystemMessage as LcSystemMessage

from contracts.agent import AgentSpec, MiddlewareSpec
from contracts.events import AppliedEdit, CommandWrite, StructuredOutcome
from contracts.messages import AIMessage, Message, from_langchain, to_langchain
from services import custom_stream
from services.agent_view import system_message, tool_schemas
from services.hooks import HookSet, call_wrapped, lg_runtime
from services.model import node_writes
from services.model.chat import build_chat_model
from services.model.lcview import with_invalid_calls_answered
from services.spec import structured
from services.spec.channels import StateChannels
from services.spec.models import bind_tools
from services.spec.statecodec import StateCodec
from services.state_access import StateAccess, in_config

ModelCaller = Callable[[Any, Any], Awaitable[Any]]
"""How one model call is made, given the bound model and its input: ``ainvoke``, or
streamed to the task's chunk stream (``services.model.streaming``)."""


class EditsAtPosition:
    """``ContextEditingMiddleware`` at its place in the chain: hands the middleware inside
    it the edited view, as LangChain's does (those outside keep the unedited messages).

    The context consumer already decided the edits for the transcript (``AppliedEdit``s
    on the ``ModelRequested``); replaying them costs no token counting. That decision
    holds only for what the context consumer saw: this one editor, the unedited
    transcript, and (counting tokens by model) the system message and model it assumed.
    When an outer middleware changed any of those, the edits are computed again on what
    reaches this position, which is what LangChain's middleware would edit."""

    def __init__(
        self,
        spec: AgentSpec,
        position: int,
        mw_spec: MiddlewareSpec,
        transcript: Sequence[Message],
        unedited: list[Any],
        edits: Sequence[AppliedEdit] | None,
    ) -> None:
        from services.middleware.context_editing import ContextEditingMiddleware
        from services.spec.middleware import from_spec

        built = from_spec(mw_spec)  # its token_counter function imported
        assert isinstance(built, ContextEditingMiddleware)
        self.middleware = built
        self.spec = spec
        self.position = position
        self.transcript = transcript
        self.unedited = unedited
        self.edits = edits  # None: the stored edits are not this editor's alone

    def _decided_for(self, request: Any) -> bool:
        if self.edits is None:
            return False
        if request.messages is not self.unedited and list(request.messages) != self.unedited:
            return False
        if self.middleware.token_count_method == "approximate" or self.middleware.token_counter:
            return True  # LangChain's approximate and custom counts leave the system out
        assumed = system_message(self.spec, before=self.position)
        given = request.system_message
        if (assumed is None) != (given is None):
            return False
        if given is not None and from_langchain(given) != assumed:
            return False
        return _model_name(request.model, self.spec) == self.spec.model.model_name

    runs_in_any_mode = True
    """loopline's own place in the chain: async for sync runs too."""

    async def awrap_model_call(self, request: Any, handler: Any) -> Any:
        return await handler(self._edited(request))

    def _edited(self, request: Any) -> Any:
        """The request with the edited view."""
        from services.editing.engine import apply_edits

        if not request.messages:  # as LangChain's: nothing to edit
            return request
        if self._decided_for(request):
            assert self.edits is not None
            if not self.edits:
                return request
            view = apply_edits(self.transcript, self.edits)
            # only what an edit changed is converted again (LangChain hands equal copies)
            edited = [
                lc if ours is kept else to_langchain(ours)
                for lc, ours, kept in zip(self.unedited, view, self.transcript, strict=True)
            ]
        else:
            edited = self.middleware.edit(
                list(request.messages),
                system_message=request.system_message,
                model=_model_name(request.model, self.spec),
            )
        return request.override(messages=edited)


def _model_name(model: Any, spec: AgentSpec) -> str:
    return str(getattr(model, "model_name", None) or spec.model.model_name)


def chain_of(
    spec: AgentSpec,
    hooks: HookSet,
    transcript: Sequence[Message] = (),
    unedited: list[Any] | None = None,
    edits: Sequence[AppliedEdit] = (),
) -> list[Any]:
    from services.middleware.todo import TodoListMiddleware

    wrappers = dict(hooks.with_hook("wrap_model_call"))
    editors = sum(1 for mw in spec.middleware if mw.type == "ContextEditingMiddleware")
    chain: list[Any] = []
    for index, mw in enumerate(spec.middleware):
        if mw.type == "TodoListMiddleware":  # LangChain's own class: its wrap_model_call
            chain.append(TodoListMiddleware.from_spec(mw))
        elif mw.type == "ContextEditingMiddleware":
            chain.append(
                EditsAtPosition(
                    spec,
                    index,
                    mw,
                    transcript,
                    unedited if unedited is not None else [to_langchain(m) for m in transcript],
                    # the event's edits are all editors' together: one editor's alone only
                    # when it is the only one
                    list(edits) if editors == 1 else None,
                )
            )
        elif index in wrappers:
            chain.append(wrappers[index])
    return chain


def schema_tool(schema: dict[str, Any]) -> Any:
    """A tool object standing for a schema: middleware such as LLMToolSelector look at
    ``BaseTool`` instances (they pass over plain dicts, as provider tools), and binding it
    gives back exactly the schema (checked). The tools consumer runs the real tool."""
    from langchain_core.tools import StructuredTool

    function = schema["function"]

    def elsewhere(**_: Any) -> Any:
        raise RuntimeError("tools run in the tools consumer")

    return StructuredTool(
        name=function["name"],
        description=function.get("description", ""),
        args_schema=function.get("parameters", {"type": "object", "properties": {}}),
        func=elsewhere,
    )


class StateCommands:
    """The ``Command``s that ``wrap_model_call`` layers return with their response
    (``ExtendedModelResponse``), kept as LangChain composes them: inner layers first,
    and a layer entered again (a retry) drops what the attempt before it gave."""

    def __init__(self) -> None:
        self.commands: list[Any] = []

    def entered(self) -> None:
        # whatever is recorded now came from layers that returned in an earlier attempt
        self.commands.clear()

    def normalize(self, result: Any) -> Any:
        from langchain.agents.middleware import ModelResponse
        from langchain.agents.middleware.types import ExtendedModelResponse

        if isinstance(result, ExtendedModelResponse):
            if result.command is not None:
                self.commands.append(result.command)
            return result.model_response
        if isinstance(result, LcAIMessage):
            return ModelResponse(result=[result])
        return result

    def update(
        self,
        channels: StateChannels,
        state: dict[str, Any],
        first: Sequence[tuple[str, Any]] = (),
        sent: Sequence[tuple[str, Any]] = (),
    ) -> dict[str, Any] | None:
        """The state keys the model node writes, with the values they have once its
        writes are applied to ``state`` (its keys besides ``messages``), as LangGraph
        applies a task's writes: what the chain ``sent`` through LangGraph's
        ``CONFIG_KEY_SEND`` while it ran, ``first`` (the node's own write of the
        response's ``structured_response``), then each command's update in order, folded
        by the key's reducer (two writes to a key without one: LangGraph's
        ``InvalidUpdateError``); LangChain's errors for what it does not support."""
        writes: list[tuple[str, Any]] = [(k, v) for k, v in sent if k != "messages"]
        writes.extend(first)
        for command in self.commands:
            if command.goto:
                raise NotImplementedError(
                    "Command goto is not yet supported in wrap_model_call middleware. "
                    "Use the jump_to state field with before_model/after_model hooks instead."
                )
            if command.resume:
                raise NotImplementedError(
                    "Command resume is not yet supported in wrap_model_call middleware."
                )
            if command.graph:
                raise NotImplementedError(
                    "Command graph is not yet supported in wrap_model_call middleware."
                )
            given = dict(command.update or {})
            given.pop("messages", None)  # added (see ``added``)
            writes.extend(given.items())
        if not writes:
            return None
        # as the event carries it: JSON, other values in the codec's envelopes
        return channels.codec.encode(channels.updated(state, writes))

    def writes(
        self,
        codec: StateCodec,
        sent: Sequence[tuple[str, Any]] = (),
    ) -> list[CommandWrite]:
        """The commands' writes in order (as LangGraph writes a node's list of commands):
        state keys' values as the event carries them (``codec``), and their ``messages``
        as the commands wrote them (``services.model.node_writes`` works out what they
        leave in the state)."""
        out: list[CommandWrite] = []
        for key, value in sent:  # what the chain sent while it ran comes first
            if key == "messages":
                raise NotImplementedError(
                    "a wrap_model_call chain sent messages through LangGraph's config "
                    "(CONFIG_KEY_SEND); loopline applies a model call's messages from its "
                    "reply and its Command only"
                )
            out.append(CommandWrite(key=key, value=codec.encode_value(value)))
        for command in self.commands:
            for key, value in dict(command.update or {}).items():
                if key == "messages":
                    out.append(CommandWrite(key=key, messages=node_writes.written(value)))
                else:
                    out.append(CommandWrite(key=key, value=codec.encode_value(value)))
        return out


def _unchanged(given: list[Any], state: list[Any]) -> bool:
    """LangChain's test of whether the request's list still holds the state's messages
    (``messages != state["messages"]``), the same objects first (no deep comparison)."""
    if len(given) == len(state) and all(a is b for a, b in zip(given, state, strict=True)):
        return True
    return bool(given == state)


def _given_structured(rf: Any, response: Any) -> list[tuple[str, Any]]:
    """An agent without a ``response_format`` whose ``wrap_model_call`` chain returned a
    ``structured_response`` anyway: LangChain's model node writes it to the state (with
    a format, the reply's structured outcome carries it)."""
    value = getattr(response, "structured_response", None)
    return [("structured_response", value)] if rf is None and value is not None else []


def _tool_names(spec: AgentSpec) -> list[str]:
    return [schema["function"]["name"] for schema in tool_schemas(spec)]


def refuse_unknown_tools(tools: Sequence[Any], known: Sequence[str]) -> None:
    """LangChain's refusal of tools that ``wrap_model_call`` middleware added to the
    request when nothing can run them (no ``wrap_tool_call`` middleware to give them):
    its ValueError, with its text."""
    from langchain.agents.factory import DYNAMIC_TOOL_ERROR_TEMPLATE
    from langchain_core.tools import BaseTool

    unknown = [t.name for t in tools if isinstance(t, BaseTool) and t.name not in known]
    if unknown:
        raise ValueError(
            DYNAMIC_TOOL_ERROR_TEMPLATE.format(
                unknown_tool_names=unknown, available_tool_names=sorted(known)
            )
        )


def _system_message(spec: AgentSpec) -> Any:
    if spec.system_message is not None:
        return to_langchain(spec.system_message)
    return None if spec.system_prompt is None else LcSystemMessage(content=spec.system_prompt)


async def call_with_middleware(
    spec: AgentSpec,
    hooks: HookSet,
    transcript: list[Message],
    extra: dict[str, Any],
    edits: Sequence[AppliedEdit] = (),
    *,
    caller: ModelCaller | None = None,
) -> tuple[
    AIMessage,
    StructuredOutcome | None,
    dict[str, Any] | None,
    list[CommandWrite],
    node_writes.Placed,
]:
    """``caller``: how each model call is made (default ``ainvoke``); with retry or
    fallback middleware a step makes several. ``transcript`` unedited: the chain applies
    ``edits`` (the context consumer's, for this transcript) at
    ``ContextEditingMiddleware``'s place, and the agent state holds the unedited
    messages, as LangChain's. With a ``response_format``, the reply's structured outcome
    comes too (made inside the chain, as LangChain's model node does, so middleware see
    the structured response and may change the request's format). Last, the state keys
    the chain's ``ExtendedModelResponse`` commands set (None: none), the commands'
    writes (``ModelResponded.writes``), and what the node's writes leave around the
    reply (``ModelResponded.rewrite``, ``after_reply``)."""
    from langchain.agents.middleware import ModelRequest, ModelResponse

    rf = spec.response_format
    messages = [to_langchain(m) for m in transcript]
    request = ModelRequest(
        model=build_chat_model(spec.model),
        messages=with_invalid_calls_answered(messages),
        system_message=_system_message(spec),
        tools=[schema_tool(schema) for schema in tool_schemas(spec)],
        response_format=structured.strategy_of(rf) if rf is not None else None,
        state={"messages": messages, **extra},  # type: ignore[arg-type]
        runtime=lg_runtime(hooks.context),
    )
    outcomes: dict[int, StructuredOutcome] = {}  # by the reply they were made of

    known = _tool_names(spec) if not hooks.with_hook("wrap_tool_call") else None

    async def call_model(req: Any) -> Any:
        if known is not None:
            refuse_unknown_tools(req.tools, known)
        writer = custom_stream.current()
        if writer is not None:  # what the chain wrote goes out before the reply's chunks
            await writer.flush()
        model = req.model
        settings = dict(req.model_settings)
        used = None
        if rf is not None and req.response_format is not None:
            bound, used = structured.bind(
                rf,
                model,
                list(req.tools),
                tool_choice=req.tool_choice,
                settings=settings,
                requested=req.response_format,
            )
        elif req.tools:
            bound = bind_tools(model, req.tools, tool_choice=req.tool_choice, settings=settings)
        else:
            bound = model.bind(**settings)
        system = [req.system_message] if req.system_message is not None else []
        prompt = [*system, *req.messages]
        reply = await (caller(bound, prompt) if caller else bound.ainvoke(prompt))
        if spec.message_name:
            reply.name = spec.message_name  # as LangChain's model node names it
        outcome = structured.outcome(rf, used, reply) if rf is not None and used else None
        if outcome is None or used is None:
            return ModelResponse(result=[reply])
        outcomes[id(reply)] = outcome
        answers = [to_langchain(m) for m in outcome.tool_messages]
        value = structured.from_json(used.schema, outcome.response) if outcome.given else None
        return ModelResponse(result=[reply, *answers], structured_response=value)

    chain = chain_of(spec, hooks, transcript, messages, edits)
    commands = StateCommands()
    # the state's read and send in the model node's config, as LangGraph's task has them
    access = StateAccess(hooks.channels, {"messages": messages, **extra})
    with in_config(access):
        response = await call_wrapped(
            chain,
            "wrap_model_call",
            request,
            call_model,
            commands.normalize,
            commands.entered,
            hooks.mode,
        )
    replies = [m for m in response.result if isinstance(m, LcAIMessage)]
    if not replies:
        raise TypeError("the wrap_model_call chain returned no AI message")
    last = from_langchain(replies[-1])
    if not isinstance(last, AIMessage):
        raise TypeError("the wrap_model_call chain returned no AI message")
    update = commands.update(hooks.channels, extra, _given_structured(rf, response), access.writes)
    writes = commands.writes(hooks.channels.codec, access.writes)
    outcome = outcomes.get(id(replies[-1]))
    # what the node's writes leave around the reply: LangChain writes the request's own
    # list back when a layer changed it in place (``request.messages.append(...)``)
    changed = None if _unchanged(request.messages, messages) else request.messages
    placed = node_writes.placed(
        transcript,
        messages,
        replies[-1],
        own=list(response.result),
        repaired=changed,
        commands=[w.messages for w in writes if w.key == "messages"],
    )
    return last, outcome, update, writes, placed
