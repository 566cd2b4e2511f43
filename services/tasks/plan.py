"""Pure decisions of the loop (what a state asks for next): no I/O."""

from __future__ import annotations

from collections.abc import Mapping

from contracts.agent import AgentSpec
from contracts.events import ContextRequested, Event, ModelRequested, ToolRequested
from contracts.messages import AIMessage, Message, ToolCall, ToolMessage
from contracts.streams import Names
from services.agent_view import has_todos
from services.middleware.todo import parallel_write_todos_error
from services.seal import Sealer
from services.tasks.issued import call_seal

WRITE_TODOS = "write_todos"


def after_model_results(spec: AgentSpec, message: AIMessage) -> dict[str, ToolMessage]:
    """Tool messages decided before any tool runs (LangChain's ``after_model`` hooks).

    TodoListMiddleware: more than one ``write_todos`` call in one turn answers each of them
    with an error and applies none; the turn's other calls still run.
    """
    if not has_todos(spec):
        return {}
    calls = [c for c in message.tool_calls if c.name == WRITE_TODOS]
    if len(calls) <= 1:
        return {}
    error = parallel_write_todos_error()
    return {c.id: ToolMessage(content=error, tool_call_id=c.id, status="error") for c in calls}


def edits_context(spec: AgentSpec) -> bool:
    return any(m.type == "ContextEditingMiddleware" for m in spec.middleware)


def model_request(
    names: Names,
    spec: AgentSpec,
    *,
    task_id: str,
    agent_id: str,
    step: int,
    transcript_len: int,
    rev: int,
    last_result: ToolMessage | None = None,
    transcript: list[Message] | None = None,
) -> tuple[str, Event]:
    """Where a step that calls the model goes first: the context stage when the agent
    edits its context, else straight to the model (one stream hop fewer per step: the
    context stage would only pass the request on unchanged). ``last_result``,
    ``transcript``: see ``ModelRequested``."""
    if edits_context(spec):
        request: Event = ContextRequested(
            task_id=task_id,
            step=step,
            agent_id=agent_id,
            transcript_len=transcript_len,
            rev=rev,
        )
        return names.work("context", task_id), request
    request = ModelRequested(
        task_id=task_id,
        step=step,
        agent_id=agent_id,
        transcript_len=transcript_len,
        rev=rev,
        last_result=last_result,
        transcript=transcript,
    )
    return names.work("model", task_id), request


def tool_stream(names: Names, spec: AgentSpec, call: ToolCall, task_id: str) -> str:
    """``write_todos`` calls of a TodoListMiddleware agent go to the todos service."""
    kind = "todo_calls" if call.name == WRITE_TODOS and has_todos(spec) else "tools"
    return names.work(kind, task_id)


def tool_requests(
    names: Names,
    spec: AgentSpec,
    *,
    task_id: str,
    agent_id: str,
    step: int,
    calls: list[ToolCall],
    join_len: int,
    expected: list[str],
    sealer: Sealer,
    digests: Mapping[str, str] | None = None,
    rev: int = 0,
) -> list[tuple[str, Event]]:
    """A step's calls to run, each to its service's stream, sealed as issued by this
    state (``services.seal``). ``expected``: the step's results in join order
    (``join_order``), the last of them at ``join_len - 1``; ``digests``: the calls'
    ``call_digest``s where the caller has them; ``rev``: the transcript's revision."""
    first_at = join_len - len(expected)
    return [
        (
            tool_stream(names, spec, call, task_id),
            ToolRequested(
                task_id=task_id,
                step=step,
                agent_id=agent_id,
                call=call,
                join_len=join_len,
                rev=rev,
                result_at=first_at + expected.index(call.id) if call.id in expected else None,
                seal=call_seal(sealer, task_id, step, agent_id, call, (digests or {}).get(call.id)),
            ),
        )
        for call in calls
    ]


def join_order(message: AIMessage, decided: dict[str, ToolMessage]) -> list[str]:
    """The order results enter the transcript: what after_model decided first (its update
    lands before the tools run), then the tools' results in call order."""
    decided_ids = [c.id for c in message.tool_calls if c.id in decided]
    return decided_ids + [c.id for c in message.tool_calls if c.id not in decided]


def step_limit_reason(max_steps: int) -> str:
    return (
        f"step limit reached: the agent made {max_steps} model calls without a final answer "
        f"(max_steps={max_steps}; raise it with LOOPLINE_MAX_STEPS or the task's max_steps)"
    )
