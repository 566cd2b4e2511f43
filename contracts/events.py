"""Every event on every arrow of the pipeline, parsed through one discriminated union.

Events carry ids and offsets, never the conversation: the transcript lives once in Redis
(``Names.task_messages``). An event carries at most the one new message it reports (a
model request also carries the step's one tool result when that is small, so the model
service need not read it back).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from contracts.agent import AgentSpec, RunMode
from contracts.messages import (
    AIMessage,
    HumanMessage,
    Message,
    SystemMessage,
    ToolCall,
    ToolMessage,
)
from contracts.todos import Todo

SCHEMA_VERSION = 1

T = TypeVar("T")

MultitaskStrategy = Literal["reject", "enqueue", "interrupt", "rollback"]
MULTITASK_STRATEGIES: tuple[str, ...] = ("reject", "enqueue", "interrupt", "rollback")


def new_task_id() -> str:
    return uuid.uuid4().hex


class Event(BaseModel):
    """Common envelope. ``extra="ignore"`` lets old consumers read newer producers."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    version: int = SCHEMA_VERSION
    task_id: str
    at: float = Field(default_factory=time.time)
    trace: str | None = None
    """W3C traceparent of the span that published the event (when tracing is on)."""


class TaskSubmitted(Event):
    """A client asks for a task to run. The one event that carries a whole spec."""

    type: Literal["TaskSubmitted"] = "TaskSubmitted"
    task_id: str = Field(default_factory=new_task_id)
    agent: AgentSpec | str
    """A deployed agent, ``"NAME"`` (its latest version) or ``"NAME@VERSION"``; or an
    inline spec, run only where LOOPLINE_ALLOW_INLINE_AGENTS=true."""
    overrides: dict[str, Any] = Field(default_factory=dict)
    """Per-run changes to a deployed agent, only of the fields its registration allows
    (``DeployedAgent.overridable``: ``system_prompt``, ``max_steps``, ``context``)."""
    messages: list[Message]
    state: dict[str, Any] = Field(default_factory=dict)
    """The input's other state keys (``invoke({"messages": ..., "user_name": ...})``; a
    value JSON cannot hold as ``{"__lg__": [type, base64]}``, LangGraph's serializer's):
    those of the agent's ``state_schema`` and its middleware's that LangChain takes as
    input start the task's state; others are dropped, as LangGraph drops them."""
    max_steps: int | None = Field(default=None, ge=1)
    deadline_s: float | None = Field(default=None, gt=0)
    """Seconds the task may run before it fails (default: LOOPLINE_TASK_DEADLINE_S)."""
    thread_id: str | None = Field(default=None, min_length=1, max_length=256)
    """The conversation this task is a run of: it starts from the thread's state
    (transcript, todos, middleware state) and writes its own back when it ends."""
    multitask_strategy: MultitaskStrategy = "reject"
    """What happens when the thread already has an active run (LangGraph's double-texting
    strategies): ``reject`` this run fails at once; ``enqueue`` it runs after the active
    one; ``interrupt`` the active run stops at its next step boundary, keeping what it
    did; ``rollback`` the active run stops and its changes to the thread are dropped."""
    run_name: str | None = None
    """LangChain's ``config["run_name"]``: recorded with the run and in its trace."""
    tags: list[str] = Field(default_factory=list)
    """LangChain's ``config["tags"]``: recorded with the run and in its trace."""
    metadata: dict[str, Any] = Field(default_factory=dict)
    """LangChain's ``config["metadata"]``: recorded with the run and in its trace."""
    run_mode: RunMode | None = None
    """``"sync"`` from ``invoke``/``stream``, ``"async"`` from ``ainvoke``/``astream``:
    which variant of each middleware hook runs (``AgentSpec.run_mode``). None: the async
    variant where there is one."""
    recursion_limit: int | None = Field(default=None, ge=1)
    """LangChain's ``config["recursion_limit"]`` (LangGraph's supersteps): the task's step
    limit is derived from it and the agent's hooks, in place of ``max_steps``
    (``AgentSpec.recursion_limit``); a task that reaches it fails with LangGraph's
    ``GraphRecursionError``. It overrides a deployed agent's ``max_steps`` (the
    registration must allow that)."""

    @property
    def agent_name(self) -> str:
        """The deployed agent's name, or the inline spec's."""
        return self.agent.partition("@")[0] if isinstance(self.agent, str) else self.agent.name


