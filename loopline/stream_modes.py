"""LangGraph's stream modes (``messages``, ``updates``, ``values``, ``custom``, and the
partial outputs of ``tools``, whose lifecycle ``loopline.stream_parts`` adds) from a task's
log and chunk stream, in the order and shapes LangChain's ``create_agent(...).stream``
gives them.

Each node of LangChain's graph runs in a superstep of its own: a hook of the loop stage
(``<middleware>.<hook>``, one ``NodesUpdated`` entry of the log names those that ran),
the model, then the step's tool calls, which run together in one superstep. The
supersteps are counted as the log shows them, so ``langgraph_step`` in the metadata is
LangGraph's: without node hooks a loopline step ``n`` is the model's superstep
``2n - 1`` and its tools' ``2n``. Per superstep LangGraph yields the ``messages`` first
(the model's chunks as they come, each tool message as its call ends, a hook's new
messages), then ``updates`` (per node task), then ``values`` (once the superstep's writes
are applied, in call order for the tools).

A run that stops for a human ends as LangGraph's does: ``updates`` gets
``{"__interrupt__": (Interrupt(value, id),)}`` for each node (or tool call) that asked,
``values`` the state as it stands with the same ``__interrupt__``; a step whose other
tool calls ran meanwhile shows their results once they are all in. A reply that a human
is asked about (HumanInTheLoopMiddleware's batched approval) waits beside the log until
decided: it is shown from the task's state before the interrupt, as LangGraph shows the
model's update first. A resumed run (``Command(resume=...)``) continues the same count:
its translator is first given the log so far (``prime``), then the state the thread
has (``resume_from``); the reply it was asked about is not shown again, the calls of the
waiting step that had run are replayed as LangGraph replays cached writes.

``values`` carry the whole state LangChain's would (``StateView``): the todo list, the
agent's and its middleware's state keys (the input's, then what each hook node returns,
what ``wrap_model_call`` commands set with a reply and what the tools' Commands set when
the step's results join, folded by the keys' reducers as the services fold them), and
``structured_response`` (None after each model call until one is given). The view says
which keys show (every one in Python's ``stream``, as LangGraph's; the agent's output
schema's at the gateway, as LangGraph's server); ``updates`` show a node's keys the same
way.

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
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, ToolMessage

from contracts.agent import AgentSpec
from contracts.chunks import ChunkBatch, Subtask
from contracts.events import (
    AnyEvent,
    ApprovalRequested,
    DecisionsRefused,
    ModelResponded,
    NodesUpdated,
    NodeUpdate,
    RemovedMessage,
    StepStarted,
    TaskCompleted,
    TaskFailed,
    TodosUpdated,
    ToolCompleted,
    ToolInterrupted,
    WrittenMessage,
    parse_event,
    rewritten,
)
from contracts.messages import MESSAGE_ADAPTER, from_langchain, to_langchain
from contracts.messages import AIMessage as Reply
from contracts.messages import ToolMessage as ToolResult
from loopline.client import Client, LostTaskWatch
from loopline.errors import TaskFailedError, decision_refusal_of, failure_of, refusal_of
from services.hooks import (
    HookSet,
    hooks_for,
    merge_messages,
    node_name,
    with_stand_in_ids,
    without_stand_in_ids,
)
from services.spec.channels import NO_CHANNELS, StateChannels

if TYPE_CHECKING:
    from langgraph.types import Interrupt

STREAM_MODES = ("messages", "updates", "values", "custom", "tools")
Item = tuple[str, Any]
INTERRUPT = "__interrupt__"
JUMP = "jump_to"
TOOLS_NODE = "tools"
SUBTASK = "subtask"
"""An internal mode: a tool call ran an agent (``(call id, Subtask)``), whose items a
stream with subgraphs shows under the call's namespace."""
AFTER_HOOKS = (".after_model", ".after_agent")
"""The hooks that run on a model's reply (a wait there keeps the reply beside the log)."""


def tool_delta(call_id: str | None, delta: Any) -> dict[str, Any]:
    """LangGraph's ``tools`` item for a partial output of a running tool call."""
    return {"event": "tool-output-delta", "tool_call_id": call_id, "delta": delta}


def modes_of(stream_mode: str | Sequence[str], *, internal: bool = False) -> tuple[list[str], bool]:
    """The modes asked for and whether items are ``(mode, data)`` tuples (a list);
    ``internal``: LangGraph's v3 entry asks, which may also name ``tasks`` (made for
    its run object only: ``loopline.stream_parts.Lifecycle``)."""
    modes = [stream_mode] if isinstance(stream_mode, str) else list(stream_mode)
    known = (*STREAM_MODES, "tasks") if internal else STREAM_MODES
    unknown = [m for m in modes if m not in known]
    if unknown or not modes:
        raise ValueError(f"stream_mode must be one or a list of {STREAM_MODES}, not {unknown}")
    return modes, not isinstance(stream_mode, str)


def _ns(task_id: str, node: str, step: int) -> str:
    """A checkpoint namespace as LangGraph's (``node:uuid``), stable for a task's step."""
    return f"{node}:{uuid.uuid5(uuid.NAMESPACE_URL, f'loopline:{task_id}:{node}:{step}')}"


def _thread(thread_id: str | None) -> dict[str, Any]:
    """LangGraph puts the run's ``thread_id`` in every node's metadata."""
    return {} if thread_id is None else {"thread_id": thread_id}


