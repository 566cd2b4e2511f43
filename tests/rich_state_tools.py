"""State keys that hold what LangGraph's state holds besides JSON (a LangChain message, a
pydantic model, a dataclass, a reducer's list of dataclasses, a delta channel), written
by a hook and by a tool's ``Command`` and read back by the next hook and the tool:
module-level, named by import path (``tests.rich_state_tools:NAME``) so the service
processes import them as a user's deployment would. What each reader saw is kept as text
in the state (``seen``) and in the tool's answer, so a parity test compares the types the
readers got."""

from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any, NotRequired

from langchain.agents import AgentState
from langchain.agents.middleware import AgentMiddleware
from langchain.tools import ToolRuntime
from langchain_core.messages import HumanMessage, ToolMessage
from langgraph.channels.delta import DeltaChannel
from langgraph.runtime import Runtime
from langgraph.types import Command
from pydantic import BaseModel


class Note(BaseModel):
    text: str
    n: int


@dataclass
class Mark:
    label: str
    count: int


def extend(state: list[str], writes: Sequence[list[str]]) -> list[str]:
    """A delta channel's reducer: the writes of a superstep in one call."""
    return [*state, *(item for write in writes for item in write)]


class RichState(AgentState[Any]):
    """The agent's own state keys (``state_schema``)."""

    greeting: NotRequired[HumanMessage]
    note: NotRequired[Note]
    mark: NotRequired[Mark]
    marks: Annotated[list[Mark], operator.add]
    log: Annotated[list[str], DeltaChannel(extend)]
    seen: NotRequired[list[str]]


class Unlisted:
    """A class no schema names: an envelope naming it must not build it."""

    built = 0

    def __init__(self, **kwargs: Any) -> None:
        Unlisted.built += 1
        self.kwargs = kwargs


def describe(state: Any) -> str:
    """What a reader got, by type and content."""
    greeting = state.get("greeting")
    note = state.get("note")
    mark = state.get("mark")
    parts = [
        f"greeting={type(greeting).__name__}:{getattr(greeting, 'content', greeting)}",
        f"note={type(note).__name__}:{getattr(note, 'text', note)}",
        f"mark={type(mark).__name__}:{getattr(mark, 'label', mark)}",
        "marks=" + ",".join(f"{type(m).__name__}:{getattr(m, 'label', m)}" for m in state["marks"]),
        "log=" + ",".join(state.get("log", [])),
    ]
    return " ".join(parts)


class RichHooks(AgentMiddleware[RichState]):
    """Before the first model call, writes every kind of value; before each later one,
    notes what it reads back."""

    state_schema = RichState

    def before_model(self, state: RichState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        seen = [*state.get("seen", []), describe(state)]
        if "greeting" in state:
            return {"seen": seen}
        return {
            "greeting": HumanMessage("hello from a hook", id="greeting-1"),
            "note": Note(text="hook", n=1),
            "mark": Mark("hook", 1),
            "marks": [Mark("hook", 1)],
            "log": ["hook"],
            "seen": seen,
        }

    async def abefore_model(
        self, state: RichState, runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        return self.before_model(state, runtime)


def stamp(label: str, runtime: ToolRuntime[Any, RichState]) -> Command[Any]:
    """Stamp the state with a label."""
    answer = ToolMessage(describe(runtime.state), tool_call_id=runtime.tool_call_id)
    return Command(
        update={
            "note": Note(text=label, n=2),
            "mark": Mark(label, 2),
            "marks": [Mark(label, 2)],
            "log": [f"tool:{label}"],
            "messages": [answer],
        }
    )
