"""An agent spec is checked before any task of it runs: each middleware's parameters against
its constructor (unknown, missing, wrong type), the edits inside ContextEditingMiddleware,
what must travel or be stored as JSON; and an input with no messages. Each problem is one
line at the call (``create_agent``, an agent file, ``loopline run``), and a TaskSubmitted
that carries one is refused by the loop. Fast and in-process; one check against a loop
service process."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import redis as syncredis
from langchain.agents.middleware import AgentMiddleware, HostExecutionPolicy, ShellToolMiddleware

from contracts.agent import AgentSpec, MiddlewareSpec
from contracts.events import TaskSubmitted, dump_event, parse_event
from contracts.messages import HumanMessage
from contracts.streams import DATA_FIELD, Names
from loopline.agent import create_agent
from loopline.agentfile import agent_from_dict, load_agent_file
from loopline.middleware import (
    ContextEditingMiddleware,
    ModelCallLimitMiddleware,
    PIIMiddleware,
    SummarizationMiddleware,
)
from services.errors import BadEvent, ConfigurationError
from services.runtime import Runtime
from services.settings import Settings
from services.spec.middleware import to_spec
from services.spec.validation import InvalidSpec, check_middleware
from services.tasks.loop import Loop
from tests.support import REPO_ROOT, MakeRuntime, ServiceProcesses, unique_prefix

if TYPE_CHECKING:
    from decimal import Decimal  # a name only a type checker sees


class Tuned(AgentMiddleware):  # type: ignore[type-arg]
    """A user middleware whose annotations the check cannot all use: one resolves only
    for a type checker, one is a function, one an arbitrary class."""

    def __init__(
        self,
        *,
        level: int = 1,
        ratio: Decimal | None = None,
        score: Any = None,
        policy: HostExecutionPolicy | None = None,
    ) -> None:
        super().__init__()
        self.level = level


BAD_EDIT = {
    "type": "ContextEditingMiddleware",
    "edits": [{"type": "ClearToolUsesEdit", "trigger": "lots"}],
}


def refused(spec: dict[str, Any]) -> str:
    with pytest.raises(InvalidSpec) as caught:
        check_middleware(MiddlewareSpec.model_validate(spec))
    message = str(caught.value)
    assert "\n" not in message
    return message


# -- parameters against constructors ------------------------------------------------------


@pytest.mark.fast
@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            BAD_EDIT,
            "ContextEditingMiddleware: ClearToolUsesEdit: trigger must be int, got 'lots' (str)",
        ),
        (
            {"type": "ContextEditingMiddleware", "edits": [{"keep": 1, "placeholder": 7}]},
            "ContextEditingMiddleware: ClearToolUsesEdit: placeholder must be str, got 7 (int)",
        ),
        (
            {"type": "ModelCallLimitMiddleware", "run_limit": "3"},
            "ModelCallLimitMiddleware: run_limit must be int or None, got '3' (str)",
        ),
        (
            {"type": "ModelCallLimitMiddleware", "exit_behavior": "stop"},
            "ModelCallLimitMiddleware: exit_behavior must be 'end' or 'error', got 'stop' (str)",
        ),
        (
            {"type": "PIIMiddleware", "pii_type": "email", "strategy": "nuke"},
            "PIIMiddleware: strategy must be 'block' or 'redact' or 'mask' or 'hash', "
            "got 'nuke' (str)",
        ),
        (
            {"type": "PIIMiddleware", "pii_type": "email", "apply_to_tool_calls": "yes"},
            "PIIMiddleware: apply_to_tool_calls must be bool, got 'yes' (str)",
        ),
        (
            {"type": "SummarizationMiddleware", "model": "m", "trim_tokens_to_summarize": 1.5},
            "SummarizationMiddleware: trim_tokens_to_summarize must be int or None, "
            "got 1.5 (float)",
        ),
        (
            {"type": "tests.middlewares:StopAfter", "calls": "two"},
            "StopAfter: calls must be int, got 'two' (str)",
        ),
    ],
)
def test_a_wrong_type_is_one_line_naming_middleware_parameter_given_and_expected(
    spec: dict[str, Any], message: str
) -> None:
    assert refused(spec) == message


@pytest.mark.fast
def test_a_summarization_trigger_of_the_wrong_shape_is_refused() -> None:
    message = refused({"type": "SummarizationMiddleware", "model": "m", "trigger": "lots"})
    assert message == (
        "SummarizationMiddleware: trigger must be ('fraction', float) | ('tokens', int) | "
        "('messages', int) | TriggerClause | list[('fraction', float) | ('tokens', int) | "
        "('messages', int) | TriggerClause] | None, got 'lots' (str)"
    )
    assert refused(
        {"type": "SummarizationMiddleware", "model": "m", "keep": ["messages", "x"]}
    ) == (
        "SummarizationMiddleware: keep must be ('fraction', float) or ('tokens', int) or "
        "('messages', int), got ['messages', 'x'] (list)"
    )


@pytest.mark.fast
def test_typed_dicts_inside_a_parameter_are_checked_too() -> None:
    gate = {"add": {"allowed_decisions": ["approve", "nope"]}}
    assert refused({"type": "HumanInTheLoopMiddleware", "interrupt_on": gate}) == (
        "HumanInTheLoopMiddleware: interrupt_on must be dict[str, bool | InterruptOnConfig], "
        "got {'add': {'allowed_decisions': ['approve', 'nope']}} (dict)"
    )


@pytest.mark.fast
@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            {"type": "ContextEditingMiddleware", "edits": [{"triger": 2000}]},
            "ContextEditingMiddleware: ClearToolUsesEdit: unknown parameter triger; expected: "
            "clear_at_least, clear_tool_inputs, exclude_tools, include_tools, keep, placeholder, "
            "trigger",
        ),
        (
            {"type": "ContextEditingMiddleware", "edits": [{"type": "ClearEverything"}]},
            "ContextEditingMiddleware: unknown edit type 'ClearEverything'; supported: "
            "ClearToolUsesEdit",
        ),
        (
            {"type": "ModelCallLimitMiddleware", "run_limt": 3},
            "ModelCallLimitMiddleware: unknown parameter run_limt; expected: exit_behavior, "
            "run_limit, thread_limit",
        ),
        (
            {"type": "PIIMiddleware", "pii_type": "email", "apply_to": "input"},
            "PIIMiddleware: unknown parameter apply_to; expected: apply_to_input, "
            "apply_to_output, apply_to_tool_calls, apply_to_tool_results, detector, pii_type, "
            "strategy",
        ),
        (
            {"type": "tests.middlewares:StopAfter", "calls": 2, "limit": 1},
            "StopAfter: unknown parameter limit; expected: calls",
        ),
    ],
)
def test_an_unknown_parameter_is_one_line_with_the_known_ones(
    spec: dict[str, Any], message: str
) -> None:
    assert refused(spec) == message


@pytest.mark.fast
def test_summarization_refuses_a_misspelt_parameter_its_kwargs_would_drop() -> None:
    message = refused({"type": "SummarizationMiddleware", "model": "gpt-4o-mini", "triger": 9})
    assert message.startswith("SummarizationMiddleware: unknown parameter triger; expected: ")
    # LangChain's deprecated names still pass, as LangChain still takes them.
    check_middleware(
        MiddlewareSpec.model_validate(
            {"type": "SummarizationMiddleware", "model": "gpt-4o-mini", "messages_to_keep": 3}
        )
    )


@pytest.mark.fast
@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            {"type": "PIIMiddleware", "strategy": "redact"},
            "PIIMiddleware: missing required parameter pii_type",
        ),
        (
            {"type": "SummarizationMiddleware", "trigger": ["tokens", 100]},
            "SummarizationMiddleware: missing required parameter model",
        ),
        (
            {"type": "HumanInTheLoopMiddleware"},
            "HumanInTheLoopMiddleware: missing required parameter interrupt_on",
        ),
        ({"type": "tests.middlewares:StopAfter"}, "StopAfter: missing required parameter calls"),
    ],
)
def test_a_missing_required_parameter_is_one_line(spec: dict[str, Any], message: str) -> None:
    assert refused(spec) == message


@pytest.mark.fast
def test_an_instance_named_by_path_takes_no_parameters() -> None:
    assert refused({"type": "tests.middlewares:terse", "x": 1}) == (
        "terse: names an instance, which takes no parameters (given: x)"
    )


@pytest.mark.fast
def test_a_path_that_does_not_import_is_one_line() -> None:
    reason = refused({"type": "tests.no_such_module:Thing"})
    assert "\n" not in reason
    assert reason.startswith(
        "middleware 'tests.no_such_module:Thing': No module named 'tests.no_such_module'"
    )
    assert "PYTHONPATH" in reason and "LOOPLINE_ALLOWED_MODULES" in reason  # how to fix it


VALID = [
    {"type": "TodoListMiddleware"},
    {"type": "TodoListMiddleware", "system_prompt": "Plan."},
    {"type": "ContextEditingMiddleware"},
    {
        "type": "ContextEditingMiddleware",
        "edits": [
            {"type": "ClearToolUsesEdit", "trigger": 2000, "keep": 1, "exclude_tools": ["add"]},
            {"trigger": 10, "clear_tool_inputs": True, "include_tools": None},
        ],
        "token_count_method": "model",
    },
    {"type": "ModelCallLimitMiddleware", "run_limit": 3, "thread_limit": None},
    {"type": "ToolCallLimitMiddleware", "tool_name": "add", "run_limit": 1, "exit_behavior": "end"},
    {"type": "ModelRetryMiddleware", "max_retries": 3, "initial_delay": 0, "on_failure": "error"},
    {"type": "ToolRetryMiddleware", "tools": ["add"], "backoff_factor": 1},
    {"type": "PIIMiddleware", "pii_type": "email", "strategy": "mask", "apply_to_output": True},
    {
        "type": "PIIMiddleware",
        "pii_type": "api_key",
        "detector": {"callable": "tests.pii_helpers:detect_api_key"},
    },
    {"type": "PIIMiddleware", "pii_type": "ticket", "detector": r"TCK-\d+"},
    {
        "type": "SummarizationMiddleware",
        "model": "openai:gpt-4o-mini",
        "trigger": [["tokens", 200], {"messages": 4}],
        "keep": ["messages", 2],
    },
    {"type": "SummarizationMiddleware", "model": "gpt-4o-mini", "trigger": ["fraction", 0.5]},
    {"type": "ModelFallbackMiddleware", "first_model": "a", "additional_models": ["b", "c"]},
    {
        "type": "HumanInTheLoopMiddleware",
        "interrupt_on": {"add": True, "pay": {"allowed_decisions": ["approve", "reject"]}},
        "interrupt_mode": "per_call",
    },
    {"type": "LLMToolSelectorMiddleware", "model": "openai:gpt-4o-mini", "max_tools": 2},
    {"type": "RateLimitMiddleware", "requests_per_minute": 5, "window_seconds": 1},
    {"type": "tests.middlewares:Recorder", "name": "A", "key": "k"},
    {"type": "tests.middlewares:StopAfter", "calls": 2},
    {"type": "tests.middlewares:Shouter"},
    {"type": "tests.middlewares:terse"},
    {"type": "tests.test_spec_validation:Tuned", "level": 2, "ratio": "0.5", "score": [1]},
    {"type": "tests.test_spec_validation:Tuned", "policy": {"anything": 1}},
]


@pytest.mark.fast
@pytest.mark.parametrize("spec", VALID, ids=lambda s: s["type"])
def test_valid_specs_are_accepted(spec: dict[str, Any]) -> None:
    check_middleware(MiddlewareSpec.model_validate(spec))


@pytest.mark.fast
def test_what_annotations_the_check_cannot_use_never_refuse_and_never_crash() -> None:
    # ``Decimal`` exists only for a type checker, ``Any`` says nothing: not checked.
    check_middleware(
        MiddlewareSpec.model_validate(
            {"type": "tests.test_spec_validation:Tuned", "ratio": [], "score": {"a": None}}
        )
    )
    assert refused({"type": "tests.test_spec_validation:Tuned", "level": "high"}) == (
        "Tuned: level must be int, got 'high' (str)"
    )


@pytest.mark.fast
def test_middleware_built_in_code_give_specs_that_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "test")  # the summarizer's model is built here
    for middleware in (
        ModelCallLimitMiddleware(run_limit=2, exit_behavior="error"),
        PIIMiddleware("email", strategy="redact", apply_to_tool_results=True),
        SummarizationMiddleware(
            model="openai:gpt-4o-mini", trigger=("tokens", 50), keep=("messages", 2)
        ),
        ContextEditingMiddleware(edits=[{"trigger": 10, "keep": 1}]),
    ):
        check_middleware(to_spec(middleware))


# -- what must be JSON ---------------------------------------------------------------------


@pytest.mark.fast
def test_shell_tool_middleware_is_refused_for_its_state_the_serializer_cannot_carry() -> None:
    expected = (
        "ShellToolMiddleware: state field shell_session_resources cannot be stored "
        "(_SessionResources): a task's state is stored between its stages as LangGraph's "
        "checkpoint serializer carries it"
    )
    shell = ShellToolMiddleware(execution_policy=HostExecutionPolicy())
    with pytest.raises(InvalidSpec) as caught:  # embedded: LangChain's instance, checked
        check_middleware(to_spec(shell, embedded=True))
    assert str(caught.value) == expected
    with pytest.raises(ValueError, match=r"^ShellToolMiddleware cannot run deployed: "):
        to_spec(shell, embedded=False)  # refused before its state is looked at


@pytest.mark.fast
def test_create_agent_refuses_shell_tool_middleware_at_the_call(redis_url: str) -> None:
    with pytest.raises(ValueError, match=r"^ShellToolMiddleware cannot run deployed: .*shell"):
        create_agent("gpt-4o-mini", middleware=[ShellToolMiddleware()], redis_url=redis_url)


@pytest.mark.fast
def test_a_parameter_json_cannot_hold_is_named_with_its_type() -> None:
    spec = MiddlewareSpec(
        type="ModelCallLimitMiddleware", params={"run_limit": 1, "extra": {"x": [1, object()]}}
    )
    with pytest.raises(InvalidSpec) as caught:
        check_middleware(spec)
    assert str(caught.value) == (
        "ModelCallLimitMiddleware: parameter extra.x[1] is not JSON-serializable (object): "
        "a spec travels as JSON"
    )


# -- where the check runs ------------------------------------------------------------------


@pytest.mark.fast
def test_create_agent_refuses_a_wrong_type_at_the_call(redis_url: str) -> None:
    with pytest.raises(InvalidSpec) as caught:
        create_agent(
            "gpt-4o-mini",
            middleware=[ContextEditingMiddleware(edits=[{"trigger": "lots"}])],
            redis_url=redis_url,
        )
    assert str(caught.value) == (
        "ContextEditingMiddleware: ClearToolUsesEdit: trigger must be int, got 'lots' (str)"
    )
    with pytest.raises(ConfigurationError, match="run_limit must be int or None, got '2'"):
        create_agent(
            "gpt-4o-mini", middleware=[ModelCallLimitMiddleware(run_limit="2")], redis_url=redis_url
        )


@pytest.mark.fast
def test_an_agent_file_with_a_wrong_type_is_one_configuration_error(tmp_path: Path) -> None:
    path = tmp_path / "agent.json"
    path.write_text(json.dumps({"model": "gpt-4o-mini", "middleware": [BAD_EDIT]}))
    with pytest.raises(ConfigurationError) as caught:
        load_agent_file(path)
    assert str(caught.value) == (
        f"{path}: ContextEditingMiddleware: ClearToolUsesEdit: trigger must be int, "
        "got 'lots' (str)"
    )
    with pytest.raises(ConfigurationError, match=r"^agent: StopAfter: missing required parameter"):
        agent_from_dict({"model": "m", "middleware": [{"type": "tests.middlewares:StopAfter"}]})


def test_loopline_run_with_a_bad_agent_file_prints_one_line_and_publishes_nothing(
    tmp_path: Path, redis_url: str
) -> None:
    prefix = unique_prefix()
    path = tmp_path / "agent.yaml"
    path.write_text(
        "model: gpt-4o-mini\nmiddleware:\n  - type: ContextEditingMiddleware\n"
        "    edits: [{type: ClearToolUsesEdit, trigger: lots}]\n"
    )
    env = {
        **os.environ,
        "REDIS_URL": redis_url,
        "LOOPLINE_PREFIX": prefix,
        "PYTHONPATH": str(REPO_ROOT),
    }
    done = subprocess.run(
        [sys.executable, "-m", "loopline", "run", "--agent", str(path), "hello"],
        env=env,
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert done.stderr.strip().splitlines() == [
        f"loopline: error: {path}: ContextEditingMiddleware: ClearToolUsesEdit: trigger must "
        "be int, got 'lots' (str)"
    ]
    r = syncredis.Redis.from_url(redis_url)
    assert r.xlen(Names(prefix).tasks) == 0
    r.close()


@pytest.fixture
async def runtime(make_runtime: MakeRuntime) -> Runtime:
    return await make_runtime(groups=False)  # so nothing at all is under the prefix


def bad_submission() -> TaskSubmitted:
    spec = AgentSpec.model_validate({"model": "gpt-4o-mini", "middleware": [BAD_EDIT]})
    return TaskSubmitted(agent=spec, messages=[HumanMessage(content="hi")])


@pytest.mark.fast
async def test_the_loop_refuses_a_task_submitted_with_a_bad_spec(
    runtime: Runtime, prefix: str
) -> None:
    with pytest.raises(BadEvent) as caught:
        await Loop(runtime).task_submitted(bad_submission())
    assert str(caught.value) == (
        "ContextEditingMiddleware: ClearToolUsesEdit: trigger must be int, got 'lots' (str)"
    )
    assert await runtime.redis.keys(f"{prefix}:*") == []  # no spec stored, no task started


def test_a_loop_service_dead_letters_a_bad_task_submitted_with_the_reason(redis_url: str) -> None:
    """A producer that skips the client's checks (a plain XADD) gets the same line."""
    with ServiceProcesses(redis_url, unique_prefix(), services=["loop"]) as stack:
        names = Names(stack.prefix)
        r = syncredis.Redis.from_url(redis_url)
        try:
            r.xadd(names.tasks, {DATA_FIELD: dump_event(bad_submission())})
            deadline = time.monotonic() + 20
            while not r.xlen(names.dlq) and time.monotonic() < deadline:
                time.sleep(0.05)
            letters = [json.loads(f[DATA_FIELD.encode()]) for _, f in r.xrange(names.dlq)]
        finally:
            r.close()
        assert [letter["error"] for letter in letters] == [
            "BadEvent: ContextEditingMiddleware: ClearToolUsesEdit: trigger must be int, "
            "got 'lots' (str)"
        ]
        assert stack.alive("loop")


# -- the input ---------------------------------------------------------------------------


@pytest.mark.fast
def test_an_input_with_no_messages_is_a_task_as_langchain_runs_it(
    redis_url: str, prefix: str
) -> None:
    """LangChain's agent calls the model with no messages (tests/test_input_parity.py
    compares the runs); ``None`` is refused, as LangGraph refuses it."""
    agent = create_agent("gpt-4o-mini", redis_url=redis_url, settings=Settings(prefix=prefix))
    task_ids = [asyncio.run(agent.asubmit(given)) for given in ({"messages": []}, {})]
    with pytest.raises(TypeError, match="not None"):
        asyncio.run(agent.asubmit({"messages": None}))
    r = syncredis.Redis.from_url(redis_url)
    entries = r.xrange(Names(prefix).tasks)
    r.close()
    submitted = [parse_event(fields[DATA_FIELD.encode()]) for _, fields in entries]
    assert [(e.task_id, e.messages) for e in submitted] == [(t, []) for t in task_ids]
