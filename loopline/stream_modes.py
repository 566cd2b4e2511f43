"""LangGraph's stream modes (``messages``, ``updates``, ``values``, ``custom``) from a task's
log and chunk stream, in the order and shapes LangChain's ``create_agent(...).stream``
gives them.

The graph LangChain builds for an agent without node hooks runs ``model`` at the odd
LangGraph steps and ``tools`` at the even ones; a loopline step ``n`` is LangGraph's
model step ``2n - 1`` and its tools step ``2n``. Per superstep LangGraph yields the
``messages`` first (the model's chunks as they come, each tool message as its call ends),
then ``updates`` (per node task), then ``values`` (once the superstep is done).

``values`` carry the whole state LangChain's would (``StateView``): the todo list, the
agent's and its middleware's state keys (the input's, then what ``wrap_model_call``
commands set with a reply and what the tools' Commands set when the step's results join,
folded by the keys' reducers as the services fold them), and ``structured_response``
(None after each model call until one is given). What ``before_*`` / ``after_*`` hooks
write has no event of its own, so it shows in no chunk (LangGraph yields one per hook node
that wrote).

``custom`` items (``services.custom_stream``: what hooks and tools wrote) come in
the order written, each before what its stage reports: a tool's before its tool
message, the before_model hooks' and wrap_model_call's before the model's reply, the
after_model hooks' after it (after the model's ``updates`` and ``values``, as LangGraph's
after_model node comes after the model node).

Chunk batches of a retried attempt (``ChunkBatch.reset``) carry ``loopline_attempt`` in
their metadata (and ``loopline_reset`` on the first chunk): what earlier attempts streamed
was not the reply. A first attempt's metadata has exactly LangChain's keys.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages import AIMessageChunk, BaseMessage

from contracts.chunks import ChunkBatch
from contracts.events import (
    AnyEvent,
    ApprovalRequested,
    ModelResponded,
    StepStarted,
    TaskCompleted,
    TaskFailed,
    TodosUpdated,
    ToolCompleted,
)
from contracts.messages import AIMessage, ToolMessage, to_langchain
from loopline.client import Client, LostTaskWatch
from loopline.errors import TaskFailedError, failure_of
from services.spec.channels import NO_CHANNELS, StateChannels

STREAM_MODES = ("messages", "updates", "values", "custom")
Item = tuple[str, Any]


def modes_of(stream_mode: str | Sequence[str]) -> tuple[list[str], bool]:
    """The modes asked for and whether items are ``(mode, data)`` tuples (a list)."""
    modes = [stream_mode] if isinstance(stream_mode, str) else list(stream_mode)
    unknown = [m for m in modes if m not in STREAM_MODES]
    if unknown or not modes:
        raise ValueError(f"stream_mode must be one or a list of {STREAM_MODES}, not {unknown}")
    return modes, not isinstance(stream_mode, str)


def _ns(task_id: str, node: str, step: int) -> str:
    """A checkpoint namespace as LangGraph's (``node:uuid``), stable for a task's step."""
    return f"{node}:{uuid.uuid5(uuid.NAMESPACE_URL, f'loopline:{task_id}:{node}:{step}')}"


def model_metadata(task_id: str, step: int, model: dict[str, Any]) -> dict[str, Any]:
    ns = _ns(task_id, "model", 2 * step - 1)
    return {
        "ls_integration": "langchain_chat_model",
        "langgraph_step": 2 * step - 1,
        "langgraph_node": "model",
        "langgraph_triggers": ("branch:to:model",),
        "langgraph_path": ("__pregel_pull", "model"),
        "langgraph_checkpoint_ns": ns,
        "checkpoint_ns": ns,
        **model,
    }


def tool_metadata(task_id: str, step: int, index: int) -> dict[str, Any]:
    return {
        "ls_integration": "langchain_create_agent",
        "langgraph_step": 2 * step,
        "langgraph_node": "tools",
        "langgraph_triggers": ("__pregel_push",),
        "langgraph_path": ("__pregel_push", index, False),
        "langgraph_checkpoint_ns": _ns(task_id, "tools", 2 * step),
    }


@dataclass(frozen=True)
class StateView:
    """What a run's ``values`` hold besides its messages, as LangChain's agent has them
    (``Agent.state_view``); the default shows the messages only."""

    initial: dict[str, Any] = field(default_factory=dict)
    """The state keys the run starts with (its input's, the reducers' empty values)."""
    channels: StateChannels = NO_CHANNELS
    """How updates join the keys (reducers)."""
    shown: Callable[[str], bool] = lambda key: False
    """The keys of the agent's output schema (``values`` gives those)."""
    structured: Callable[[Any], Any] | None = None
    """For an agent with a ``response_format``: the structured response from its JSON."""
    decided: Callable[[AIMessage], dict[str, ToolMessage]] = lambda message: {}
    """The tool messages the agent's after_model node answers calls with before any tool
    runs (TodoListMiddleware's refusal of parallel ``write_todos``)."""


