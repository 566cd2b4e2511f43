"""Tools, schemas and middleware that use LangChain's agent runtime (``ToolRuntime``,
``InjectedState``, ``InjectedToolCallId``, ``InjectedStore``, ``context_schema``,
``state_schema``), named by import path (``tests.runtime_tools:NAME``) so the tools
service processes import them as a user's deployment would. Each tool answers with what
it was given, as JSON, so a parity test compares what LangChain and loopline inject."""

from __future__ import annotations

import json
import operator
from dataclasses import dataclass
from typing import Annotated, Any, NotRequired

from langchain.agents import AgentState
from langchain.agents.middleware import AgentMiddleware
from langchain.agents.middleware.types import ExtendedModelResponse
from langchain.tools import InjectedState, InjectedStore, InjectedToolCallId, ToolRuntime
from langchain_core.messages import ToolMessage
from langchain_core.tools import tool
from langgraph.runtime import Runtime
from langgraph.types import Command


@dataclass
class Caller:
    """The run's context (``context_schema``)."""

    user_id: str
    tier: str = "free"


class VisitState(AgentState[Any]):
    """The agent's own state keys (``state_schema``)."""

    user_name: NotRequired[str]
    visits: NotRequired[int]


class NoteState(AgentState[Any]):
    """A middleware's state keys."""

    note: NotRequired[str]


class CallCountState(AgentState[Any]):
    """``CountingCalls``'s state key."""

    model_calls: NotRequired[int]


def _context_of(context: Any) -> Any:
    if context is None:
        return None
    if hasattr(context, "__dict__"):
        return {"type": type(context).__name__, **vars(context)}
    return context


def _messages_of(state: Any) -> list[str]:
    return [f"{type(m).__name__}:{m.content}" for m in state.get("messages", [])]


def whoami(topic: str, runtime: ToolRuntime[Caller, VisitState]) -> str:
    """Tell who asks about a topic."""
    state = runtime.state
    seen = {
        "topic": topic,
        "tool_call_id": runtime.tool_call_id,
        "context": _context_of(runtime.context),
        "state_keys": sorted(state),
        "messages": _messages_of(state),
        "user_name": state.get("user_name"),
        "has_store": runtime.store is not None,
        "thread_id": (runtime.config.get("configurable") or {}).get("thread_id"),
    }
    return json.dumps(seen, sort_keys=True)


def peek(
    key: str,
    state: Annotated[dict[str, Any], InjectedState],
    call_id: Annotated[str, InjectedToolCallId],
    visits: Annotated[int | None, InjectedState("visits")] = None,
) -> str:
    """Peek at one key of the conversation's state."""
    seen = {"key": key, "value": state.get(key), "call_id": call_id, "visits": visits}
    return json.dumps(seen, sort_keys=True)


def remember(fact: str, store: Annotated[Any, InjectedStore()]) -> str:
    """Remember a fact for later."""
    store.put(("facts",), "last", {"fact": fact})
    return f"stored {fact}"


class NoteTaker(AgentMiddleware[NoteState, Caller]):
    """Writes the caller's id into its state key before each model call."""

    state_schema = NoteState

    def before_model(self, state: NoteState, runtime: Runtime[Caller]) -> dict[str, Any] | None:
        caller = runtime.context
        return {"note": f"for {caller.user_id} ({caller.tier})" if caller else "nobody"}

    async def abefore_model(
        self, state: NoteState, runtime: Runtime[Caller]
    ) -> dict[str, Any] | None:
        return self.before_model(state, runtime)


class CallerPrompt(AgentMiddleware[AgentState[Any], Caller]):
    """A ``wrap_model_call`` (run by the model service) that names the caller from
    ``request.runtime.context`` in the system prompt: the request body shows it."""

    def wrap_model_call(self, request: Any, handler: Any) -> Any:
        return handler(self._named(request))

    async def awrap_model_call(self, request: Any, handler: Any) -> Any:
        return await handler(self._named(request))

    @staticmethod
    def _named(request: Any) -> Any:
        from langchain_core.messages import SystemMessage

        caller = request.runtime.context
        name = caller.user_id if caller is not None else "nobody"
        return request.override(system_message=SystemMessage(f"You serve {name}."))


