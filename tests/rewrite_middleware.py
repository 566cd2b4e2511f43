"""``wrap_model_call`` middleware that change the state's messages from the model call, as
deepagents' summarization and eviction middleware do: a ``Command`` beside the reply that
replaces a message by id, removes one (``RemoveMessage``) or starts over
(``REMOVE_ALL_MESSAGES``), and a layer that changes the request's own message list in
place (``request.messages.append(...)``), which LangChain's model node writes back to the
state. Importable by path, so deployed agents name them too."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from langchain.agents.middleware import AgentMiddleware, ExtendedModelResponse
from langchain_core.messages import AIMessage, HumanMessage, RemoveMessage, ToolMessage
from langgraph.graph.message import REMOVE_ALL_MESSAGES
from langgraph.types import Command


class RewritesState(AgentMiddleware):
    """Once the request holds a tool result (the second model call), returns a command
    beside the reply that changes earlier messages. ``kind``:

    - ``replace``: the tool result, by its id, with its content clipped (deepagents'
      overflow clip);
    - ``remove``: deletes the tool result and its AI message (``RemoveMessage``);
    - ``start_over``: ``REMOVE_ALL_MESSAGES``, then a summary, the last human message
      and the reply (a summarizer that rewrites the history);
    - ``drop_reply``: ``REMOVE_ALL_MESSAGES`` and a summary alone (the reply is gone: the
      state's last AI message is no longer the model's reply);
    - ``tag_human``: the first human message, by its id, tagged in ``additional_kwargs``
      (deepagents' large-message eviction), on every call.
    """

    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind = kind

    @property
    def name(self) -> str:
        return f"RewritesState_{self.kind}"

    def _update(self, request: Any, response: Any) -> list[Any] | None:
        messages = list(request.messages)
        tools = [m for m in messages if isinstance(m, ToolMessage)]
        if self.kind == "tag_human":
            first = next(m for m in messages if isinstance(m, HumanMessage))
            calls = len([m for m in messages if isinstance(m, AIMessage)])
            kwargs = {**first.additional_kwargs, "tagged_at": calls}
            return [first.model_copy(update={"additional_kwargs": kwargs})]
        if not tools:
            return None
        reply = next(m for m in response.result if isinstance(m, AIMessage))
        if self.kind == "replace":
            return [tools[-1].model_copy(update={"content": "[clipped]"})]
        if self.kind == "remove":
            asked = next(m for m in messages if isinstance(m, AIMessage) and m.tool_calls)
            return [RemoveMessage(id=str(asked.id)), RemoveMessage(id=str(tools[-1].id))]
        summary = HumanMessage("summary: 1 + 2 was added", id="summary-1")
        if self.kind == "start_over":
            last_human = [m for m in messages if isinstance(m, HumanMessage)][-1]
            return [RemoveMessage(id=REMOVE_ALL_MESSAGES), summary, last_human, reply]
        if self.kind == "drop_reply":
            return [RemoveMessage(id=REMOVE_ALL_MESSAGES), summary]
        raise ValueError(self.kind)

    def _extended(self, request: Any, response: Any) -> Any:
        update = self._update(request, response)
        if update is None:
            return response
        command = Command(update={"messages": update})
        return ExtendedModelResponse(model_response=response, command=command)

    def wrap_model_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        return self._extended(request, handler(request))

    async def awrap_model_call(self, request: Any, handler: Callable[[Any], Awaitable[Any]]) -> Any:
        return self._extended(request, await handler(request))


class ChangesRequestList(AgentMiddleware):
    """Changes the request's own message list in place before calling the model.
    ``kind``: ``append`` (a reminder after the last message, LangChain's own test of
    ``wrap_model_call``), ``pop_first`` (drops the first message), or
    ``after_override`` (appends to the list of an overridden request: not the state's)."""

    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind = kind

    @property
    def name(self) -> str:
        return f"ChangesRequestList_{self.kind}"

    def _changed(self, request: Any) -> Any:
        if self.kind == "append":
            request.messages.append(HumanMessage("remember to be nice!"))
        elif self.kind == "pop_first":
            if len(request.messages) > 1:
                request.messages.pop(0)
        elif self.kind == "after_override":
            request = request.override(messages=list(request.messages))
            request.messages.append(HumanMessage("only in this request"))
        else:
            raise ValueError(self.kind)
        return request

    def wrap_model_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        return handler(self._changed(request))

    async def awrap_model_call(self, request: Any, handler: Callable[[Any], Awaitable[Any]]) -> Any:
        return await handler(self._changed(request))