class ModeTranslator:
    """Turns the task's chunk batches and log events into LangGraph stream items."""

    def __init__(
        self,
        task_id: str,
        modes: Sequence[str],
        inputs: list[BaseMessage],
        view: StateView | None = None,
    ) -> None:
        self.task_id = task_id
        self.modes = set(modes)
        self.state: list[BaseMessage] = list(inputs)
        self.view = view or StateView()
        self.keys: dict[str, Any] = dict(self.view.initial)
        """The state's other keys as they stand (``values`` shows those of the output)."""
        self.results: dict[int, BaseMessage] = {}  # the step's tool messages by call index
        self.updates: dict[int, dict[str, Any]] = {}  # the step's tool updates by call index
        self.todos: list[dict[str, Any]] | None = None  # the step's accepted todo list
        self.started = 0  # the last step whose model call the log showed
        self.pending: list[ChunkBatch] = []
        self.model_meta: dict[int, dict[str, Any]] = {}
        self.streamed: set[int] = set()  # steps whose chunks were yielded
        self.calls: dict[str, int] = {}  # open tool call id -> its index in the AI message
        self.replied = 0  # the last step whose ModelResponded the log showed
        self.done = False

    def begin(self) -> list[Item]:
        return self._values()

    def _values(self) -> list[Item]:
        """The ``values`` item of the state as it stands (when that mode is asked)."""
        if "values" not in self.modes:
            return []
        shown = {k: v for k, v in self.keys.items() if self.view.shown(k)}
        return [("values", {"messages": list(self.state), **shown})]

    def take(self, batches: list[ChunkBatch], events: list[AnyEvent]) -> list[Item]:
        """Items for one read: chunks go out once the log has started their step, so a
        step's chunks never come before the previous step's tool messages; custom items
        before the outcome of the stage that wrote them (see the module's docstring)."""
        self.pending.extend(batches)
        out: list[Item] = []
        for event in events:
            out.extend(self._release_before(event))
            out.extend(self._event(event))
            out.extend(self._release_after(event))
        out.extend(self._release(self._due))
        return out

    def _due(self, batch: ChunkBatch) -> bool:
        """Whether a batch can go out at the end of a read: its step has started, and
        (custom items of after_model hooks) its reply was shown."""
        return batch.step <= self.started and not (
            batch.stage == "after_model" and batch.step > self.replied
        )

    def _release_before(self, event: AnyEvent) -> list[Item]:
        """What was written before this event's stage reported: the step's chunks and
        the custom items of its hooks before a reply (not its after_model hooks', which
        come after it), a tool's custom items before its result."""
        if isinstance(event, ModelResponded):
            step = event.step
            return self._release(lambda b: b.step <= step and not _after(b, step))
        if isinstance(event, ToolCompleted):
            call_id = event.message.tool_call_id
            return self._release(lambda b: b.stage == "tools" and b.call_id == call_id)
        return []

    def _release_after(self, event: AnyEvent) -> list[Item]:
        """After a reply's items: what its after_model hooks wrote."""
        if not isinstance(event, ModelResponded):
            return []
        self.replied = max(self.replied, event.step)
        step = event.step
        return self._release(lambda b: _after(b, step))

    def _release(self, due: Callable[[ChunkBatch], bool]) -> list[Item]:
        """The items of the pending batches that are due, in the order they were written."""
        ready = [b for b in self.pending if due(b)]
        if not ready:
            return []
        self.pending = [b for b in self.pending if not due(b)]
        return [item for batch in ready for item in self._batch_items(batch)]

    def _batch_items(self, batch: ChunkBatch) -> list[Item]:
        """One batch's items: a stage's custom writes, or the model's chunks."""
        if batch.stage is not None:
            return [("custom", item) for item in batch.custom] if "custom" in self.modes else []
        return self._chunk_items(batch) if "messages" in self.modes else []

    def _chunk_items(self, batch: ChunkBatch) -> list[Item]:
        if batch.model:
            self.model_meta[batch.step] = batch.model
        meta = model_metadata(self.task_id, batch.step, self.model_meta.get(batch.step, {}))
        out: list[Item] = []
        for n, raw in enumerate(batch.chunks):
            extra: dict[str, Any] = {}
            if batch.attempt > 1:
                extra["loopline_attempt"] = batch.attempt
                if batch.reset and n == 0:
                    extra["loopline_reset"] = True
            out.append(("messages", (AIMessageChunk(**raw), {**meta, **extra})))
            self.streamed.add(batch.step)
        return out

    def _event(self, event: AnyEvent) -> list[Item]:
        if isinstance(event, StepStarted):
            self.started = max(self.started, event.step)
            return []
        if isinstance(event, ModelResponded):
            return self._model_responded(event)
        if isinstance(event, ToolCompleted):
            return self._tool_completed(event)
        if isinstance(event, TodosUpdated):  # the list joins the state with the step's results
            self.todos = [t.model_dump() for t in event.todos]
        elif isinstance(event, TaskCompleted):
            self.done = True
        elif isinstance(event, TaskFailed):
            raise failure_of(event)
        elif isinstance(event, ApprovalRequested):
            self.done = True  # waiting for a human: LangGraph's stream ends at an interrupt
            if "updates" in self.modes:
                return [("updates", {"__interrupt__": [event.request]})]
        return []

    def _model_responded(self, event: ModelResponded) -> list[Item]:
        message = to_langchain(event.message)
        self.state.append(message)
        structured = event.structured
        # the structured-output calls are answered by the model node itself
        answers = list(structured.tool_messages) if structured is not None else []
        self.state.extend(to_langchain(m) for m in answers)
        if self.view.structured is not None:
            given = structured is not None and structured.given
            response = structured.response if structured is not None and given else None
            self.keys["structured_response"] = self.view.structured(response) if given else None
        if event.update:  # wrap_model_call's commands (folded where they ran)
            self.keys.update(event.update)
        answered = {m.tool_call_id for m in answers}
        self.calls = {
            call["id"]: i
            for i, call in enumerate(getattr(message, "tool_calls", []))
            if call["id"] not in answered
        }
        self.results, self.updates = {}, {}
        out: list[Item] = []
        if "messages" in self.modes and event.step not in self.streamed:
            # not streamed (the chunk stream expired, or no client asked in time): the
            # whole reply as one chunk, as LangChain yields a model that does not stream
            whole = AIMessageChunk(**message.model_dump(exclude={"type"}))
            meta = model_metadata(self.task_id, event.step, {})
            out.append(("messages", (whole, meta)))
        if "updates" in self.modes:
            out.append(("updates", {"model": {"messages": [message]}}))
        out.extend(self._values())
        decided = self.view.decided(event.message)
        if decided:  # the after_model node's answers: a superstep of their own
            self.state.extend(to_langchain(m) for m in decided.values())
            for call_id in decided:
                self.calls.pop(call_id, None)
            out.extend(self._values())
        return out

    def _tool_completed(self, event: ToolCompleted) -> list[Item]:
        message = to_langchain(event.message)
        index = self.calls.pop(event.message.tool_call_id, 0)
        self.results[index] = message
        if event.update:
            self.updates[index] = event.update
        out: list[Item] = []
        if "messages" in self.modes:
            out.append(("messages", (message, tool_metadata(self.task_id, event.step, index))))
        if "updates" in self.modes:
            out.append(("updates", {"tools": {"messages": [message]}}))
        if not self.calls:  # the step's results join: its updates too, in call order
            self._join_updates()
            out.extend(self._values())
        return out

    def _join_updates(self) -> None:
        """The step's results join the state in call order, as LangGraph applies its
        tasks' writes (they came as each call ended)."""
        self.state.extend(message for _, message in sorted(self.results.items()))
        self.results = {}
        writes = [w for _, update in sorted(self.updates.items()) for w in update.items()]
        self.updates = {}
        # refused where the step joined: the task fails (its event follows)
        with contextlib.suppress(Exception):
            self.keys = self.view.channels.apply(self.keys, writes)
        if self.todos is not None:
            self.keys["todos"], self.todos = self.todos, None


def _after(batch: ChunkBatch, step: int) -> bool:
    """Custom items the after_model hooks of ``step`` wrote."""
    return batch.stage == "after_model" and batch.step == step


async def stream_task(
    client: Client,
    task_id: str,
    modes: Sequence[str],
    inputs: list[BaseMessage],
    *,
    view: StateView | None = None,
    block_ms: int = 1000,
) -> AsyncIterator[Item]:
    """``(mode, data)`` items of a submitted task until it ends or waits for a human;
    ``view``: what ``values`` show besides the messages."""
    translator = ModeTranslator(task_id, modes, inputs, view)
    for item in translator.begin():
        yield item
    watch = LostTaskWatch(client, task_id)  # a task Redis lost would never end
    await watch.begin()
    chunks_after, log_after = "0", "0"
    while not translator.done:
        batches, events = await client.feed(task_id, chunks_after, log_after, block_ms)
        if batches:
            chunks_after = batches[-1][0]
        if events:
            log_after = events[-1][0]
            watch.seen = True
        elif not batches:
            lost = await watch.lost()
            if lost is not None:
                raise TaskFailedError(lost)
        for item in translator.take([b for _, b in batches], [e for _, e in events]):
            yield item