@dataclass(frozen=True)
class Placement:
    """Where a run's items stand in LangGraph's stream: the graph namespace of the run
    (a sub-agent's, ``("tools:<call's task id>",)``; ``()`` for the caller's own run) and
    the run's tags, which LangGraph's messages handler puts in a model chunk's metadata
    (the chat model run's user tags: ``filter_to_user_tags``)."""

    ns: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()

    def place(self, meta: dict[str, Any]) -> dict[str, Any]:
        """``meta`` of a node of the run as LangGraph gives a subgraph's: its checkpoint
        namespace under the graph's (``<graph ns>|<node>:<id>``), and a model chunk's
        ``checkpoint_ns`` the graph's own."""
        if not self.ns:
            return meta
        graph = "|".join(self.ns)
        placed = {**meta, "langgraph_checkpoint_ns": f"{graph}|{meta['langgraph_checkpoint_ns']}"}
        if "checkpoint_ns" in meta:
            placed["checkpoint_ns"] = graph
        return placed

    def model(self, meta: dict[str, Any]) -> dict[str, Any]:
        tagged = {**meta, "tags": list(self.tags)} if self.tags else meta
        return self.place(tagged)


def model_metadata(
    task_id: str,
    superstep: int,
    model: dict[str, Any],
    thread_id: str | None = None,
    run: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A model chunk's metadata: the model node's at LangGraph superstep ``superstep``.
    ``run``: the run's config metadata, which LangGraph puts first in every node's."""
    ns = _ns(task_id, "model", superstep)
    return {
        **(run or {}),
        "ls_integration": "langchain_chat_model",
        **_thread(thread_id),
        "langgraph_step": superstep,
        "langgraph_node": "model",
        "langgraph_triggers": ("branch:to:model",),
        "langgraph_path": ("__pregel_pull", "model"),
        "langgraph_checkpoint_ns": ns,
        "checkpoint_ns": ns,
        **model,
    }


def tool_metadata(
    task_id: str,
    superstep: int,
    index: int,
    thread_id: str | None = None,
    run: Mapping[str, Any] | None = None,
    call_id: str | None = None,
) -> dict[str, Any]:
    """A tool message's metadata: the ``index``-th call sent to the tools at ``superstep``
    (``call_id``: its own task's namespace, ``tool_ns``, as LangGraph runs each call as a
    task of its own)."""
    ns = _ns(task_id, TOOLS_NODE, superstep) if call_id is None else tool_ns(task_id, call_id)
    return {
        **(run or {}),
        "ls_integration": "langchain_create_agent",
        **_thread(thread_id),
        "langgraph_step": superstep,
        "langgraph_node": TOOLS_NODE,
        "langgraph_triggers": ("__pregel_push",),
        "langgraph_path": ("__pregel_push", index, False),
        "langgraph_checkpoint_ns": ns,
    }


def tool_ns(task_id: str, call_id: str) -> str:
    """The namespace of a tool call's task (``tools:<uuid>``): its tool message's
    checkpoint namespace, and the graph namespace of an agent it runs (a sub-agent's
    items stream under it), one string in both as in LangGraph."""
    return f"{TOOLS_NODE}:{uuid.uuid5(uuid.NAMESPACE_URL, f'loopline:{task_id}:tools:{call_id}')}"


def node_metadata(
    task_id: str,
    node: str,
    superstep: int,
    thread_id: str | None = None,
    run: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A message a hook node returned: that node's metadata."""
    return {
        **(run or {}),
        "ls_integration": "langchain_create_agent",
        **_thread(thread_id),
        "langgraph_step": superstep,
        "langgraph_node": node,
        "langgraph_triggers": (f"branch:to:{node}",),
        "langgraph_path": ("__pregel_pull", node),
        "langgraph_checkpoint_ns": _ns(task_id, node, superstep),
    }


def interrupt_of(event: ApprovalRequested) -> Interrupt:
    """LangGraph's ``Interrupt`` for a request of the log."""
    from langgraph.types import Interrupt

    interrupt_id = event.interrupt_id or f"{event.task_id}:{event.step}"
    return Interrupt(event.request, interrupt_id, response_schema=event.response_schema)


@dataclass(frozen=True)
class StateView:
    """What a run's ``values`` (and its nodes' ``updates``) hold besides the messages, as
    LangChain's agent has them (``Agent.state_view``, the gateway's ``state_view``); the
    default shows every key, as LangGraph's ``stream`` of a graph without an output
    schema does."""

    initial: dict[str, Any] = field(default_factory=dict)
    """The state keys the run starts with (its input's, the reducers' empty values)."""
    channels: StateChannels = NO_CHANNELS
    """How updates join the keys (reducers)."""
    shown: Callable[[str], bool] = lambda key: True
    """The keys ``values`` and ``updates`` give (``state_view``)."""
    structured: Callable[[Any], Any] | None = None
    """For an agent with a ``response_format``: the structured response from its JSON."""
    decided: Callable[[Reply], dict[str, ToolResult]] = lambda message: {}
    """The tool messages the agent's after_model node answers calls with before any tool
    runs (TodoListMiddleware's refusal of parallel ``write_todos``)."""
    todo_node: str | None = None
    """TodoListMiddleware's after_model node, which loopline runs in its own code (no
    log event says it ran): LangGraph runs it after every model call."""
    todo_after: str | None = None
    """The after_model node it follows in LangGraph's chain (after_model hooks run in
    reverse middleware order); None: it runs right after the model."""


MESSAGES_ONLY = StateView(shown=lambda key: False)
"""A view that shows no state key besides the messages."""


def state_view(
    spec: AgentSpec,
    given: Mapping[str, Any],
    structured: Callable[[Any], Any] | None = None,
    *,
    output_only: bool = False,
) -> StateView:
    """The view of a run of the agent ``spec`` whose input sets the state keys ``given``:
    its state keys (from the input's, folded as the services fold them), the todo list
    with TodoListMiddleware, ``structured_response`` with a ``response_format``
    (``structured`` makes it from its JSON; None: the JSON as it is). Every key shows,
    as LangGraph's ``stream`` shows every channel of the graph (private ones too);
    ``output_only``: the keys of the agent's output schema only, as LangGraph's server
    shows them. Raises what loading the agent's middleware raises."""
    from services.agent_view import has_todos
    from services.tasks.plan import after_model_results

    todos = has_todos(spec)
    hooks = hooks_for(spec.agent_id, spec)
    keys = hooks.output_keys() if output_only else None
    initial = hooks.start_state({}, given)

    def shown(key: str) -> bool:
        if key == "todos":
            return todos
        return keys is None or key in keys

    todo_node, todo_after = _todo_chain(spec, hooks) if todos else (None, None)
    return StateView(
        initial=initial,
        channels=hooks.channels,
        shown=shown,
        structured=(structured or _as_is) if spec.response_format is not None else None,
        decided=lambda message: after_model_results(spec, message),
        todo_node=todo_node,
        todo_after=todo_after,
    )


def _todo_chain(spec: AgentSpec, hooks: HookSet) -> tuple[str, str | None]:
    """TodoListMiddleware's after_model node and the after_model node before it in
    LangGraph's chain: that of the nearest middleware after it in the list."""
    at = next(i for i, m in enumerate(spec.middleware) if m.type == "TodoListMiddleware")
    later = [(i, m) for i, m in hooks.with_hook("after_model") if i > at]
    before = node_name(later[0][1], "after_model") if later else None
    return "TodoListMiddleware.after_model", before


def _as_is(value: Any) -> Any:
    return value


@dataclass
class ToolsStep:
    """The tools superstep of a loopline step: the calls sent to the tools (those no hook
    answered), in call order, and what became of them so far."""

    step: int
    superstep: int
    sent: list[str]
    results: dict[str, ToolMessage] = field(default_factory=dict)
    """Call id -> its tool message, in the order they ended."""
    updates: dict[str, list[tuple[str, Any]]] = field(default_factory=dict)
    """Call id -> its state writes: those it sent (``CONFIG_KEY_SEND``), then its
    ``Command(update=...)``'s, in order."""
    waiting: dict[str, Interrupt] = field(default_factory=dict)
    """Call id -> the interrupt it waits on."""

    def index(self, call_id: str) -> int:
        return self.sent.index(call_id) if call_id in self.sent else len(self.sent)

    @property
    def settled(self) -> bool:
        """Every call has its result or waits for a human."""
        return all(c in self.results or c in self.waiting for c in self.sent)

    @property
    def complete(self) -> bool:
        return all(c in self.results for c in self.sent)

    def in_order(self) -> list[ToolMessage]:
        """The results as LangGraph applies the superstep's writes: in call order."""
        order = [c for c in self.sent if c in self.results]
        order += [c for c in self.results if c not in self.sent]
        return [self.results[c] for c in order]


class ModeTranslator:
    """Turns the task's chunk batches and log events into LangGraph stream items.

    ``view``: the state keys besides ``messages`` (where they start, how updates join
    them, which ``values`` and a node's ``updates`` show); ``thread_id`` goes in every
    item's metadata, as LangGraph's."""

    def __init__(
        self,
        task_id: str,
        modes: Sequence[str],
        inputs: list[BaseMessage],
        view: StateView | None = None,
        *,
        thread_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        placement: Placement | None = None,
    ) -> None:
        self.task_id = task_id
        self.modes = set(modes)
        self.thread_id = thread_id
        self.placement = placement or Placement()
        self.metadata = dict(metadata or {})
        """The run's config metadata (the agent's ``lc_agent_name`` with it), in every
        item's metadata as LangGraph puts it."""
        self.state: list[BaseMessage] = list(inputs)
        self.view = view or StateView()
        self.keys: dict[str, Any] = dict(self.view.initial)
        """The state's other keys as they stand (``values`` shows those of the view)."""
        self.todos: list[dict[str, Any]] | None = None  # the step's accepted todo list
        self.started = 0  # the last step whose model call the log showed
        self.pending: list[ChunkBatch] = []
        self.model_meta: dict[int, dict[str, Any]] = {}
        self.streamed: set[int] = set()  # steps whose chunks were yielded
        self.called: set[int] = set()  # steps with a model call on the chunk stream
        self.replied = 0  # the last step whose ModelResponded was shown
        self.shown: set[int] = set()  # steps whose reply was shown
        self.seen_ids: set[str] = set()
        """Message ids the ``messages`` mode has seen in the run (LangGraph's handler
        yields a node's output message once)."""
        self.superstep = 0  # LangGraph's superstep of the last node that ran
        self.model_steps: dict[int, int] = {}  # loopline step -> its model's superstep
        self.tools: ToolsStep | None = None  # the tools superstep under way
        self.resumed = False
        self.done = False

    # -- the run's start -----------------------------------------------------------------

    def begin(self) -> list[Item]:
        """The first items: the state the run starts from; a resumed run's waiting tool
        step replays the results its calls had (LangGraph's cached writes), then its
        calls the answer left waiting ask again (LangGraph runs them again, and they
        interrupt again before the answered calls end)."""
        out: list[Item] = [("values", self._values())] if "values" in self.modes else []
        if self.resumed and self.tools is not None:
            if "updates" in self.modes:
                for message in self.tools.results.values():
                    cached = {TOOLS_NODE: {"messages": [message]}, "__metadata__": {"cached": True}}
                    out.append(("updates", cached))
            for asked in self.tools.waiting.values():
                out.extend(self._interrupt_items(asked))
        return out

    def prime(self, events: Sequence[AnyEvent]) -> None:
        """Go through the log of the run(s) before this one: the supersteps, the replies
        shown and the waiting step are known, nothing is yielded."""
        modes, self.modes = self.modes, set()
        try:
            for event in events:
                self._event(event)
        finally:
            self.modes = modes

    def resume_from(
        self, messages: list[BaseMessage], answered: Collection[str], keys: dict[str, Any]
    ) -> None:
        """Continue after a human answered the interrupts ``answered`` (ids), from the
        thread's state: its messages (LangGraph's checkpoint) and state keys."""
        self.state = list(messages)
        self.keys = {**self.keys, **keys}
        self.done = False
        self.resumed = True
        if self.tools is not None:
            waiting = self.tools.waiting
            self.tools.waiting = {c: i for c, i in waiting.items() if i.id not in answered}

    # -- reading ---------------------------------------------------------------------------

    def take(self, batches: list[ChunkBatch], events: list[AnyEvent]) -> list[Item]:
        """Items for one read: chunks go out once the log has started their step, so a
        step's chunks never come before the previous step's tool messages; custom items
        before the outcome of the stage that wrote them (see the module's docstring)."""
        self.pending.extend(batches)
        out: list[Item] = []
        for event in events:
            if self.done:  # what follows in the log is a later run's (a resume's)
                return out
            out.extend(self._release_before(event))
            out.extend(self._event(event))
            out.extend(self._release_after(event))
        if not self.done:
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
            replied = self.replied
            # after_model hooks of a shown reply ran before any tool of it: their items,
            # read in the same batch as this result, go out first, in the order written
            return self._release(
                lambda b: (b.stage == "tools" and b.call_id == call_id)
                or (b.stage == "after_model" and b.step <= replied)
            )
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
        if batch.kind == "deltas":  # a tool's partial outputs (LangGraph's ``tools`` mode)
            if "tools" not in self.modes:
                return []
            return [("tools", tool_delta(batch.call_id, item)) for item in batch.custom]
        if batch.kind == "subtasks":  # agents a tool call ran (``stream_parts.nested``)
            if SUBTASK not in self.modes:
                return []
            call_id = str(batch.call_id)
            segment = tool_ns(self.task_id, call_id)
            return [
                (SUBTASK, (call_id, Subtask.model_validate(link), segment)) for link in batch.custom
            ]
        if batch.stage is not None:
            return [("custom", item) for item in batch.custom] if "custom" in self.modes else []
        return self._chunk_items(batch) if "messages" in self.modes else []

    def _chunk_items(self, batch: ChunkBatch) -> list[Item]:
        if batch.model:
            self.model_meta[batch.step] = batch.model
        meta = self._model_meta(batch.step)
        self.called.add(batch.step)
        out: list[Item] = []
        for n, raw in enumerate(batch.chunks):
            extra: dict[str, Any] = {}
            if batch.attempt > 1:
                extra["loopline_attempt"] = batch.attempt
                if batch.reset and n == 0:
                    extra["loopline_reset"] = True
            out.append(("messages", (_streamed(raw), {**meta, **extra})))
            self.streamed.add(batch.step)
        return out

    def _model_meta(self, step: int) -> dict[str, Any]:
        model = self.model_meta.get(step, {})
        meta = model_metadata(
            self.task_id, self._model_step(step), model, self.thread_id, self.metadata
        )
        return self.placement.model(meta)

    def _model_step(self, step: int) -> int:
        """The superstep of the model call of ``step`` (the next one, the first time)."""
        found = self.model_steps.get(step)
        if found is None:
            self.superstep += 1
            found = self.model_steps[step] = self.superstep
        return found

    # -- the log's events ------------------------------------------------------------------

    def _event(self, event: AnyEvent) -> list[Item]:
        if isinstance(event, StepStarted):
            self.started = max(self.started, event.step)
            return []
        if isinstance(event, ModelResponded):
            return self._model_responded(event)
        if isinstance(event, NodesUpdated):
            return [item for node in event.nodes for item in self._node(node)]
        if isinstance(event, ToolCompleted):
            return self._tool_completed(event)
        if isinstance(event, ApprovalRequested):
            return self._asked(event)
        if isinstance(event, TodosUpdated):  # the list joins the state with the step's results
            self.todos = [t.model_dump() for t in event.todos]
        elif isinstance(event, TaskCompleted):
            self.done = True
        elif isinstance(event, TaskFailed):
            raise failure_of(event)
        elif isinstance(event, DecisionsRefused) and self.resumed:
            raise refusal_of(event)  # the answer this stream's resume sent
        elif isinstance(event, ToolInterrupted) and event.error and self.resumed:
            raise decision_refusal_of(event)  # a waiting call refused this resume's answer
        return []

    def _model_responded(self, event: ModelResponded) -> list[Item]:
        message = to_langchain(event.message)
        step = event.step
        if step in self.shown:
            # shown before the run stopped for a human (it is logged once decided): the
            # model node does not run again
            added = [to_langchain(m) for m in event.added]
            self.state = merge_messages(self.state, [message, *added])
            return []
        self.shown.add(step)
        node_input = list(self.state)  # the messages the model node was given
        if event.rewrite is not None:  # the node's writes changed the messages before it
            self.state = rewritten(event.rewrite, node_input, to_langchain)
        self.state.append(message)
        structured = event.structured
        # the structured-output calls are answered by the model node itself
        answers = [to_langchain(m) for m in structured.tool_messages] if structured else []
        self.state.extend(answers)
        if self.view.structured is not None:
            given = structured is not None and structured.given
            response = structured.response if structured is not None and given else None
            self.keys["structured_response"] = self.view.structured(response) if given else None
        if event.update:  # wrap_model_call's commands (folded where they ran)
            self.keys.update(self.view.channels.codec.decode(event.update))
        added = [to_langchain(m) for m in event.added]  # their messages, after the node's own
        self.state.extend(added)
        out: list[Item] = []
        if "messages" in self.modes and step in self.called and step not in self.streamed:
            # the model was called, streaming, and none of it is the reply: the
            # wrap_model_call chain made it (a retry's failure message), and LangGraph
            # yields it from the model node's output
            meta = self.placement.place(
                node_metadata(
                    self.task_id, "model", self._model_step(step), self.thread_id, self.metadata
                )
            )
            out.append(("messages", (message, meta)))
        elif "messages" in self.modes and step not in self.streamed:
            # not streamed (the chunk stream expired, or no client asked in time): the
            # whole reply as one chunk, as LangChain yields a model that streams
            whole = AIMessageChunk(**message.model_dump(exclude={"type"}))
            out.append(("messages", (whole, self._model_meta(step))))
        out.extend(self._node_output(event, node_input, [message, *answers]))
        if "values" in self.modes:
            out.append(("values", self._values()))
        if self.view.todo_node is not None and self.view.todo_after is None:
            out.extend(self._todo_node(event.message))
        return out

    def _node_output(
        self, event: ModelResponded, node_input: list[BaseMessage], own: list[BaseMessage]
    ) -> list[Item]:
        """What the model node's output shows: the ``messages`` LangGraph yields from it
        and its ``updates``. ``own``: the reply and its structured answers."""
        superstep = self._model_step(event.step)
        first: list[BaseMessage] = []  # what the node writes before its reply
        if event.repaired is not None:  # the request's list, written back
            from langchain_core.messages import RemoveMessage
            from langgraph.graph.message import REMOVE_ALL_MESSAGES

            repaired = rewritten(event.repaired, node_input, to_langchain)
            first = [RemoveMessage(id=REMOVE_ALL_MESSAGES), *repaired]
        out: list[Item] = []
        if "messages" in self.modes:
            meta = self.placement.place(
                node_metadata(self.task_id, "model", superstep, self.thread_id, self.metadata)
            )
            shown = [*node_input, *own]
            out.extend(("messages", (m, meta)) for m in self._unseen(event, shown, first))
        if "updates" in self.modes and (event.writes or event.repaired is not None):
            out.append(("updates", {"model": self._model_writes(event, [*first, *own])}))
        elif "updates" in self.modes:
            out.append(("updates", {"model": {"messages": own[:1]}}))
        return out

    def _unseen(
        self, event: ModelResponded, shown: Sequence[BaseMessage], first: Sequence[BaseMessage]
    ) -> list[BaseMessage]:
        """The messages of the model node's writes that LangGraph's ``messages`` mode
        yields from the node's output: each whose id it has not seen (in a node's input,
        or yielded before in the run), in order. ``shown``: the node's input, the reply
        (yielded as it streamed) and its structured answers; ``first``: what the node
        writes before its reply."""
        seen = self.seen_ids
        seen.update(m.id for m in shown if m.id)
        written = [m for write in event.writes if write.key == "messages" for m in write.messages]
        out: list[BaseMessage] = []
        for message in [*first, *(_written(m) for m in written)]:
            if message.id is not None and message.id in seen:
                continue
            if message.id is not None:
                seen.add(message.id)
            out.append(message)
        return out

    def _model_writes(self, event: ModelResponded, own: list[BaseMessage]) -> Any:
        """The model node's update as LangGraph's ``updates`` shows a node that returned
        commands (LangChain's model node with wrap_model_call commands): its own write,
        then each command's, one dict for all of them, or one dict per write when a key
        is written more than once."""
        writes: list[tuple[str, Any]] = [("messages", own)]
        if self.view.structured is not None:
            writes.append(("structured_response", self.keys.get("structured_response")))
        for write in event.writes:
            if write.key == "messages":
                writes.append(("messages", [_written(m) for m in write.messages]))
            else:
                writes.append((write.key, self.view.channels.codec.decode_value(write.value)))
        writes = [(k, v) for k, v in writes if k == "messages" or self.view.shown(k)]
        keys = [k for k, _ in writes]
        if len(set(keys)) < len(keys):
            return [{k: v} for k, v in writes]
        return dict(writes)

    def _todo_node(self, reply: Reply) -> list[Item]:
        """TodoListMiddleware's after_model superstep: None, or its refusals of parallel
        ``write_todos`` calls (loopline answers them before any tool runs)."""
        self.superstep += 1
        node = str(self.view.todo_node)
        decided = self.view.decided(reply)
        if not decided:
            return [("updates", {node: None})] if "updates" in self.modes else []
        answers = [to_langchain(m) for m in decided.values()]
        self.state.extend(answers)
        out: list[Item] = []
        if "messages" in self.modes:
            meta = self.placement.place(
                node_metadata(self.task_id, node, self.superstep, self.thread_id, self.metadata)
            )
            out.extend(("messages", (message, meta)) for message in answers)
        if "updates" in self.modes:
            out.append(("updates", {node: {"messages": answers}}))
        if "values" in self.modes:
            out.append(("values", self._values()))
        return out

    def _node(self, ran: NodeUpdate) -> list[Item]:
        """A hook node's superstep, then TodoListMiddleware's when it follows this one
        (unless the node jumped)."""
        out = self._hook_node(ran)
        jumped = ran.update is not None and JUMP in ran.update
        if ran.node == self.view.todo_after and not jumped:
            last = next((m for m in reversed(self.state) if isinstance(m, AIMessage)), None)
            reply = from_langchain(last) if last is not None else None
            if isinstance(reply, Reply):
                out.extend(self._todo_node(reply))
        return out

    def _hook_node(self, ran: NodeUpdate) -> list[Item]:
        """A hook node's superstep: the messages it added, its update, the new state."""
        self.superstep += 1
        if ran.update is None:
            return [("updates", {ran.node: None})] if "updates" in self.modes else []
        update = self._update_of(ran.update)
        messages: list[BaseMessage] = update.get("messages", [])
        known = {m.id for m in with_stand_in_ids(self.state)}
        out: list[Item] = []
        if "messages" in self.modes:
            meta = self.placement.place(
                node_metadata(self.task_id, ran.node, self.superstep, self.thread_id, self.metadata)
            )
            for message in messages:
                if message.type != "remove" and not (message.id and message.id in known):
                    out.append(("messages", (_shown(message), meta)))
        if "updates" in self.modes:
            shown = {k: v for k, v in update.items() if k == "messages" or self.view.shown(k)}
            if "messages" in shown:
                shown["messages"] = [_shown(m) for m in messages]
            out.append(("updates", {ran.node: shown}))
        if "messages" in update:
            merged = merge_messages(with_stand_in_ids(self.state), messages)
            self.state = without_stand_in_ids(merged)
        # the node's other keys join the state through their reducers
        self.keys = self._joined([(k, v) for k, v in update.items() if k not in ("messages", JUMP)])
        if "values" in self.modes:
            # a jump is LangGraph's ephemeral value: in the state of its superstep only
            jump = {JUMP: update[JUMP]} if JUMP in update and self.view.shown(JUMP) else {}
            out.append(("values", {**self._values(), **jump}))
        return out

    def _update_of(self, update: dict[str, Any]) -> dict[str, Any]:
        """A node's update as it returned it: messages as LangChain's, those it returned
        unchanged taken from the state (``contracts.events.NodeUpdate``)."""
        codec = self.view.channels.codec
        out = {k: v if k == "messages" else codec.decode_value(v) for k, v in update.items()}
        if "messages" in out:
            by_id = {m.id: m for m in with_stand_in_ids(self.state)}
            messages: list[BaseMessage] = []
            for raw in out["messages"]:
                kind = raw.get("type") if isinstance(raw, dict) else None
                if kind == "ref":
                    if raw["id"] in by_id:
                        messages.append(by_id[raw["id"]])
                elif kind == "remove":
                    from langchain_core.messages import RemoveMessage

                    messages.append(RemoveMessage(id=str(raw["id"])))
                else:
                    messages.append(to_langchain(MESSAGE_ADAPTER.validate_python(raw)))
            out["messages"] = messages
        return out

    def _tools_step(self, step: int) -> ToolsStep:
        """The tools superstep of ``step`` (it begins with the first call that reports)."""
        if self.tools is not None and self.tools.step == step:
            return self.tools
        self.superstep += 1
        self.tools = ToolsStep(step, self.superstep, self._sent_calls())
        return self.tools

    def _sent_calls(self) -> list[str]:
        """The last reply's calls that no message answers yet: LangChain sends those to
        the tools (HumanInTheLoopMiddleware answers a rejected call itself)."""
        for i in range(len(self.state) - 1, -1, -1):
            message = self.state[i]
            if isinstance(message, AIMessage):
                answered = {
                    m.tool_call_id for m in self.state[i + 1 :] if isinstance(m, ToolMessage)
                }
                return [str(c["id"]) for c in message.tool_calls if c["id"] not in answered]
        return []

    def _tool_completed(self, event: ToolCompleted) -> list[Item]:
        message = to_langchain(event.message)
        assert isinstance(message, ToolMessage)
        tools = self._tools_step(event.step)
        call_id = message.tool_call_id
        tools.results[call_id] = message
        tools.waiting.pop(call_id, None)
        codec = self.view.channels.codec
        writes = codec.decode_pairs([*(event.writes or []), *(event.update or {}).items()])
        update = dict(writes)
        if writes:
            tools.updates[call_id] = writes
        out: list[Item] = []
        if "messages" in self.modes:
            index = tools.index(call_id)
            meta = self.placement.place(
                tool_metadata(
                    self.task_id,
                    tools.superstep,
                    index,
                    self.thread_id,
                    self.metadata,
                    call_id=call_id,
                )
            )
            out.append(("messages", (message, meta)))
        if "updates" in self.modes:
            shown = {k: v for k, v in update.items() if self.view.shown(k)}
            out.append(("updates", {TOOLS_NODE: {"messages": [message], **shown}}))
        if tools.complete:  # the step's results join: its updates too, in call order
            self.state.extend(tools.in_order())
            self.keys = self._step_keys(tools)
            self.todos = None
            self.tools = None
            if "values" in self.modes:
                out.append(("values", self._values()))
        elif tools.waiting and tools.settled:
            out.extend(self._settled(tools))
        return out

    def _asked(self, event: ApprovalRequested) -> list[Item]:
        """A node (or a tool call) asked a human: LangGraph's interrupt items. A tool
        call's ends the run once the step's other calls ended or wait too."""
        asked = interrupt_of(event)
        out = self._interrupt_items(asked)
        if event.node != TOOLS_NODE and not event.per_call:
            if event.node.endswith(AFTER_HOOKS):
                self._model_step(event.step)  # the reply it asks about was shown
            self.done = True
            return out
        tools = self._tools_step(event.step)
        tools.waiting[event.call_id] = asked
        if tools.settled:
            out.extend(self._settled(tools))
        return out

    def _interrupt_items(self, asked: Interrupt) -> list[Item]:
        """LangGraph's items for one interrupt: its update, the state with it."""
        out: list[Item] = []
        if "updates" in self.modes:
            out.append(("updates", {INTERRUPT: (asked,)}))
        if "values" in self.modes:
            out.append(("values", {**self._values(), INTERRUPT: (asked,)}))
        return out

    def _settled(self, tools: ToolsStep) -> list[Item]:
        """The step's calls all ended or wait: the run stops, with the state the results
        that came in make (LangGraph applies a superstep's writes at its interrupt)."""
        self.done = True
        if tools.results and "values" in self.modes:
            return [("values", self._values(tools.in_order(), self._step_keys(tools)))]
        return []

    def _step_keys(self, tools: ToolsStep) -> dict[str, Any]:
        """The state keys with the step's results in: their updates in call order (as
        LangGraph applies its tasks' writes, though they came as each call ended), the
        todo list accepted in the step."""
        order = [*tools.sent, *(c for c in tools.updates if c not in tools.sent)]
        writes = [w for c in order for w in tools.updates.get(c, [])]
        keys = self._joined(writes)
        if self.todos is not None:
            keys["todos"] = self.todos
        return keys

    def _joined(self, writes: list[tuple[str, Any]]) -> dict[str, Any]:
        """The state keys with ``writes`` applied through the keys' reducers."""
        if not writes:
            return self.keys
        # refused where the services joined them: the task fails (its event follows)
        with contextlib.suppress(Exception):
            return self.view.channels.apply(self.keys, writes)
        return self.keys

    def _values(
        self, more: Sequence[BaseMessage] = (), keys: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """The ``values`` of the state as it stands (with ``more`` messages, ``keys``)."""
        keys = self.keys if keys is None else keys
        shown = {k: v for k, v in keys.items() if self.view.shown(k)}
        return {"messages": [*self.state, *more], **shown}


def _shown(message: BaseMessage) -> BaseMessage:
    """A message as a stream shows it: without the stand-in id it had for the merge."""
    shown: BaseMessage = without_stand_in_ids([message])[0]
    return shown


def _written(message: WrittenMessage) -> BaseMessage:
    """A message of a command's write, as the command wrote it."""
    if isinstance(message, RemovedMessage):
        from langchain_core.messages import RemoveMessage

        return RemoveMessage(id=message.id)
    return to_langchain(message)  # type: ignore[no-any-return]


def _streamed(raw: dict[str, Any]) -> BaseMessage | dict[str, Any]:
    """One item of the chunk stream: an ``AIMessageChunk``, the whole ``AIMessage`` of a
    model that does not stream (typed ``ai``), which LangGraph yields as it is, or a
    content-block protocol event (``contracts.chunks.BLOCKS``), as it is."""
    if "event" in raw:
        return raw
    if raw.get("type") == "ai":
        return AIMessage(**raw)
    return AIMessageChunk(**raw)


def _after(batch: ChunkBatch, step: int) -> bool:
    """Custom items the after_model hooks of ``step`` wrote."""
    return batch.stage == "after_model" and batch.step == step


# -- a reply a human is asked about ----------------------------------------------------


async def with_asked_replies(
    client: Client, task_id: str, events: list[tuple[str, AnyEvent]]
) -> list[tuple[str, AnyEvent]]:
    """The log's events, each ``ApprovalRequested`` of a hook on the model's reply
    preceded by the reply it asks about (before the updates of the hooks that ran on it
    first), as LangGraph's stream shows the model's update first: loopline logs the
    reply once the human decided; until then it waits in the task's state."""
    out: list[tuple[str, AnyEvent]] = []
    for entry_id, event in events:
        if isinstance(event, ApprovalRequested) and event.node.endswith(AFTER_HOOKS):
            reply = await asked_reply(client, task_id, event.step)
            if reply is not None:
                at = len(out)
                if at and _nodes_of(out[-1][1], event.step):
                    at -= 1  # logged with the request: those hooks ran on the reply
                out.insert(at, (out[at][0] if at < len(out) else entry_id, reply))
        out.append((entry_id, event))
    return out


def _nodes_of(event: AnyEvent, step: int) -> bool:
    return isinstance(event, NodesUpdated) and event.step == step


async def asked_reply(client: Client, task_id: str, step: int) -> ModelResponded | None:
    """The reply of ``step`` a human is (or was) asked about: waiting in the task's
    state, or, once decided, in its log."""
    raw: Any = await client.redis.hget(client.names.task_state(task_id), "pending")
    if raw:
        found = parse_event(raw)
        if isinstance(found, ModelResponded) and found.step == step:
            return found
    async for _, event in client.events(task_id, follow=False):
        if isinstance(event, ModelResponded) and event.step == step:
            return event
    return None


# -- following a task --------------------------------------------------------------------


async def stream_task(
    client: Client,
    task_id: str,
    modes: Sequence[str],
    inputs: list[BaseMessage],
    *,
    view: StateView | None = None,
    block_ms: int = 1000,
    thread_id: str | None = None,
    metadata: Mapping[str, Any] | None = None,
    placement: Placement | None = None,
) -> AsyncIterator[Item]:
    """``(mode, data)`` items of a submitted task until it ends or waits for a human;
    ``view``: what ``values`` show besides the messages; ``placement``: where the run
    stands (a sub-agent's namespace, the run's tags). A run of a thread starts from
    the thread's state, as LangGraph's from its checkpoint (read once the run started)."""
    translator = ModeTranslator(
        task_id, modes, inputs, view, thread_id=thread_id, metadata=metadata, placement=placement
    )
    begin: Callable[[], Awaitable[list[Item]]] | None = None
    if thread_id is None:
        for item in translator.begin():
            yield item
    else:
        begin = partial(_thread_start, client, translator, thread_id, inputs)
    async for item in _follow(client, translator, "0", "0", block_ms, begin=begin):
        yield item


async def _thread_start(
    client: Client, translator: ModeTranslator, thread_id: str, inputs: list[BaseMessage]
) -> list[Item]:
    """The first items of a thread's run: the thread's messages through the run's inputs
    and the state keys its earlier runs left."""
    state = await client.threads().of_run(thread_id, translator.task_id)
    translator.state = [to_langchain(m) for m in state.through(inputs[-1].id if inputs else None)]
    translator.keys = {**translator.keys, **translator.view.channels.codec.decode(state.keys)}
    if "messages" in translator.modes:  # its metadata counts LangGraph's steps
        translator.superstep = await thread_steps(client, thread_id, translator)
    return translator.begin()


ENDED_ELSEWHERE = ("rejected", "rolled_back", "queued")
"""Runs of a thread that left no step in its history (LangGraph deletes a rolled-back
run's checkpoints; the others never started)."""


async def thread_steps(client: Client, thread_id: str, translator: ModeTranslator) -> int:
    """The step LangGraph's checkpoints of the thread stand at before this run: every
    earlier run's supersteps (its resumes go on counting) and two more each (the
    checkpoints of its input and of ``__start__``), counted from their logs."""
    threads = client.threads()
    info = await threads.info(thread_id)
    statuses = info.runs if info is not None else {}
    steps = 0
    for run_id in await threads.run_ids(thread_id):
        if run_id == translator.task_id:
            break
        if statuses.get(run_id) in ENDED_ELSEWHERE:
            continue
        earlier = ModeTranslator(run_id, (), [], translator.view)
        seen = [(entry, event) async for entry, event in client.events(run_id, follow=False)]
        seen = await with_asked_replies(client, run_id, seen)
        # a failed run's steps count up to its failure (which the translator raises)
        earlier.prime([event for _, event in seen if not isinstance(event, TaskFailed)])
        steps += earlier.superstep + 2
    return steps


@dataclass
class Resumption:
    """Where a resumed run's stream begins: the translator that went through the log
    so far, and the last entries of the task's chunk stream and log before the answer."""

    translator: ModeTranslator
    chunks_after: str
    log_after: str


async def prepare_resume(
    client: Client,
    task_id: str,
    modes: Sequence[str],
    messages: list[BaseMessage],
    answered: Collection[str],
    *,
    keys: dict[str, Any] | None = None,
    view: StateView | None = None,
    thread_id: str | None = None,
    metadata: Mapping[str, Any] | None = None,
    placement: Placement | None = None,
) -> Resumption:
    """Before the interrupts ``answered`` (ids) are answered: the log so far, read, and
    the state the thread has (``messages``, LangGraph's checkpoint, and its state
    ``keys``)."""
    log_after = await client.last_entry(task_id)
    chunks_after = await client.last_chunk(task_id)
    translator = ModeTranslator(
        task_id, modes, [], view, thread_id=thread_id, metadata=metadata, placement=placement
    )
    await prime(client, translator, task_id, log_after)
    translator.resume_from(messages, answered, keys or {})
    return Resumption(translator, chunks_after, log_after)


async def prime(client: Client, translator: ModeTranslator, task_id: str, through: str) -> None:
    """Give ``translator`` the task's log through entry ``through``."""
    seen: list[tuple[str, AnyEvent]] = []
    async for entry_id, event in client.events(task_id, follow=False):
        seen.append((entry_id, event))
        if entry_id == through:
            break
    seen = await with_asked_replies(client, task_id, seen)
    translator.prime([event for _, event in seen])


async def stream_resumed(
    client: Client, task_id: str, resumption: Resumption, *, block_ms: int = 1000
) -> AsyncIterator[Item]:
    """The items of the run that goes on after a human answered (``prepare_resume``)."""
    translator = resumption.translator
    for item in translator.begin():
        yield item
    after = (resumption.chunks_after, resumption.log_after)
    async for item in _follow(client, translator, *after, block_ms, task_id=task_id):
        yield item


async def _follow(
    client: Client,
    translator: ModeTranslator,
    chunks_after: str,
    log_after: str,
    block_ms: int,
    *,
    task_id: str | None = None,
    begin: Callable[[], Awaitable[list[Item]]] | None = None,
) -> AsyncIterator[Item]:
    """``begin``: the first items, made once the task's log shows it started."""
    task_id = task_id or translator.task_id
    watch = LostTaskWatch(client, task_id)  # a task Redis lost would never end
    await watch.begin()
    while not translator.done:
        batches, events = await client.feed(task_id, chunks_after, log_after, block_ms)
        if batches:
            chunks_after = batches[-1][0]
        if events:
            log_after = events[-1][0]
            watch.seen = True
            if begin is not None:
                for item in await begin():
                    yield item
                begin = None
        elif not batches:
            lost = await watch.lost()
            if lost is not None:
                raise TaskFailedError(lost)
        events = await with_asked_replies(client, task_id, events)
        for item in translator.take([b for _, b in batches], [e for _, e in events]):
            yield item
