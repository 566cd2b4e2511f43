"""``wrap_model_call`` middleware that return ``ExtendedModelResponse`` commands adding
messages beside the model's reply (and setting a state key), as LangChain 1.5's own
tests of wrap_model_call state updates do; an ``after_model`` hook that notes what it
sees. Importable by path, so deployed agents name them too."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, NotRequired

from langchain.agents.middleware import AgentMiddleware, AgentState, ExtendedModelResponse
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langgraph.types import Command


class NotesState(AgentState):
    notes: NotRequired[str]
    seen: NotRequired[list[str]]


class AddsMessages(AgentMiddleware):
    """Adds one message beside each reply, naming how many messages its request had;
    with ``note``, also sets the ``notes`` key; ``kind``: ``human``, ``ai``, or
    ``answer`` (a tool message answering the reply's calls, so they do not run)."""

    state_schema = NotesState

    def __init__(self, label: str, note: bool = False, kind: str = "human") -> None:
        super().__init__()
        self.label = label
        self.note = note
        self.kind = kind

    @property
    def name(self) -> str:
        return f"AddsMessages_{self.label}"

    def _extended(self, request: Any, response: Any) -> Any:
        seen = len(request.messages)
        reply = next(m for m in response.result if isinstance(m, AIMessage))
        added: list[BaseMessage]
        if self.kind == "answer":
            added = [
                ToolMessage(f"{self.label} answered", tool_call_id=c["id"], name=c["name"])
                for c in reply.tool_calls
            ]
        elif self.kind == "ai":
            added = [AIMessage(f"{self.label} says {seen}", id=f"{self.label}-{seen}")]
        else:
            added = [HumanMessage(f"{self.label} saw {seen}", id=f"{self.label}-{seen}")]
        update: dict[str, Any] = {"messages": added}
        if self.note:
            update["notes"] = f"{self.label} at {seen}"
        return ExtendedModelResponse(model_response=response, command=Command(update=update))

    def wrap_model_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        return self._extended(request, handler(request))

    async def awrap_model_call(
        self, request: Any, handler: Callable[[Any], Awaitable[Any]]
    ) -> Any:
        return self._extended(request, await handler(request))


class SeesAfterModel(AgentMiddleware):
    """after_model: notes the types of the messages it sees (the commands' are there)."""

    state_schema = NotesState

    def after_model(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        return {"seen": [m.type for m in state["messages"]]}
