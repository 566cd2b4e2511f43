"""Running one tool call the way LangChain's ToolNode does in ``create_agent``, errors
included: invalid arguments (LangGraph's ``ToolInvocationError``) are answered with
ToolNode's message; any other exception of the tool propagates (the task fails with it),
unless a ``wrap_tool_call`` middleware (``ToolErrorMiddleware``, ``ToolRetryMiddleware``
with ``on_failure="continue"``, a user's own) turns it into a message."""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any

from langchain_core.tools import BaseTool
from pydantic import ValidationError

from contracts.messages import Message, ToolCall, ToolMessage, from_langchain
from services.tool_errors import (
    INVALID_TOOL_NAME_ERROR_TEMPLATE,
    TOOL_INVOCATION_ERROR_TEMPLATE,
)
from services.tools.threads import ToolAborted


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
) -> ToolMessage:
    """Invoke the tool with the call. Invalid arguments are answered with ToolNode's
    text (``ToolInvocationError``'s message); the tool's own exception propagates, as
    ToolNode's default error handler in ``create_agent`` re-raises it. ``limit``: the
    call's time limit (``services.tools.limits``); a call past it raises
    ``TimeoutError``."""
    payload: dict[str, Any] = {
        "id": call.id,
        "name": call.name,
        "args": {**dict(call.args), **injected_args(tool, call.id)},
        "type": "tool_call",
    }
    try:
        async with limit():
            result = await tool.ainvoke(payload)
    except ValidationError as exc:
        content = TOOL_INVOCATION_ERROR_TEMPLATE.format(
            tool_name=call.name, tool_kwargs=call.args, error=_validation_text(exc)
        )
        return ToolMessage(content=content, name=call.name, tool_call_id=call.id, status="error")
    message = from_langchain(result) if not isinstance(result, str) else None
    if isinstance(message, ToolMessage):
        return message
    return ToolMessage(content=str(result), name=call.name, tool_call_id=call.id)


_INJECTED: dict[int, tuple[BaseTool, Any]] = {}
"""Per tool object: what it wants injected (read once: it costs a reflection)."""


def _wanted(tool: BaseTool) -> Any:
    found = _INJECTED.get(id(tool))
    if found is None or found[0] is not tool:
        from langgraph.prebuilt.tool_node import _get_all_injected_args

        try:
            wanted: Any = _get_all_injected_args(tool)
        except Exception:  # a tool whose annotations cannot be read takes nothing injected
            wanted = None
        found = _INJECTED[id(tool)] = (tool, wanted)
    return found[1]


def injected_args(tool: BaseTool, call_id: str) -> dict[str, Any]:
    """What LangGraph's tool node injects that the service can give: ``ToolRuntime``
    (with the deployment's store and the call's id) and an ``InjectedStore`` argument."""
    wanted = _wanted(tool)
    if wanted is None or not (wanted.store or wanted.runtime):
        return {}
    from services import store

    found: dict[str, Any] = {}
    if wanted.store:
        found[wanted.store] = store.shared()
    if wanted.runtime:
        from langchain.tools import ToolRuntime

        found[wanted.runtime] = ToolRuntime(
            state={},
            context=None,
            config={},
            stream_writer=lambda _chunk: None,
            tool_call_id=call_id,
            store=store.shared(),
        )
    return found


async def run_wrapped(
    wrappers: list[Any],
    tool: BaseTool,
    call: ToolCall,
    extra: dict[str, Any],
    decision: dict[str, Any] | None = None,
    messages: Sequence[Message] = (),
    before_tool: Callable[[], Awaitable[None]] | None = None,
    limit: Callable[[], AbstractAsyncContextManager[None]] = unlimited,
    mode: str | None = None,
) -> ToolMessage:
    """The call inside the agent's ``wrap_tool_call`` chain (retries, users' own), first
    middleware outermost, as LangChain composes it. The state a wrapper sees is
    LangChain's at tool time: ``messages``, the transcript up to and including the AI
    message with the calls (the step's other results are not in it yet, as in LangChain,
    where a step's calls run in parallel), plus the task's middleware fields.

    A per-call human approval inside the chain raises ``approvals.Interrupted`` (no
    ``decision`` yet: the caller parks the call) or gets ``decision`` from ``interrupt()``;
    a decision that does not fit raises ``approvals.DecisionRefused``. ``before_tool``
    is awaited when the chain reaches the tool itself. An exception that no wrapper
    turned into a message propagates."""
    from langchain_core.messages import ToolMessage as LcToolMessage
    from langgraph.prebuilt.tool_node import ToolCallRequest

    from contracts.messages import to_langchain
    from services import approvals
    from services.hooks import call_wrapped

    request = ToolCallRequest(
        tool_call={"id": call.id, "name": call.name, "args": dict(call.args), "type": "tool_call"},
        tool=tool,
        state={"messages": [to_langchain(m) for m in messages], **extra},
        runtime=None,  # type: ignore[arg-type]
    )

    async def execute(req: Any) -> Any:
        wanted = req.tool_call
        target = req.tool or tool
        if before_tool is not None:
            await before_tool()
        answer = await run_tool(
            target,
            ToolCall(id=wanted["id"], name=wanted["name"], args=wanted.get("args", {})),
            limit=limit,
        )
        return to_langchain(answer)

    # What no wrapper handled propagates: the task fails with it, as in LangChain. An
    # approval's Interrupted / DecisionRefused is not an outcome: the call waits.
    with approvals.answering_call(decision):
        result = await call_wrapped(wrappers, "wrap_tool_call", request, execute, lambda r: r, mode)
    if not isinstance(result, LcToolMessage):
        return ToolMessage(
            content=f"Error: wrap_tool_call returned {type(result).__name__}, not a ToolMessage",
            name=call.name,
            tool_call_id=call.id,
            status="error",
        )
    converted = from_langchain(result)
    assert isinstance(converted, ToolMessage)
    return converted
