"""Every transition of a task, by its arguments: one class per state change, each next to
its Lua file in ``lua/``. The field order is the script's ARGV order; the Lua file's first
line lists the same names (checked when scripts are built). ``TaskStore.apply`` runs the
transition an arguments object is for.

A task is running until it ends completed or failed. A running task is in one phase
(``state.Phase``); every arrow is one transition, applied atomically on the task's keys
and at most once per cause (``state.Cause``)::

      TaskSubmitted ──StartTask──▶ MODEL (step 1)
      TaskSubmitted (a task id that exists) ──StartTask──▶ unchanged, refused
      TaskSubmitted ──StartRun──▶ MODEL (step 1)      a run of a thread, from its state

      MODEL | APPROVAL ──StopRun──▶ DONE              failed: a newer run interrupts it
      TOOLS ──StopRun──▶ TOOLS ... ──RecordResult──▶ DONE    ... once the step's tools join

      MODEL ──ApplyHooks──▶ MODEL                     before_model hooks, once per step
      MODEL ──ApplyHooks (jump to end)──▶ DONE        completed
      MODEL ──AskHuman──▶ APPROVAL                    after_model hooks called interrupt()
      MODEL | APPROVAL ──RecordReply──▶ TOOLS         the reply has calls to run
      MODEL | APPROVAL ──RecordReply──▶ DONE          no calls: completed
      TOOLS ──RecordResult──▶ TOOLS                   one call's result, more to come
      TOOLS ──RecordResult──▶ MODEL (step + 1)        the step's last result: all join
      TOOLS ──RecordResult──▶ DONE                    ... at the step limit: failed
      TOOLS ──RecordResult──▶ DONE                    ... after a structured response
                                                      (RecordReply's end_after): completed
      MODEL ──AskHuman──▶ APPROVAL                    before_model hooks called interrupt()
      APPROVAL ──AskHuman──▶ APPROVAL                 answered, the node asks again
      APPROVAL ──ApplyHooks──▶ MODEL                  answered: the before hooks ran
      TOOLS ──ParkCall──▶ TOOLS                       a call's interrupt: the call waits
      TOOLS ──DecideCall──▶ TOOLS                     its answer, accepted once
      any   ──FailTask──▶ DONE                        failed: cancel, deadline, model
                                                      failure, a hook that raised
      any   ──RefuseTask──▶ DONE                      failed: a stage dead-lettered one
                                                      of its events (a refused
                                                      submission: from no state at all)

- ``RecordReply`` with every call answered by after_model hooks joins those results and
  starts the next step at once (MODEL).
- ``LogOnce`` changes no state: it logs a todo update or a context edit once.
- A fused call of a transition in ``FUSABLE`` (``transition.Fusion``, ``lua/fused.lua``)
  also publishes what the new phase asks for and commits the entry being handled, when
  the task lands in the predicted phase.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from services.tasks.transition import Args


@dataclass(frozen=True, slots=True)
class StartTask(Args):
    """A submitted task starts: -> running, step 1, model phase."""

    LUA = "start"
    agent_id: str
    max_steps: int
    submitted_event: bytes
    step_event: bytes
    retention: int
    messages: list[str]
    """The input messages, each as its JSON."""
    entry: str
    """The submission's stream entry id: only its own redeliveries find the task theirs; a
    second submission of the same task id (a new entry) is refused (``duplicate``)."""
    extra: str = ""
    """The input's state keys (``TaskSubmitted.state``) as the task's first state fields
    (JSON object), or empty."""


@dataclass(frozen=True, slots=True)
class StartRun(Args):
    """A run of a thread starts (``services.tasks.threads``): -> running, step 1, model
    phase, from the thread's transcript, todos and middleware state."""

    LUA = "start_run"
    agent_id: str
    max_steps: int
    submitted_event: bytes
    step_event: bytes
    retention: int
    messages: list[str]
    """The thread's transcript, then the run's input messages, each as its JSON."""
    todos: str
    """The thread's todo list (JSON), or ""."""
    extra: str
    """The thread's middleware state (JSON), or ""."""
    thread_id: str


@dataclass(frozen=True, slots=True)
class StopRun(Args):
    """A newer run of the thread interrupts this one (``multitask_strategy="interrupt"``):
    model or approval -> done (failed) now; tools -> done once the step's results join."""

    LUA = "stop_run"
    failed_event: bytes
    cause: str


@dataclass(frozen=True, slots=True)
class RecordReply(Args):
    """The model answered a step: model (or approval) -> tools, or -> done (completed),
    or straight to the next step's model phase when hooks answered every call."""

    LUA = "model_responded"
    step: int
    cause: str
    ai_message: bytes
    responded_event: bytes
    expected: list[str]
    """The step's call ids in join order (``plan.join_order``); empty: the task ends."""
    pre_results: dict[str, str]
    """Tool messages after_model hooks decided (call id -> JSON)."""
    completed_event: bytes
    step_event: bytes
    failed_event: bytes
    after_ai: list[str]
    """Messages after_model hooks added after the reply (JSON each)."""
    extra: str
    """The middleware's state fields (JSON), or "" when unchanged."""
    issued: dict[str, str]
    """The digest of each call to run (call id -> ``issued.call_digest``): the tools and
    todos services run a requested call only if its name and arguments match."""
    end_after: bytes = b""
    """A TaskCompleted (JSON) to end the task with once the step's results are in, in
    place of the next step (a structured response given beside other tool calls, as
    LangChain ends after running them); empty for none."""
    limit_event: bytes = b""
    """A TaskFailed (JSON) to end the task with right after the reply joins the
    transcript: the step limit (``services.tasks.recursion``) leaves no room for what
    the reply asks (its tools, or completing); empty for none."""
    nodes_event: bytes = b""
    """The ``NodesUpdated`` of the hooks that ran on the reply (logged after it), or
    empty."""
    again: bool = False
    """A reply with no calls to wait for that does not end the task: an ``after_agent``
    hook jumped back to the model, so the next step starts (``step_event``)."""
    rewrite: list[str | list[int]] | None = None
    """The messages before the reply when the model node's writes changed the transcript
    (``ModelResponded.rewrite``): each new one's JSON, each run of the transcript's own
    as ``[start, count]``. The transcript is replaced by them (the revision moves), then
    the reply joins; None when unchanged."""


