"""Running one tool call the way LangChain's ToolNode does in ``create_agent``, errors
included: invalid arguments (LangGraph's ``ToolInvocationError``) are answered with
ToolNode's message; any other exception of the tool propagates (the task fails with it),
unless a ``wrap_tool_call`` middleware (``ToolErrorMiddleware``, ``ToolRetryMiddleware``
with ``on_failure="continue"``, a user's own) turns it into a message."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any

from langchain_core.tools import BaseTool
from langgraph.errors import GraphBubbleUp, is_invalid_resume
from pydantic import ValidationError

from contracts.messages import Message, ToolCall, ToolMessage, from_langchain
from services.spec.statecodec import CORE_CODEC, StateValueError
from services.state_access import access_of
from services.tool_errors import (
    INVALID_TOOL_NAME_ERROR_TEMPLATE,
    TOOL_INVOCATION_ERROR_TEMPLATE,
)
from services.tools.threads import ToolAborted


@dataclass(frozen=True)
class Answered:
    """A call's outcome: the tool message answering it and, for a tool that returned
    ``Command(update=...)``, the state keys the update sets besides its messages (as
    JSON, other values in LangGraph's serializer's envelopes), applied to the task's
    state when the step's results join."""

    message: ToolMessage
    update: dict[str, Any] | None = None
    values: dict[str, Any] | None = field(default=None, compare=False, repr=False)
    """``update`` as the tool gave it (Python values, where ``update`` has them encoded
    by ``services.spec.statecodec``), for the wrappers of the same run to see."""
    writes: list[tuple[str, Any]] | None = None
    """The writes the call sent through LangGraph's ``CONFIG_KEY_SEND``
    (``services.state_access``), in order, encoded: they join the state before
    ``update``."""


SENT_MESSAGES = (
    "Error: tool '{tool_name}' sent messages to the state through LangGraph's config; "
    "loopline applies only the call's own ToolMessage and state keys."
)


def with_sends(answer: Answered, runtime: Any) -> Answered:
    """The answer with the writes the call sent (``CONFIG_KEY_SEND``), if any."""
    access = access_of(runtime)
    if access is None or not access.writes:
        return answer
    call_id, name = answer.message.tool_call_id, answer.message.name or ""
    if any(key == "messages" for key, _ in access.writes):
        text = SENT_MESSAGES.format(tool_name=name)
        return Answered(ToolMessage(content=text, name=name, tool_call_id=call_id, status="error"))
    try:
        writes = CORE_CODEC.encode_pairs(access.writes)
    except StateValueError as exc:
        text = COMMAND_NOT_STORABLE.format(tool_name=name, error=exc)
        return Answered(ToolMessage(content=text, name=name, tool_call_id=call_id, status="error"))
    return Answered(answer.message, answer.update, answer.values, writes)


COMMAND_MESSAGES_ONLY_THE_ANSWER = (
    "Error: tool '{tool_name}' returned a Command whose update adds messages besides its "
    "ToolMessage; loopline applies only the call's own ToolMessage and state keys."
)
COMMAND_NOT_STORABLE = (
    "Error: tool '{tool_name}' returned a Command whose update cannot be stored: {error}"
)
COMMAND_GOTO = (
    "Error: tool '{tool_name}' returned a Command with goto/graph/resume; loopline applies "
    "a tool's Command(update=...), and a Command(graph=Command.PARENT) in the graph that "
    "runs the agent, only."
)


def refused(call: ToolCall, available: list[str]) -> ToolMessage:
    """A call of a tool the agent does not list: answered, never run."""
    return ToolMessage(
        content=INVALID_TOOL_NAME_ERROR_TEMPLATE.format(
            requested_tool=call.name, available_tools=", ".join(available)
        ),
        name=call.name,
        tool_call_id=call.id,
        status="error",
    )


UNKNOWN_OUTCOME = (
    "Error: the outcome of this call is unknown: the worker running it stopped before it "
    "finished, and the tool '{tool_name}' is not declared idempotent, so it was not run "
    "again. Check its effects before calling it again."
)
OUTPUT_TOO_LARGE = (
    "Error: the output of tool '{tool_name}' ({size} bytes) exceeds the event size limit "
    "of {limit} bytes (LOOPLINE_MAX_EVENT_BYTES); return less data or raise the limit."
)


def unknown_outcome(call: ToolCall) -> ToolMessage:
    return ToolMessage(
        content=UNKNOWN_OUTCOME.format(tool_name=call.name),
        name=call.name,
        tool_call_id=call.id,
        status="error",
    )


