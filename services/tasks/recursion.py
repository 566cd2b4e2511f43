"""LangGraph's ``recursion_limit`` as a task's step limit, and the error it ends with.

LangGraph counts supersteps: every node of the graph LangChain's ``create_agent`` builds
is one (each middleware hook is a node of its own; ``TodoListMiddleware`` has an
``after_model`` node, context editing none). A run executes at most ``recursion_limit``
of them and raises ``GraphRecursionError`` when it would need that many or more, even
when the last one was the model's final answer. For an agent whose loop is
``before_model`` × b, the model, ``after_model`` × a and the tools (p = b + a + 2
supersteps), after ``before_agent`` × ba (and ``after_agent`` × aa at the end), with
limit L:

- model call j is superstep ``ba + (j - 1)·p + b + 1``: the run makes the calls that fit
  (``model_calls``);
- the tools of call j are superstep ``ba + j·p``: those of the last call run when they
  fit (``last_tools``);
- a run that ends after call j takes ``ba + aa + j·p - 1`` supersteps: it completes only
  when that is below L (``answer_by``), else it fails with the answer in its state.

loopline's loop applies that where a reply is recorded and where a step's results join
(``Loop``), so the model gets the requests LangChain's would and the tools run as often.
Without a ``recursion_limit`` the task's ``max_steps`` (``LOOPLINE_MAX_STEPS``, 50 model
calls) is the limit, and it ends with ``GraphRecursionError`` too (loopline's message).
"""

from __future__ import annotations

from dataclasses import dataclass

from contracts.agent import AgentSpec
from services.hooks import HookSet
from services.tasks.plan import step_limit_reason

RECURSION_LIMIT = (
    "Recursion limit of {limit} reached without hitting a stop condition. You can "
    "increase the limit by setting the `recursion_limit` config key."
)
"""LangGraph's message (``Pregel.stream``), before its troubleshooting line."""


@dataclass(frozen=True, slots=True)
class Layout:
    """How many supersteps of LangGraph's each part of the agent's loop takes."""

    before_agent: int = 0
    before_model: int = 0
    after_model: int = 0
    after_agent: int = 0

    @classmethod
    def of(cls, spec: AgentSpec, hooks: HookSet) -> Layout:
        todos = sum(1 for m in spec.middleware if m.type == "TodoListMiddleware")
        return cls(
            before_agent=len(hooks.with_hook("before_agent")),
            before_model=len(hooks.with_hook("before_model")),
            after_model=len(hooks.with_hook("after_model")) + todos,
            after_agent=len(hooks.with_hook("after_agent")),
        )

    @property
    def per_loop(self) -> int:
        return self.before_model + 1 + self.after_model + 1


@dataclass(frozen=True, slots=True)
class StepLimit:
    """A task's step limit, in model calls (see the module's docstring)."""

    model_calls: int | None = None
    """The model calls the task may make (its ``max_steps``; 0: not even one; None: the
    task's own ``max_steps``)."""
    answer_by: int | None = None
    """The last call whose final answer completes the task (None: any)."""
    last_tools: bool = True
    """Whether the tools of call ``model_calls`` run (then the task fails at the join)."""
    recursion_limit: int | None = None

    @classmethod
    def of(cls, spec: AgentSpec, hooks: HookSet) -> StepLimit:
        """The limit of a task of ``spec``: from ``spec.recursion_limit``, else the
        task's ``max_steps``."""
        limit = spec.recursion_limit
        if limit is None:
            return cls()
        layout = Layout.of(spec, hooks)
        first_call = layout.before_agent + layout.before_model + 1
        p = layout.per_loop
        calls = (limit - first_call) // p + 1 if limit >= first_call else 0
        tools_at = layout.before_agent + calls * p
        return cls(
            model_calls=calls,
            answer_by=(limit - layout.before_agent - layout.after_agent) // p,
            last_tools=tools_at <= limit,
            recursion_limit=limit,
        )

    def reply_over(self, step: int, ends: bool) -> bool:
        """Whether the reply of call ``step`` ends the task at the limit: a final answer
        past ``answer_by``, or tool calls at the last call when its tools do not fit."""
        if self.model_calls is None:
            return False
        if ends:
            return self.answer_by is not None and step > self.answer_by
        return step >= self.model_calls and not self.last_tools

    def message(self, step: int) -> str:
        """The error's message: LangGraph's, or loopline's for its own ``max_steps``."""
        if self.recursion_limit is None:
            return step_limit_reason(step)
        from langgraph.errors import ErrorCode, create_error_message

        return create_error_message(
            message=RECURSION_LIMIT.format(limit=self.recursion_limit),
            error_code=ErrorCode.GRAPH_RECURSION_LIMIT,
        )

    def error(self, step: int) -> Exception:
        """What a task that hit the limit at ``step`` fails with (``invoke`` raises it)."""
        from langgraph.errors import GraphRecursionError

        return GraphRecursionError(self.message(step))


NO_RECURSION_LIMIT = StepLimit()
"""The limit of a task whose run gave no ``recursion_limit``: its ``max_steps``."""
