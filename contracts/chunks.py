"""Token streaming: what the model service writes to a task's chunk stream.

The chunk stream (``Names.task_chunks``) is short-lived and capped: it exists for clients
that watch a reply as it is generated and expires minutes after the task's last chunk.
The durable log keeps only the whole message (``ModelResponded``), so storage does not
grow with the number of chunks.

One entry per batch (the chunks that arrived within a few milliseconds), its
``__data__`` field a ``ChunkBatch`` as JSON. A model call is one *attempt* of a step; a
retry (middleware such as ``ModelRetryMiddleware``, a fallback model, or a redelivery
after a crash) is the next attempt, whose first batch says ``reset``: the chunks of
earlier attempts of that step are void. An attempt that failed ends with a batch whose
``end`` is ``"failed"``; the one whose reply the task keeps ends with ``"done"``.

The same stream carries LangGraph's ``custom`` stream mode: what hooks write with
``get_stream_writer()`` and tools with ``ToolRuntime.stream_writer``, in whichever
service runs them, as batches with ``custom`` items, the ``stage`` that wrote them and,
for a tool, its ``call_id`` (``attempt`` 1, no chunks).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

CustomStage = Literal["before_model", "model", "after_model", "tools"]


BLOCKS = "blocks"
"""A client's request for a task's content-block events (LangGraph's v3 streaming)
rather than chunks: the ``asked`` field of ``Names.task_streaming``, and the suffix
(``"<task id> blocks"``) of the request's announcement on ``Names.stream_requests`` and
of its member of ``Names.stream_requested``."""


SUBTASKS = "subtasks"
"""The field of ``Names.task_streaming`` a client sets when it also streams the agents
the task's tool calls run (a stream with subgraphs): those are noted on the task's chunk
stream (``Subtask``) and streamed as the task is."""


class Subtask(BaseModel):
    """An agent run inside a tool call of a streamed task (a sub-agent): its own task,
    streamed as its parent is."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    task_id: str
    name: str | None = None
    """The agent's name (``create_agent(name=...)``: LangGraph's ``lc_agent_name``)."""
    messages: list[dict[str, Any]] = Field(default_factory=list)
    """Its input messages (``contracts.messages``), where its state starts."""
    tags: list[str] = Field(default_factory=list)
    metadata: dict[str, Any] = Field(default_factory=dict)
    """Its run's tags and metadata (what it inherited from the tool's config, and its
    own): LangGraph puts them in the metadata of a subgraph's streamed items."""


class ChunkBatch(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    task_id: str
    step: int = Field(ge=1)
    attempt: int = Field(ge=1)
    """1 for the first model call of the step; each retry or redelivery counts up."""
    chunks: list[dict[str, Any]] = Field(default_factory=list)
    """LangChain ``AIMessageChunk``s, each as ``model_dump(exclude_defaults=True)`` (a
    model that does not stream: its whole ``AIMessage``, typed ``ai``); for a task whose
    client asked for ``BLOCKS``, LangChain's content-block protocol events of the call
    (dicts with an ``event`` key: ``message-start``, ``content-block-delta``, ...)."""
    reset: bool = False
    """First batch of an attempt after the first: drop what earlier attempts streamed."""
    end: Literal["done", "failed"] | None = None
    """Set on the attempt's last batch."""
    model: dict[str, Any] = Field(default_factory=dict)
    """On the attempt's first batch: the chat model's LangSmith parameters
    (``ls_provider``, ``ls_model_name``, ...) and ``lc_versions``, which LangChain puts
    in the metadata of every streamed chunk."""
    custom: list[Any] = Field(default_factory=list)
    """Items written to the custom stream (``get_stream_writer()``,
    ``ToolRuntime.stream_writer``), in the order written."""
    stage: CustomStage | None = None
    """Where the custom items were written: ``before_model`` (before_agent and
    before_model hooks, in the loop), ``model`` (wrap_model_call, in the model service),
    ``after_model`` (after_model and after_agent hooks), ``tools`` (a tool call and its
    wrap_tool_call chain, ``call_id``)."""
    call_id: str | None = None
    """For ``tools``: the call whose tool (or wrap_tool_call chain) wrote them."""
    kind: Literal["custom", "deltas", "subtasks"] = "custom"
    """What the ``custom`` items are: custom writes; for ``tools``, the call's partial
    outputs (``deltas``: ``ToolRuntime.emit_output_delta``, LangGraph's ``tools`` stream
    mode), or the agents the call ran (``subtasks``: ``Subtask``s, whose items a
    client streaming with subgraphs shows under the call's namespace)."""