def too_large(call: ToolCall, size: int, limit: int) -> ToolMessage:
    return ToolMessage(
        content=OUTPUT_TOO_LARGE.format(tool_name=call.name, size=size, limit=limit),
        name=call.name,
        tool_call_id=call.id,
        status="error",
    )


def guarded(tool: BaseTool) -> BaseTool:
    """The tool with its ``BaseException``s (``SystemExit``, ``KeyboardInterrupt``,
    ``GeneratorExit``, ...) turned into ``ToolAborted``, an ordinary error of its call.
    LangChain runs an async tool in a task of its own, whose ``KeyboardInterrupt`` or
    ``SystemExit`` asyncio lets end the event loop, so the guard goes around the tool's
    own ``_arun`` (sync tools are guarded by their threads, ``services.tools.threads``).
    A cancellation of the call passes through."""
    if getattr(tool, _GUARDED, False):
        return tool
    original = tool._arun

    @functools.wraps(original)  # LangChain reads the signature (run_manager, config)
    async def arun(*args: Any, **kwargs: Any) -> Any:
        try:
            return await original(*args, **kwargs)
        except asyncio.CancelledError:
            raise
        except Exception:
            raise
        except BaseException as exc:
            raise ToolAborted(exc) from None

    object.__setattr__(tool, "_arun", arun)
    object.__setattr__(tool, _GUARDED, True)
    return tool


_GUARDED = "_loopline_guarded"


def _validation_text(exc: ValidationError) -> str:
    parts = []
    for error in exc.errors():
        loc = ".".join(str(x) for x in error.get("loc", ()))
        parts.append(f"{loc}: {error.get('msg', 'Unknown error')}")
    return "\n".join(parts)


def unlimited() -> AbstractAsyncContextManager[None]:
    return contextlib.nullcontext()


async def run_tool(
    tool: BaseTool,
    call: ToolCall,
    *,
    limit: Callable[[], AbstractAsyncContextManager[None]] = unlimited,
    runtime: Any = None,
    mode: str | None = None,
    message_id: str | None = None,
) -> Answered:
    """Invoke the tool with the call (``mode``: the run's ``AgentSpec.run_mode``, see
    ``invoke_tool``). Invalid arguments are answered with ToolNode's
    text (``ToolInvocationError``'s message); the tool's own exception propagates, as
    ToolNode's default error handler in ``create_agent`` re-raises it. ``limit``: the
    call's time limit (``services.tools.limits``); a call past it raises
    ``TimeoutError``. ``runtime``: the call's ``ToolRuntime`` (``tool_runtime``), for a
    tool that takes one or an ``Injected*`` argument. ``message_id``: the id of the tool
    message made here (one the tool returns keeps its own)."""
    payload: dict[str, Any] = {
        "id": call.id,
        "name": call.name,
        "args": dict(call.args),
        "type": "tool_call",
    }
    payload = with_injected(tool, payload, runtime)
    # LangGraph's tool node invokes the tool with its config: what ``get_config()``
    # gives inside the tool (the state's read and send among it)
    config = getattr(runtime, "config", None) or None
    try:
        async with limit():
            result = await invoke_tool(tool, payload, mode, config)
    except GraphBubbleUp:
        raise  # the tool's interrupt(): the call waits for an answer (services.interrupts)
    except ValidationError as exc:
        if is_invalid_resume(exc):
            raise  # an answer that does not fit the interrupt's schema, not bad arguments
        content = TOOL_INVOCATION_ERROR_TEMPLATE.format(
            tool_name=call.name, tool_kwargs=call.args, error=_validation_text(exc)
        )
        message = ToolMessage(
            content=content, name=call.name, tool_call_id=call.id, status="error", id=message_id
        )
        return Answered(message)
    return answered(tool, call, result, message_id)


async def invoke_tool(
    tool: BaseTool, payload: dict[str, Any], mode: str | None, config: Any = None
) -> Any:
    """The tool's sync variant in a sync run (``invoke``, ``stream``), as LangGraph's
    tool node calls ``tool.invoke`` there, on a worker thread with this context; its
    async variant otherwise. A tool given only as a coroutine runs it in either run
    (LangChain's sync run raises for it: a refusal loopline has no reason to copy)."""
    if mode == "sync" and getattr(tool, "func", True) is not None:
        context = contextvars.copy_context()
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, context.run, tool.invoke, payload, config)
    return await tool.ainvoke(payload, config)