class RunDequeued(Event):
    """Loop (any service that ended a thread's run) → tasks stream: the run ``task_id``
    waited for its thread (``multitask_strategy`` enqueue, interrupt or rollback) and is
    the thread's active run now: the loop starts it from the submission the thread kept."""

    type: Literal["RunDequeued"] = "RunDequeued"
    thread_id: str


class CancelRequested(Event):
    """A client asks for a running task to stop. Published on the tasks stream."""

    type: Literal["CancelRequested"] = "CancelRequested"
    reason: str = "cancelled by request"
    thread_id: str | None = None
    """The run's thread, to cancel a run that still waits for it (enqueue)."""
    rollback: bool = False
    """Undo the run too (LangGraph's ``cancel(action="rollback")``): with ``thread_id``,
    nothing of the run is written back to the thread, as for a run stopped by a newer
    one's ``multitask_strategy="rollback"``."""


class ApprovalRequested(Event):
    """Loop → public ``approvals`` stream and the task's log: the task waits for an answer
    to an ``interrupt()`` (LangGraph's, called by a hook, a tool or its ``wrap_tool_call``
    chain). ``request`` is the interrupt's value: for HumanInTheLoopMiddleware
    LangChain's HITLRequest (``{"action_requests": [...], "review_configs": [...]}``) or,
    per call, its ToolApprovalRequest; anything JSON for a user's own ``interrupt()``."""

    type: Literal["ApprovalRequested"] = "ApprovalRequested"
    step: int
    request: Any
    interrupt_id: str = ""
    """The id to answer it by (``DecisionsSubmitted.answers``): the interrupt's own id
    for a hook's, the tool call id for a tool call's ("" from older producers)."""
    node: str = ""
    """Where it waits, as LangChain names the node: ``<middleware>.<hook>`` for a hook,
    ``model`` for a ``wrap_model_call`` middleware, ``tools`` for a tool call."""
    response_schema: dict[str, Any] | None = None
    """The JSON Schema of the answers the interrupt accepts, when it gave one (LangGraph's
    ``Interrupt.response_schema``: HumanInTheLoopMiddleware's per-call decisions)."""

    @property
    def per_call(self) -> bool:
        """A tool call's interrupt (one per waiting call), not the loop stage's."""
        if self.node:
            return self.node == "tools"
        return isinstance(self.request, dict) and self.request.get("type") == "tool_approval"

    @property
    def call_id(self) -> str:
        """The waiting tool call's id (per-call interrupts)."""
        if self.node == "tools" and self.interrupt_id:
            return self.interrupt_id
        return str(self.request.get("tool_call_id")) if isinstance(self.request, dict) else ""


class DecisionsSubmitted(Event):
    """Client → tasks stream: answers for a waiting task: ``answers`` by interrupt id, or
    HumanInTheLoopMiddleware's ``decisions`` in LangChain's
    shapes (``{"type": "approve"}``, ``{"type": "edit", "edited_action": {...}}``,
    ``{"type": "reject", "message"?}``, ``{"type": "respond", "message"}``), in the order
    of the gated calls."""

    type: Literal["DecisionsSubmitted"] = "DecisionsSubmitted"
    decisions: list[dict[str, Any]] = Field(default_factory=list)
    answers: dict[str, Any] = Field(default_factory=dict)
    """LangGraph's ``Command(resume={interrupt_id: value})``: the value each waiting
    ``interrupt()`` returns, by its id (``ApprovalRequested.interrupt_id``)."""


