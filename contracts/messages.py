"""Conversation messages on the wire, and their lossless mapping to ``langchain_core``.

Every field LangChain keeps on a message is kept here too (content blocks, ids, names,
metadata, tool calls, usage, artifacts), so a message that goes through Redis and back
compares equal to the one that went in.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

Content = str | list[str | dict[str, Any]]


class _MessageBase(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    content: Content = ""
    id: str | None = None
    name: str | None = None
    additional_kwargs: dict[str, Any] = Field(default_factory=dict)
    response_metadata: dict[str, Any] = Field(default_factory=dict)

    def text(self) -> str:
        """The message's text, with content blocks joined (what a user reads)."""
        if isinstance(self.content, str):
            return self.content
        parts = [
            block if isinstance(block, str) else str(block.get("text", ""))
            for block in self.content
            if isinstance(block, str) or block.get("type") == "text"
        ]
        return "".join(parts)


class ToolCall(BaseModel):
    """One call the model asked for: LangChain's ``ToolCall`` dict as a model."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    name: str
    args: dict[str, Any] = Field(default_factory=dict)


class SystemMessage(_MessageBase):
    type: Literal["system"] = "system"


class HumanMessage(_MessageBase):
    type: Literal["human"] = "human"


class AIMessage(_MessageBase):
    type: Literal["ai"] = "ai"
    tool_calls: list[ToolCall] = Field(default_factory=list)
    invalid_tool_calls: list[dict[str, Any]] = Field(default_factory=list)
    usage_metadata: dict[str, Any] | None = None


class ToolMessage(_MessageBase):
    type: Literal["tool"] = "tool"
    tool_call_id: str
    status: Literal["success", "error"] = "success"
    artifact: Any = None


Message = Annotated[
    SystemMessage | HumanMessage | AIMessage | ToolMessage, Field(discriminator="type")
]
MESSAGE_TYPES = (SystemMessage, HumanMessage, AIMessage, ToolMessage)
MESSAGE_ADAPTER: TypeAdapter[Message] = TypeAdapter(Message)
MESSAGES_ADAPTER: TypeAdapter[list[Message]] = TypeAdapter(list[Message])

_COMMON = ("content", "id", "name", "additional_kwargs", "response_metadata")


def with_input_ids(task_id: str, messages: list[Message]) -> list[Message]:
    """A task's input messages with ids, as the loop stores them: LangGraph gives every
    message of the state one, so middleware can replace it by id; derived from the task
    id, so a redelivery stores the same ones and a client knows them in advance."""
    return [
        m if m.id else m.model_copy(update={"id": f"{task_id}:in:{i}"})
        for i, m in enumerate(messages)
    ]


def to_langchain(message: Message) -> Any:
    """Convert to the matching ``langchain_core.messages`` class."""
    from langchain_core import messages as lc

    common: dict[str, Any] = {key: getattr(message, key) for key in _COMMON}
    if isinstance(message, SystemMessage):
        return lc.SystemMessage(**common)
    if isinstance(message, HumanMessage):
        return lc.HumanMessage(**common)
    if isinstance(message, AIMessage):
        return lc.AIMessage(
            **common,
            tool_calls=[
                {"id": c.id, "name": c.name, "args": dict(c.args), "type": "tool_call"}
                for c in message.tool_calls
            ],
            invalid_tool_calls=list(message.invalid_tool_calls),
            usage_metadata=message.usage_metadata,
        )
    return lc.ToolMessage(
        **common,
        tool_call_id=message.tool_call_id,
        status=message.status,
        artifact=message.artifact,
    )


def from_langchain(message: Any) -> Message:
    """Convert a ``langchain_core`` message (or a LangChain-style dict) to a contract."""
    from langchain_core import messages as lc

    if not isinstance(message, lc.BaseMessage):
        message = lc.convert_to_messages([message])[0]
    common: dict[str, Any] = {key: getattr(message, key) for key in _COMMON}
    if isinstance(message, lc.SystemMessage):
        return SystemMessage(**common)
    if isinstance(message, lc.HumanMessage):
        return HumanMessage(**common)
    if isinstance(message, lc.AIMessage):
        return AIMessage(
            **common,
            tool_calls=[
                ToolCall(id=c.get("id") or "", name=c["name"], args=c["args"])
                for c in message.tool_calls
            ],
            invalid_tool_calls=[dict(c) for c in message.invalid_tool_calls],
            usage_metadata=dict(message.usage_metadata) if message.usage_metadata else None,
        )
    if isinstance(message, lc.ToolMessage):
        return ToolMessage(
            **common,
            tool_call_id=message.tool_call_id,
            status=message.status,
            artifact=message.artifact,
        )
    raise TypeError(f"unsupported message type {type(message).__name__}")