def answered(
    tool: BaseTool | None, call: ToolCall, result: Any, message_id: str | None = None
) -> Answered:
    """What a tool (or a ``wrap_tool_call`` chain) returned, as the call's answer: a
    ``Command(update=...)`` checked as LangGraph's tool node checks it (the update must
    hold the call's ToolMessage), its other keys the state update. ``message_id``: the
    id of a tool message made here from a plain result."""
    from langgraph.types import Command

    if isinstance(result, Command):
        return _command_answer(tool, call, result)
    message = from_langchain(result) if not isinstance(result, str) else None
    if isinstance(message, ToolMessage):
        return Answered(message)
    return Answered(
        ToolMessage(content=str(result), name=call.name, tool_call_id=call.id, id=message_id)
    )


def _command_answer(tool: BaseTool | None, call: ToolCall, command: Any) -> Answered:
    from langchain_core.messages import ToolMessage as LcToolMessage

    def error(text: str) -> Answered:
        return Answered(
            ToolMessage(content=text, name=call.name, tool_call_id=call.id, status="error")
        )

    payload = {"id": call.id, "name": call.name, "args": dict(call.args), "type": "tool_call"}
    node = _command_checker(tool)
    if command.graph == command.PARENT:
        # for the graph that runs this agent as its node (a handoff): LangGraph's graph
        # ends its run by raising it, checked as any tool's Command, and the caller's
        # graph applies it (``loopline.nested.for_caller`` addresses it there)
        from langgraph.errors import ParentCommand

        raise ParentCommand(node._validate_tool_command(command, payload, "tool_calls"))
    if command.goto or command.graph is not None or command.resume is not None:
        return error(COMMAND_GOTO.format(tool_name=call.name))
    # LangGraph's own check: the update holds exactly the call's ToolMessage (what it
    # raises propagates, as out of LangGraph's tool node, where the check is outside the
    # tool's error handling)
    checked = node._validate_tool_command(command, payload, "tool_calls")
    update = dict(checked.update or {})
    messages = list(update.pop("messages", []))
    own = [m for m in messages if isinstance(m, LcToolMessage) and m.tool_call_id == call.id]
    if len(messages) != 1 or not own:
        return error(COMMAND_MESSAGES_ONLY_THE_ANSWER.format(tool_name=call.name))
    message = from_langchain(own[0])
    assert isinstance(message, ToolMessage)
    try:  # encoding needs no allow-list: the agent's codec decodes it where it is read
        encoded = CORE_CODEC.encode(update)
    except StateValueError as exc:
        return error(COMMAND_NOT_STORABLE.format(tool_name=call.name, error=exc))
    return Answered(message, encoded or None, update or None)


def _command_checker(tool: BaseTool | None) -> Any:
    """A LangGraph tool node, for its check of a returned Command."""
    node = _injection(tool)[1] if tool is not None else None
    if node is None:
        from langgraph.prebuilt.tool_node import ToolNode

        node = ToolNode([tool] if tool is not None else [])
    return node


_INJECTED: dict[int, tuple[BaseTool, Any, Any]] = {}
"""Per tool object: what it wants injected and LangGraph's tool node that injects it
(read once: it costs a reflection)."""


def _injection(tool: BaseTool) -> tuple[Any, Any]:
    """(What the tool wants injected, a ``ToolNode`` of it), as LangGraph computes them;
    (None, None) for a tool that wants nothing or whose annotations cannot be read."""
    found = _INJECTED.get(id(tool))
    if found is None or found[0] is not tool:
        from langgraph.prebuilt.tool_node import ToolNode, _get_all_injected_args

        try:
            wanted: Any = _get_all_injected_args(tool)
            node: Any = ToolNode([tool]) if wanted.state or wanted.store or wanted.runtime else None
        except Exception:  # a tool whose annotations cannot be read takes nothing injected
            wanted = node = None
        if node is None:
            wanted = None
        found = _INJECTED[id(tool)] = (tool, wanted, node)
    return found[1], found[2]


def injects(tool: BaseTool) -> bool:
    """Whether the tool takes a ``ToolRuntime``, ``InjectedState`` or ``InjectedStore``."""
    return _injection(tool)[0] is not None


def reads_state(tool: BaseTool) -> bool:
    """Whether the tool reads the agent's state (``ToolRuntime`` or ``InjectedState``):
    only then does the tools service read the task's state before the call."""
    wanted = _injection(tool)[0]
    return wanted is not None and bool(wanted.state or wanted.runtime)