def check_in(name: str, runtime: ToolRuntime[Any, VisitState]) -> Command[Any]:
    """Check a visitor in."""
    visits = (runtime.state.get("visits") or 0) + 1
    welcome = ToolMessage(f"welcome {name}, visit {visits}", tool_call_id=runtime.tool_call_id)
    return Command(update={"visits": visits, "user_name": name, "messages": [welcome]})


class CountingCalls(AgentMiddleware[CallCountState]):
    """A ``wrap_model_call`` that counts model calls in its state key, by returning an
    ``ExtendedModelResponse`` with a ``Command(update=...)``."""

    state_schema = CallCountState

    def wrap_model_call(self, request: Any, handler: Any) -> Any:
        return self._counted(request, handler(request))

    async def awrap_model_call(self, request: Any, handler: Any) -> Any:
        return self._counted(request, await handler(request))

    @staticmethod
    def _counted(request: Any, response: Any) -> Any:
        count = (request.state.get("model_calls") or 0) + 1
        return ExtendedModelResponse(
            model_response=response, command=Command(update={"model_calls": count})
        )


class TrailState(AgentState[Any]):
    """A key with a reducer (``state_schema``): every update adds to the list; and one
    without."""

    trail: NotRequired[Annotated[list[str], operator.add]]
    note: NotRequired[str]


def _joined(left: dict[str, int], right: dict[str, int]) -> dict[str, int]:
    """A reducer of the user's own: counts by label, summed."""
    return {k: left.get(k, 0) + right.get(k, 0) for k in {*left, *right}}


class TallyState(AgentState[Any]):
    """A middleware's keys with reducers: a number summed, a dict by a function."""

    tally: Annotated[int, operator.add]
    by_label: NotRequired[Annotated[dict[str, int], _joined]]


def mark(label: str, runtime: ToolRuntime[Any, TrailState]) -> Command[Any]:
    """Mark a label on the trail."""
    answer = ToolMessage(f"marked {label}", tool_call_id=runtime.tool_call_id)
    update = {"trail": [label], "tally": 100, "by_label": {label: 1}, "messages": [answer]}
    return Command(update=update)


def step_on(label: str, runtime: ToolRuntime[Any, TrailState]) -> Command[Any]:
    """Step on a label: it joins the trail."""
    answer = ToolMessage(f"stepped on {label}", tool_call_id=runtime.tool_call_id)
    return Command(update={"trail": [label], "messages": [answer]})


def _tallied(response: Any) -> Any:
    update = {"trail": ["model"], "tally": 10, "by_label": {"model": 1}}
    return ExtendedModelResponse(model_response=response, command=Command(update=update))


class Tally(AgentMiddleware[TallyState]):
    """Updates the reducer keys from every place a middleware can: before_model and
    after_model (the loop), and wrap_model_call's command (the model service)."""

    state_schema = TallyState

    def before_model(self, state: Any, runtime: Runtime[Any]) -> dict[str, Any] | None:
        return {"trail": ["before"], "tally": 1}

    async def abefore_model(self, state: Any, runtime: Runtime[Any]) -> dict[str, Any] | None:
        return self.before_model(state, runtime)

    def after_model(self, state: Any, runtime: Runtime[Any]) -> dict[str, Any] | None:
        return {"trail": [f"after {len(state['trail'])}"], "by_label": {"after": 1}}

    async def aafter_model(self, state: Any, runtime: Runtime[Any]) -> dict[str, Any] | None:
        return self.after_model(state, runtime)

    def wrap_model_call(self, request: Any, handler: Any) -> Any:
        return _tallied(handler(request))

    async def awrap_model_call(self, request: Any, handler: Any) -> Any:
        return _tallied(await handler(request))


class TallyCommands(AgentMiddleware[TallyState]):
    """Only ``wrap_model_call`` (no hook of the loop stage, so the tools service joins
    the step's results itself), updating the reducer keys."""

    state_schema = TallyState

    def wrap_model_call(self, request: Any, handler: Any) -> Any:
        return _tallied(handler(request))

    async def awrap_model_call(self, request: Any, handler: Any) -> Any:
        return _tallied(await handler(request))


def _more(response: Any) -> Any:
    update = {"trail": ["more"], "tally": 5}
    return ExtendedModelResponse(model_response=response, command=Command(update=update))