@dataclass(frozen=True, slots=True)
class RecordResult(Args):
    """A tool call's result: tools -> tools, or (the step's last) -> the next step's model
    phase, or -> done (failed) at the step limit, or -> done (completed) when the reply
    gave a structured response (``RecordReply.end_after``)."""

    LUA = "tool_completed"
    step: int
    cause: str
    call_id: str
    tool_message: bytes
    tool_event: bytes
    step_event: bytes
    failed_event: bytes
    update: str = ""
    """A tool's ``Command(update=...)`` keys as ``[key, value JSON, ...]`` (JSON), or
    empty: applied to the task's state when the step's results join, in call order."""
    joined: str = ""
    """The task's state keys (JSON) with the step's updates applied, for the result that
    joins a step with updates (``TaskState.joining`` asks for it), else empty."""


@dataclass(frozen=True, slots=True)
class ApplyHooks(Args):
    """A step's before_model hooks, once: model -> model (messages and state changed), or
    -> done (completed) when they jump to the end."""

    LUA = "apply_hooks"
    step: int
    cause: str
    append: list[str]
    rewrite: list[str] | None
    """The whole new transcript when hooks changed earlier messages, else None."""
    extra: str
    end_now: bool
    completed_event: bytes
    nodes_event: bytes = b""
    """The ``NodesUpdated`` of the hooks that ran (logged first), or empty."""


@dataclass(frozen=True, slots=True)
class AskHuman(Args):
    """A hook of the loop stage called ``interrupt()``: model -> approval; or, answered,
    the same node asks again: approval -> approval (``answered``)."""

    LUA = "interrupt"
    step: int
    cause: str
    pending: bytes
    """The event the task resumes with once answered: the ModelResponded (after_model,
    after_agent) or the step's StepStarted (before_agent, before_model)."""
    approval_event: bytes
    node: str
    """The node that waits (``<middleware>.<hook>``)."""
    interrupt_id: str
    at: str
    """``"before"`` (the step's before hooks wait) or ``"after"`` (the reply's hooks)."""
    resume: dict[str, list[Any]]
    """The answers the step's nodes were given so far, by node."""
    answered: str = ""
    """The interrupt id this resume answered ("" when the node asks for the first time)."""
    done: dict[str, dict[str, Any]] | None = None
    """The updates of the step's nodes that ran to their end before the waiting one."""
    nodes_event: bytes = b""
    """The ``NodesUpdated`` of the nodes this run called before the one that asks (logged
    before the request), or empty."""


@dataclass(frozen=True, slots=True)
class FailTask(Args):
    """A running task fails: any phase -> done (failed)."""

    LUA = "fail"
    failed_event: bytes
    cause: str


@dataclass(frozen=True, slots=True)
class RefuseTask(Args):
    """A stage dead-lettered one of the task's events: any phase -> done (failed); a
    submission refused before its task started gets a failed record (``create``)."""

    LUA = "refuse"
    failed_event: bytes
    cause: str
    retention: int
    create: bool
    entry: str
    """With ``create``: the refused submission's entry id; a task that exists is ended
    only by the refusal of the entry that started it, never by another submission."""


@dataclass(frozen=True, slots=True)
class ParkCall(Args):
    """A tool call's interrupt: the call of the tools phase waits (the phase stays)."""

    LUA = "call_parked"
    step: int
    call_id: str
    interrupted_event: bytes
    approval_event: bytes
    refused_decision: str
    """The decision the call's schema refused ("" when it asks)."""
    answered: int = 0
    """How many of the call's interrupts were answered before this one: one more than
    the waiting one's, with its answer accepted, is the call asking again."""


@dataclass(frozen=True, slots=True)
class DecideCall(Args):
    """A decision for a waiting call, accepted once (the phase stays)."""

    LUA = "call_decided"
    RETURNS_STATE = False
    step: int
    call_id: str
    decision: str


@dataclass(frozen=True, slots=True)
class LogOnce(Args):
    """An event on the task's log once per key (no state change)."""

    LUA = "log_once"
    RETURNS_STATE = False
    dedupe: str
    event: bytes


ALL: tuple[type[Args], ...] = (
    StartTask,
    StartRun,
    StopRun,
    RecordReply,
    RecordResult,
    ApplyHooks,
    AskHuman,
    FailTask,
    RefuseTask,
    ParkCall,
    DecideCall,
    LogOnce,
)

FUSABLE: tuple[type[Args], ...] = (StartTask, StartRun, RecordReply, RecordResult, AskHuman)
"""The transitions that can commit the entry being handled (``transition.Fusion``): a
start that publishes the first model request, the model and tools services' inline
hand-over, and the loop's wait for a human (so a task whose log says it waits has nothing
pending)."""