class ContextRequested(Event):
    """Loop → context: build the model's view of the first ``transcript_len`` messages."""

    type: Literal["ContextRequested"] = "ContextRequested"
    step: int
    agent_id: str
    transcript_len: int
    rev: int = 0
    """Transcript revision: bumped when middleware rewrote earlier messages."""


class AppliedEdit(BaseModel):
    """One ClearToolUsesEdit's effect, as ranges of transcript indices (end exclusive)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    placeholder: str
    cleared: list[tuple[int, int]]
    clear_inputs: bool = False


class ModelRequested(Event):
    """Context → model: call the model on the transcript prefix with these edits applied."""

    type: Literal["ModelRequested"] = "ModelRequested"
    step: int
    agent_id: str
    transcript_len: int
    rev: int = 0
    edits: list[AppliedEdit] = Field(default_factory=list)
    last_result: ToolMessage | None = None
    """The transcript's last message (``transcript_len - 1``) when it is the step's only
    tool result and small: a model service whose cached transcript lacks only that
    message takes it from here instead of reading it from Redis."""
    transcript: list[Message] | None = None
    """The whole transcript (``transcript_len`` messages) when the step is a new task's
    first and its input is small: the model service takes it from here instead of reading
    it from Redis."""


class StructuredOutcome(BaseModel):
    """What the model service made of a reply of an agent with a ``response_format``
    (LangChain's model node does it): the tool messages answering the structured-output
    calls (``Returning structured response: ...`` or the error to retry on) and the
    structured response, as JSON, when one was given."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tool_messages: list[ToolMessage] = Field(default_factory=list)
    response: Any = None
    given: bool = False
    """Whether ``response`` is the structured response (it may be JSON null)."""


class RemovedMessage(BaseModel):
    """LangChain's ``RemoveMessage`` in a ``messages`` write: ``add_messages`` deletes the
    state's message with this id; LangGraph's ``REMOVE_ALL_MESSAGES`` id deletes every
    message before the ones that follow it in the write."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    type: Literal["remove"] = "remove"
    id: str


WrittenMessage = Annotated[
    SystemMessage | HumanMessage | AIMessage | ToolMessage | RemovedMessage,
    Field(discriminator="type"),
]


class KeptMessages(BaseModel):
    """In ``ModelResponded.rewrite``: ``count`` messages of the transcript the model node
    was given, from position ``start``, kept as they are (named, not carried: a rewrite
    costs what it changed)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    type: Literal["kept"] = "kept"
    start: int = Field(ge=0)
    count: int = Field(ge=1)


RewrittenMessage = Annotated[
    SystemMessage | HumanMessage | AIMessage | ToolMessage | KeptMessages,
    Field(discriminator="type"),
]


def rewritten(
    rewrite: Sequence[RewrittenMessage], given: Sequence[T], convert: Callable[[Message], T]
) -> list[T]:
    """The messages a rewrite stands for: the kept ones taken from ``given`` (the
    transcript the model node was given, in any form), the others ``convert``ed."""
    out: list[T] = []
    for item in rewrite:
        if isinstance(item, KeptMessages):
            if item.start + item.count > len(given):
                raise ValueError(
                    f"a rewrite keeps messages {item.start}..{item.start + item.count - 1} "
                    f"of a transcript of {len(given)}"
                )
            out.extend(given[item.start : item.start + item.count])
        else:
            out.append(convert(item))
    return out


class CommandWrite(BaseModel):
    """One write of a ``wrap_model_call`` command's update: a state key's value (JSON),
    or, for ``messages``, the messages as the command wrote them (``add_messages``
    appends them, replaces the state's message of the same id, and deletes for a
    ``RemovedMessage``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    key: str
    value: Any = None
    messages: list[WrittenMessage] = Field(default_factory=list)


class ModelResponded(Event):
    """Model → loop: the model's reply for ``step`` (the one new message)."""

    type: Literal["ModelResponded"] = "ModelResponded"
    step: int
    agent_id: str
    message: AIMessage
    transcript_len: int | None = Field(default=None, ge=0)
    """How many transcript messages the reply answers (the request's ``transcript_len``)."""
    model_ms: float | None = Field(default=None, ge=0)
    """How long the model call took in the model service (milliseconds): the messages'
    conversion to LangChain's form, the call (wrap_model_call middleware included) and
    the reply's conversion back."""
    structured: StructuredOutcome | None = None
    """For agents with a ``response_format``: the reply's structured outcome."""
    update: dict[str, Any] | None = None
    """The state keys that ``wrap_model_call`` middleware set with the reply
    (``ExtendedModelResponse(command=Command(update=...))``), as JSON (a value JSON
    cannot hold as LangGraph's serializer's envelope, ``{"__lg__": [type, base64]}``):
    applied with it,
    before ``after_model`` hooks run, as LangChain's model node applies them."""
    writes: list[CommandWrite] = Field(default_factory=list)
    """The writes of those commands, in LangChain's order (the commands inner layer
    first, each update's keys in order): the messages they add beside the reply
    (``Command(update={"messages": [...]})``) follow it (and the answers of its
    structured-output calls) before ``after_model`` hooks run, a tool message among them
    answering the reply's call, which then does not run; the keys' values are folded
    into ``update``, and shown as LangGraph's ``updates`` stream shows the node's
    writes."""

    rewrite: list[RewrittenMessage] | None = None
    """The state's messages before the reply, when the model node's writes changed the
    transcript it was given (None: they did not): a command replaced or removed messages
    (``add_messages`` by id, ``RemoveMessage``, ``REMOVE_ALL_MESSAGES``), or a layer
    changed the request's own message list, which LangChain's model node then writes back
    (``_build_commands(repaired_messages=...)``). The transcript is replaced by them
    (``rewritten``: the unchanged ones are only named), the reply follows, then
    ``added``."""
    repaired: list[RewrittenMessage] | None = None
    """The request's own message list, when a ``wrap_model_call`` layer changed it in
    place: LangChain's model node writes it back first, after ``REMOVE_ALL_MESSAGES``
    (what stream modes show of the node's own write); the transcript's messages named
    by position, as in ``rewrite``."""
    rev: int = Field(default=0, ge=0)
    """The transcript's revision the reply joins: the request's, one more after a
    ``rewrite`` (the transition moves it)."""
    after_reply: list[Message] | None = None
    """With ``rewrite``: the messages the writes leave after the reply (the structured
    output's answers aside), which ``added`` gives."""

    @property
    def added(self) -> list[Message]:
        """The messages the commands added beside the reply, in order."""
        if self.after_reply is not None:
            return list(self.after_reply)
        written = (m for write in self.writes for m in write.messages)
        return [m for m in written if not isinstance(m, RemovedMessage)]


class ModelInterrupted(Event):
    """Model → loop: a ``wrap_model_call`` middleware called ``interrupt()``; the task
    waits for the answer, then ``requested`` is sent again (``ModelResumed``)."""

    type: Literal["ModelInterrupted"] = "ModelInterrupted"
    step: int
    agent_id: str
    requested: ModelRequested
    """The request whose model call asked."""
    answered: list[Any] = Field(default_factory=list)
    """The answers its earlier interrupts were given (it asked again after them)."""
    request: Any
    """The interrupt's value."""
    interrupt_id: str
    response_schema: dict[str, Any] | None = None


class ModelResumed(Event):
    """Loop → model: run a model call whose ``wrap_model_call`` chain asked again, its
    ``interrupt()`` calls returning ``answers`` in order."""

    type: Literal["ModelResumed"] = "ModelResumed"
    step: int
    agent_id: str
    requested: ModelRequested
    answers: list[Any]


class ValidationDetails(BaseModel):
    """A pydantic ``ValidationError`` as data: ``title`` and ``errors`` as its ``json()``
    gives them (each error's ``type``, ``loc``, ``input`` and ``ctx``). A client passes
    them to ``ValidationError.from_exception_data``, which reads them as data: the
    error types are pydantic's own, none is looked up by name."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    title: str = Field(max_length=4096)
    errors: list[dict[str, Any]]


class ExceptionInfo(BaseModel):
    """The exception a task failed with, as data: where its class lives and its message.

    A client raises an exception of this class again (``loopline.errors``), as LangChain's
    ``invoke`` raises the tool's or the model's own exception. The class is only looked up,
    never chosen to run: a client resolves ``type`` only among Python's built-in exception
    classes and in modules that are already imported or inside its allow-list, takes it
    only when it is an ``Exception`` class, and calls nothing but that class with
    ``message`` (or makes the instance without calling its code at all)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    type: str = Field(min_length=1, max_length=512)
    """``module:QualName`` of the exception's class (``builtins:ValueError``)."""
    message: str
    """The exception's one argument when it had one string argument (so ``str()`` of the
    rebuilt exception is the original's, ``KeyError`` included), else its ``str()``."""
    validation: ValidationDetails | None = None
    """For a pydantic ``ValidationError`` (whose class takes no message): its title and
    line errors, from which a client builds the same error again."""

    @property
    def name(self) -> str:
        """The class's own name (``ValueError``)."""
        return self.type.rpartition(":")[2].rpartition(".")[2]


class ModelFailed(Event):
    """Model → loop: the model call for ``step`` failed for good."""

    type: Literal["ModelFailed"] = "ModelFailed"
    step: int
    agent_id: str
    error: str
    exception: ExceptionInfo | None = None
    """The model call's own exception (the task fails with it)."""


class ToolRequested(Event):
    """Loop → tools (or todos for ``write_todos``): run one tool call of ``step``."""

    type: Literal["ToolRequested"] = "ToolRequested"
    step: int
    agent_id: str
    call: ToolCall
    join_len: int | None = Field(default=None, ge=0)
    """The transcript's length once all of the step's results are in: the service that
    completes the step can publish the next model request in the same commit."""
    result_at: int | None = Field(default=None, ge=0)
    """Where this call's result will stand in the transcript."""
    rev: int = Field(default=0, ge=0)
    """The transcript's revision the step's results join (what the next model request
    names, for a reader's copy of the transcript)."""
    seal: str | None = None
    """The services' keyed digest of the call's task, step, agent, id, tool and arguments
    (``services.seal``): proof that a transition issued it, so the tools service need not
    ask the task's state before it runs the call. Without it (or with a wrong one) the
    state is asked."""


class ToolCompleted(Event):
    """Tools/todos → loop: the tool message answering one call of ``step``."""

    type: Literal["ToolCompleted"] = "ToolCompleted"
    step: int
    agent_id: str
    message: ToolMessage
    update: dict[str, Any] | None = None
    """A tool that returned ``Command(update=...)``: the state keys it sets besides its
    message (JSON; other values as ``{"__lg__": [type, base64]}``, LangGraph's
    checkpoint serializer's bytes), applied to the task's state when the step's results
    join, in call order, as LangGraph applies a step's writes."""
    writes: list[tuple[str, Any]] | None = None
    """The writes ``[key, value]`` the tool sent through LangGraph's config
    (``CONFIG_KEY_SEND``, as deepagents' ``StateBackend`` does), in order, values as in
    ``update``: applied before ``update``, through the keys' reducers."""


class ToolFailed(Event):
    """Tools → loop: a tool call raised (and no ``wrap_tool_call`` middleware turned the
    exception into a message): the task fails with the tool's exception, as LangChain's
    agent lets it propagate. Invalid arguments are not a failure: they are answered with
    a tool message (``ToolCompleted``), as LangChain answers ``ToolInvocationError``."""

    type: Literal["ToolFailed"] = "ToolFailed"
    step: int
    agent_id: str
    call: ToolCall
    error: str
    exception: ExceptionInfo | None = None


class ToolInterrupted(Event):
    """Tools → loop: a call (the tool, or its ``wrap_tool_call`` chain, such as
    ``HumanInTheLoopMiddleware(interrupt_mode="per_call")``) called ``interrupt()``; the
    call is parked, nothing runs. ``request`` is the interrupt's value (LangChain's
    ToolApprovalRequest for HITL), ``response_schema`` the JSON Schema of the answers it
    accepts. With ``error`` set (and in the task's log) the
    ``decision`` sent for it did not fit that schema: the call waits for another one."""

    type: Literal["ToolInterrupted"] = "ToolInterrupted"
    step: int
    agent_id: str
    call: ToolCall
    request: Any
    response_schema: dict[str, Any] | None = None
    error: str | None = None
    decision: Any = None
    exception: ExceptionInfo | None = None
    """With ``error``: the exception the refused decision raised (LangGraph's
    ``ValidationError`` against ``response_schema``), which the resume raises again."""
    answered: int = Field(default=0, ge=0)
    """How many earlier interrupts of this call were answered (it asks again on resume
    when it calls ``interrupt()`` once more: each asks in its turn)."""


class ToolResumed(Event):
    """Loop → tools: run a parked call again with the answer to its interrupt
    (``decision``: one LangChain Decision for HITL, any value for a user's own
    ``interrupt()``), which its ``interrupt()`` now returns."""

    type: Literal["ToolResumed"] = "ToolResumed"
    step: int
    agent_id: str
    call: ToolCall
    decision: Any
    earlier: list[Any] = Field(default_factory=list)
    """The answers to the call's earlier interrupts, in order: its ``interrupt()`` calls
    return them, then ``decision``."""


class TodosUpdated(Event):
    """Todos → public ``todos`` stream and the task's log: an accepted todo list."""

    type: Literal["TodosUpdated"] = "TodosUpdated"
    step: int
    todos: list[Todo]
    counts: dict[str, int]


class ContextEdited(Event):
    """Context → public ``edits`` stream and the task's log: an edit changed the view."""

    type: Literal["ContextEdited"] = "ContextEdited"
    step: int
    strategy: str
    token_count_method: str
    tokens_before: int
    tokens_after: int
    cleared_tool_call_ids: list[str]
    cleared_inputs: bool


class NodeUpdate(BaseModel):
    """What one hook node returned: its state update as JSON, ``None`` when it returned
    none. ``messages`` are loopline's messages as JSON, except that a message the node
    returned unchanged from the state it was given is only named: ``{"type": "ref",
    "id": ...}`` (so an update that returns the whole list costs no more than what it
    changed); a ``RemoveMessage`` is ``{"type": "remove", "id": ...}``."""

    model_config = ConfigDict(frozen=True)

    node: str
    """LangChain's name of the node: ``<middleware>.<hook>``."""
    update: dict[str, Any] | None = None


class NodesUpdated(Event):
    """Loop → the task's log: hooks of the loop stage (``before_agent``,
    ``before_model``, ``after_model``, ``after_agent``, each a node of LangChain's graph)
    ran to their end for ``step``, in the order they ran, with what each returned. Logged
    by the transition that applies them, or with the wait when a later node of the same
    run asks a human (those that ran before it are not run again). What stream modes show
    as each node's ``updates`` item."""

    type: Literal["NodesUpdated"] = "NodesUpdated"
    step: int
    nodes: list[NodeUpdate]


class StepStarted(Event):
    """Loop → task log: a model call for ``step`` was requested."""

    type: Literal["StepStarted"] = "StepStarted"
    step: int


class TaskCompleted(Event):
    """Loop → task log: the model answered without tool calls."""

    type: Literal["TaskCompleted"] = "TaskCompleted"
    steps: int
    answer: str
    structured_response: Any = None
    """For agents with a ``response_format``: the structured response (JSON) the task
    ended with, as stored in its state."""


class TaskFailed(Event):
    """Loop → task log: the task stopped without an answer, and why."""

    type: Literal["TaskFailed"] = "TaskFailed"
    step: int
    reason: str
    exception: ExceptionInfo | None = None
    """The exception the task failed with, when one did (a tool's, the model's, a
    middleware hook's): what ``invoke`` raises again. None for failures that are not an
    exception of the agent's code (a cancel, a deadline, a refused event, lost state)."""


class DecisionsRefused(Event):
    """Loop → task log: an answer to the task's interrupt that the node which asked
    refused (HumanInTheLoopMiddleware's count of decisions, say). LangGraph's resume
    raises the node's exception and the thread stays at its interrupt: so does the
    task, waiting for an answer that fits; the refused answer is dead-lettered too."""

    type: Literal["DecisionsRefused"] = "DecisionsRefused"
    step: int
    reason: str
    exception: ExceptionInfo | None = None
    """The node's exception: what the resume raises again."""


class DeadLettered(Event):
    """Any consumer → ``dlq``: an entry no handler could process, kept with the reason."""

    type: Literal["DeadLettered"] = "DeadLettered"
    task_id: str = ""
    stream: str
    entry_id: str
    payload: str
    """The entry's payload, at most ``LOOPLINE_MAX_EVENT_BYTES`` of it (``truncated``)."""
    error: str
    deliveries: int = 1
    payload_bytes: int = 0
    """The whole payload's size in bytes."""
    payload_sha256: str = ""
    """The whole payload's SHA-256 (hex): what was lost when ``truncated``."""
    truncated: bool = False


AnyEvent = Annotated[
    TaskSubmitted
    | RunDequeued
    | CancelRequested
    | DecisionsSubmitted
    | ApprovalRequested
    | ContextRequested
    | ModelRequested
    | ModelResponded
    | ModelInterrupted
    | ModelResumed
    | ModelFailed
    | ToolRequested
    | ToolCompleted
    | ToolFailed
    | ToolInterrupted
    | ToolResumed
    | TodosUpdated
    | ContextEdited
    | NodesUpdated
    | StepStarted
    | TaskCompleted
    | TaskFailed
    | DecisionsRefused
    | DeadLettered,
    Field(discriminator="type"),
]
EVENT_ADAPTER: TypeAdapter[AnyEvent] = TypeAdapter(AnyEvent)
EVENT_TYPES: tuple[type[Event], ...] = (
    TaskSubmitted,
    RunDequeued,
    CancelRequested,
    DecisionsSubmitted,
    ApprovalRequested,
    ContextRequested,
    ModelRequested,
    ModelResponded,
    ModelInterrupted,
    ModelResumed,
    ModelFailed,
    ToolRequested,
    ToolCompleted,
    ToolFailed,
    ToolInterrupted,
    ToolResumed,
    TodosUpdated,
    ContextEdited,
    NodesUpdated,
    StepStarted,
    TaskCompleted,
    TaskFailed,
    DecisionsRefused,
    DeadLettered,
)


def parse_event(data: bytes | str | dict[str, Any]) -> AnyEvent:
    """Parse any event from JSON text or a decoded dict; raises ``ValidationError``."""
    if isinstance(data, dict):
        return EVENT_ADAPTER.validate_python(data)
    return EVENT_ADAPTER.validate_json(data)


def dump_event(event: Event) -> bytes:
    return event.model_dump_json().encode()


def event_schemas() -> dict[str, Any]:
    """JSON Schema of every event, keyed by its ``type`` tag."""
    return {cls.__name__: cls.model_json_schema() for cls in EVENT_TYPES}