class MoreTally(AgentMiddleware):
    """A second ``wrap_model_call`` layer with its own command: two writes of the
    reducer keys in one model step."""

    def wrap_model_call(self, request: Any, handler: Any) -> Any:
        return _more(handler(request))

    async def awrap_model_call(self, request: Any, handler: Any) -> Any:
        return _more(await handler(request))


@tool
def lucky_number(seed: int) -> str:
    """A lucky number from a seed (a tool only ``DynamicTools`` gives)."""
    return str(seed * 7)


def _swapped_tools(request: Any) -> Any:
    """The model call's tools without ``remember``, with ``lucky_number``."""
    tools = [t for t in request.tools if getattr(t, "name", None) != "remember"]
    return request.override(tools=[*tools, lucky_number])


class DynamicTools(AgentMiddleware):
    """Dynamic tools: per model call, hides ``remember`` and adds ``lucky_number``, which
    no agent defines, and runs it when the model calls it (``wrap_tool_call``)."""

    def wrap_model_call(self, request: Any, handler: Any) -> Any:
        return handler(_swapped_tools(request))

    async def awrap_model_call(self, request: Any, handler: Any) -> Any:
        return await handler(_swapped_tools(request))

    def wrap_tool_call(self, request: Any, handler: Any) -> Any:
        if request.tool_call["name"] == "lucky_number":
            return handler(request.override(tool=lucky_number))
        return handler(request)

    async def awrap_tool_call(self, request: Any, handler: Any) -> Any:
        if request.tool_call["name"] == "lucky_number":
            return await handler(request.override(tool=lucky_number))
        return await handler(request)


class AddsUnknownTool(AgentMiddleware):
    """Adds ``lucky_number`` to the model's tools with nothing to run it: LangChain
    refuses the agent's model call."""

    def wrap_model_call(self, request: Any, handler: Any) -> Any:
        return handler(_swapped_tools(request))

    async def awrap_model_call(self, request: Any, handler: Any) -> Any:
        return await handler(_swapped_tools(request))


def progress(steps: int, runtime: ToolRuntime) -> str:
    """Do some steps, reporting progress on the custom stream."""
    for n in range(1, steps + 1):
        runtime.stream_writer({"tool": "progress", "done": n, "of": steps})
    return f"did {steps} steps"


def progress_by_config(label: str) -> str:
    """Report on the custom stream through LangGraph's ``get_stream_writer()``."""
    from langgraph.config import get_stream_writer

    get_stream_writer()({"tool": "progress_by_config", "label": label})
    return f"reported {label}"


class Announcer(AgentMiddleware):
    """Hooks that write to the custom stream (``get_stream_writer()``) in every stage:
    before_model and after_model (the loop), wrap_model_call (the model service),
    wrap_tool_call (the tools service)."""

    def before_model(self, state: Any, runtime: Runtime[Any]) -> dict[str, Any] | None:
        from langgraph.config import get_stream_writer

        get_stream_writer()({"hook": "before_model", "messages": len(state["messages"])})
        return None

    def after_model(self, state: Any, runtime: Runtime[Any]) -> dict[str, Any] | None:
        runtime.stream_writer({"hook": "after_model", "messages": len(state["messages"])})
        return None

    def wrap_model_call(self, request: Any, handler: Any) -> Any:
        from langgraph.config import get_stream_writer

        get_stream_writer()({"hook": "wrap_model_call"})
        return handler(request)

    async def awrap_model_call(self, request: Any, handler: Any) -> Any:
        from langgraph.config import get_stream_writer

        get_stream_writer()({"hook": "wrap_model_call"})
        return await handler(request)

    def wrap_tool_call(self, request: Any, handler: Any) -> Any:
        from langgraph.config import get_stream_writer

        get_stream_writer()({"hook": "wrap_tool_call", "tool": request.tool_call["name"]})
        return handler(request)

    async def awrap_tool_call(self, request: Any, handler: Any) -> Any:
        from langgraph.config import get_stream_writer

        get_stream_writer()({"hook": "wrap_tool_call", "tool": request.tool_call["name"]})
        return await handler(request)


def count_words(messages: Any) -> int:
    """A custom token counter (``ContextEditingMiddleware(token_counter=...)``): words."""
    return sum(len(str(m.content).split()) for m in messages)