def tool_runtime(
    call_id: str,
    state: dict[str, Any],
    *,
    context: Any = None,
    config: dict[str, Any] | None = None,
    stream_writer: Callable[[Any], None] | None = None,
    tools: Sequence[BaseTool] = (),
) -> Any:
    """LangGraph's ``ToolRuntime`` for one call, as its tool node makes it: the agent's
    state at tool time, the run's context, the deployment's store, the call's id, and
    the node's tools (what a ``wrap_tool_call`` redirecting a call looks its tool up in:
    HumanInTheLoopMiddleware's edit to another tool)."""
    from langchain.tools import ToolRuntime

    from services import store

    return ToolRuntime(
        state=state,
        context=context,
        config=config or {},  # type: ignore[arg-type]
        stream_writer=stream_writer or _no_writer,
        tool_call_id=call_id,
        store=store.shared(),
        tools=list(tools),
    )


def _no_writer(_chunk: Any) -> None:
    """A run nobody streams: what a tool writes goes nowhere, as in LangGraph."""


def with_injected(tool: BaseTool, payload: dict[str, Any], runtime: Any) -> dict[str, Any]:
    """The tool call with what the tool wants injected, by LangGraph's own tool node
    (which also drops any value the model gave for an injected argument)."""
    wanted, node = _injection(tool)
    if wanted is None:
        return payload
    if runtime is None:
        runtime = tool_runtime(payload["id"], {})
    injected: dict[str, Any] = node._inject_tool_args(payload, runtime, tool)
    return injected


async def run_wrapped(
    wrappers: list[Any],
    tool: BaseTool | None,
    call: ToolCall,
    extra: dict[str, Any],
    messages: Sequence[Message] = (),
    before_tool: Callable[[], Awaitable[None]] | None = None,
    limit: Callable[[], AbstractAsyncContextManager[None]] = unlimited,
    runtime: Any = None,
    available: Sequence[str] = (),
    mode: str | None = None,
) -> Answered:
    """The call inside the agent's ``wrap_tool_call`` chain (retries, users' own), first
    middleware outermost, as LangChain composes it. The state a wrapper sees is
    LangChain's at tool time: ``messages``, the transcript up to and including the AI
    message with the calls (the step's other results are not in it yet, as in LangChain,
    where a step's calls run in parallel), plus the task's middleware fields.

    An ``interrupt()`` in the chain or the tool (a per-call human approval, say) passes
    through, as does an answer that does not fit it: the caller runs the chain as a node
    (``services.interrupts.node``), which parks the call or gives the answers.
    An exception that no wrapper turned into a message propagates (the task fails with
    it, as in LangChain). ``before_tool`` is awaited when the chain reaches the tool
    itself. ``runtime``: the call's ``ToolRuntime`` (``request.runtime``, and what the
    tool gets injected). ``tool`` None: a tool the agent does not define (middleware
    added it to the model's tools), which a wrapper may give (``request.override(tool=
    ...)``); else the call is answered as an unknown tool, naming the ``available`` ones,
    as LangGraph's tool node does.
    ``mode``: the run's ``AgentSpec.run_mode`` (which variant of each wrapper runs)."""
    from langchain_core.messages import ToolMessage as LcToolMessage
    from langgraph.prebuilt.tool_node import ToolCallRequest

    from contracts.messages import to_langchain
    from services.hooks import call_wrapped

    request = ToolCallRequest(
        tool_call={"id": call.id, "name": call.name, "args": dict(call.args), "type": "tool_call"},
        tool=tool,
        state={"messages": [to_langchain(m) for m in messages], **extra},
        runtime=runtime,
    )

    async def execute(req: Any) -> Any:
        wanted = req.tool_call
        target = req.tool
        if target is None:
            asked = ToolCall(id=wanted["id"], name=wanted["name"], args=wanted.get("args", {}))
            return to_langchain(refused(asked, list(available)))
        if before_tool is not None:
            await before_tool()
        answer = await run_tool(
            target,
            ToolCall(id=wanted["id"], name=wanted["name"], args=wanted.get("args", {})),
            limit=limit,
            runtime=req.runtime,
            mode=mode,
        )
        if answer.update is None:
            return to_langchain(answer.message)
        from langgraph.types import Command

        # the wrappers see the Command the tool returned, as in LangChain
        values = answer.values if answer.values is not None else answer.update
        return Command(update={**values, "messages": [to_langchain(answer.message)]})

    # What no wrapper handled propagates: the task fails with it, as in LangChain (an
    # interrupt passes through the same way: the node running the chain parks the call).
    result = await call_wrapped(
        wrappers, "wrap_tool_call", request, execute, lambda r: r, mode=mode
    )
    from langgraph.types import Command

    if not isinstance(result, LcToolMessage | Command):
        return Answered(
            ToolMessage(
                content=f"Error: wrap_tool_call returned {type(result).__name__}, "
                "not a ToolMessage or Command",
                name=call.name,
                tool_call_id=call.id,
                status="error",
            )
        )
    return with_sends(answered(tool, call, result), runtime)
