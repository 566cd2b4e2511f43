"""Every built-in of ``langchain.agents.middleware.__all__``, converted: LangChain's own
instance given to loopline's ``create_agent`` (deployed: its constructor arguments read
back, models by name) and the same middleware written in an agent file, each run through
the services as processes, behaves as LangChain's ``create_agent`` with that instance:
the same model requests and the same messages (twin scripted servers; the prompts carry a
side tag, ``lc``, ``obj`` or ``file``, left out when comparing). Built-ins that cannot run
deployed are refused at registration with the reason."""

from __future__ import annotations

import uuid
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from langchain.agents import create_agent as lc_create_agent
from langchain.agents import middleware as lcm
from langchain_openai import ChatOpenAI

from contracts.agent import MiddlewareSpec, ModelSpec
from contracts.replies import Reply, ScriptedToolCall
from loopline import create_agent
from loopline.agentfile import agent_from_dict
from loopline.testing.scripted import ScriptedOpenAIServer, first_user_text
from services.middleware.builtins import REFUSED_DEPLOYED
from services.settings import Settings
from services.spec.validation import InvalidSpec, check_deployable
from tests import tooling
from tests.structured_cases import shape
from tests.support import ServiceProcesses, services_on

SIDES = ("lc", "obj", "file")


def call(name: str, **args: Any) -> ScriptedToolCall:
    return ScriptedToolCall(name, args)


def respond(body: dict[str, Any]) -> Reply:
    """By scenario (the prompt's second word); ``primary`` is a model that is down."""
    if body.get("model") == "primary":
        raise RuntimeError("primary model is down")
    if "response_format" in body:  # LLMToolSelector's selection
        return Reply(content='{"tools": ["add"]}')
    if "Messages to summarize" in str(body["messages"]):  # the summary keeps the prompt
        return Reply(content="SUMMARY: " + " ".join(_prompt(body).split()[:4]))
    if first_user_text(body).startswith("Here is a summary"):
        return Reply(content="summarized done")  # after the history was summarized
    words = _prompt(body).split()
    name, side = words[1], words[2]
    turn = sum(1 for m in body["messages"] if m.get("role") == "assistant")
    turns = SCRIPTS[name](side, words[3] if len(words) > 3 else "")
    return turns[min(turn, len(turns) - 1)]


def _prompt(body: dict[str, Any]) -> str:
    """The scenario's prompt (``mw SCRIPT SIDE TAG``): in the first user message that
    holds one (after summarization, the summary does)."""
    texts = [str(m.get("content")) for m in body["messages"] if m.get("role") == "user"]
    return next((t[t.find("mw ") :] for t in texts if "mw " in t), first_user_text(body))


SCRIPTS: dict[str, Callable[[str, str], list[Reply]]] = {
    "calls": lambda side, tag: [
        Reply(tool_calls=(call("add", a=1, b=2), call("add", a=3, b=4))),
        Reply(tool_calls=(call("add", a=5, b=6),)),
        Reply(content="added"),
    ],
    "flaky": lambda side, tag: [
        Reply(tool_calls=(call("flaky", key=f"{tag}-{side}", failures=3),)),
        Reply(content="flaky done"),
    ],
    "plain": lambda side, tag: [Reply(content="plain answer")],
    "todos": lambda side, tag: [
        Reply(tool_calls=(call("write_todos", todos=[{"content": "x", "status": "pending"}]),)),
        Reply(content="planned"),
    ],
}


@dataclass
class Scenario:
    script: str
    instance: Callable[[Callable[[str], Any]], Any]
    """The middleware, given how to make a model of a name (LangChain's or loopline's)."""
    file: dict[str, Any]
    prompt_extra: str = ""
    model: str = "gpt-4o-mini"


SCENARIOS: dict[str, Scenario] = {
    "ModelCallLimitMiddleware": Scenario(
        "calls",
        lambda model: lcm.ModelCallLimitMiddleware(run_limit=2),
        {"type": "ModelCallLimitMiddleware", "run_limit": 2},
    ),
    "ToolCallLimitMiddleware": Scenario(
        "calls",
        lambda model: lcm.ToolCallLimitMiddleware(tool_name="add", run_limit=2),
        {"type": "ToolCallLimitMiddleware", "tool_name": "add", "run_limit": 2},
    ),
    "ModelRetryMiddleware": Scenario(
        "plain",
        lambda model: lcm.ModelRetryMiddleware(max_retries=1, initial_delay=0.01),
        {"type": "ModelRetryMiddleware", "max_retries": 1, "initial_delay": 0.01},
    ),
    # three retries: the default two would fail the task (the tool fails three times)
    "ToolRetryMiddleware": Scenario(
        "flaky",
        lambda model: lcm.ToolRetryMiddleware(max_retries=3, initial_delay=0.01, jitter=False),
        {"type": "ToolRetryMiddleware", "max_retries": 3, "initial_delay": 0.01, "jitter": False},
    ),
    "ModelFallbackMiddleware": Scenario(
        "plain",
        lambda model: lcm.ModelFallbackMiddleware(model("gpt-4o-mini")),
        {"type": "ModelFallbackMiddleware", "first_model": "openai:gpt-4o-mini"},
        model="primary",
    ),
    "LLMToolSelectorMiddleware": Scenario(
        "calls",
        lambda model: lcm.LLMToolSelectorMiddleware(model=model("gpt-4o-mini"), max_tools=1),
        {"type": "LLMToolSelectorMiddleware", "model": "openai:gpt-4o-mini", "max_tools": 1},
    ),
    "PIIMiddleware": Scenario(
        "plain",
        lambda model: lcm.PIIMiddleware("email", strategy="mask"),
        {"type": "PIIMiddleware", "pii_type": "email", "strategy": "mask"},
        prompt_extra="mail me at ada@example.org",
    ),
    "SummarizationMiddleware": Scenario(
        "calls",
        lambda model: lcm.SummarizationMiddleware(
            model("gpt-4o-mini"), trigger=("messages", 4), keep=("messages", 2)
        ),
        {
            "type": "SummarizationMiddleware",
            "model": "openai:gpt-4o-mini",
            "trigger": ["messages", 4],
            "keep": ["messages", 2],
        },
    ),
    "TodoListMiddleware": Scenario(
        "todos", lambda model: lcm.TodoListMiddleware(), {"type": "TodoListMiddleware"}
    ),
    "ContextEditingMiddleware": Scenario(
        "calls",
        lambda model: lcm.ContextEditingMiddleware(
            edits=[lcm.ClearToolUsesEdit(trigger=10, keep=1)]
        ),
        {
            "type": "ContextEditingMiddleware",
            "edits": [{"type": "ClearToolUsesEdit", "trigger": 10, "keep": 1}],
        },
    ),
}
"""HumanInTheLoopMiddleware converts by the same rule; its runs (interrupts, resumes)
are compared with LangChain's in tests/test_hitl.py and tests/test_thread_parity.py."""


RESPONDER = respond


@pytest.fixture(scope="module")
def stack(
    redis_url: str, servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer]
) -> Iterator[ServiceProcesses]:
    with services_on(redis_url, servers[1], RECORD_REDIS_URL=redis_url) as procs:
        yield procs


def untagged(value: Any, prompt: str) -> str:
    text = str(value)
    for side in SIDES:
        text = text.replace(f"{prompt} {side}", prompt)
        text = text.replace(f"-{side}'", "'").replace(f'-{side}"', '"')
    return text


def requests_of(server: ScriptedOpenAIServer, prompt: str) -> list[str]:
    return [untagged(r, prompt) for r in server.chat_requests() if prompt in str(r["messages"])]


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_converted_builtins_behave_as_langchain(
    name: str,
    stack: ServiceProcesses,
    servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", servers[1].url)  # loopline's models' endpoint
    monkeypatch.setenv("OPENAI_API_KEY", "test")
    monkeypatch.setenv("RECORD_REDIS_URL", stack.redis_url)
    case = SCENARIOS[name]
    tag = uuid.uuid4().hex[:8]
    prompt = f"mw {case.script}"
    text = {side: f"{prompt} {side} {tag} {case.prompt_extra}".strip() for side in SIDES}

    def lc_model(model: str) -> Any:
        return ChatOpenAI(model=model, base_url=servers[0].url, api_key="test", max_retries=0)

    lc_agent = lc_create_agent(
        lc_model(case.model), [tooling.add, tooling.flaky], middleware=[case.instance(lc_model)]
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lc = lc_agent.invoke({"messages": text["lc"]})
    model = ModelSpec(name=case.model, params={"max_retries": 0})
    settings = Settings(prefix=stack.prefix)
    by_instance = create_agent(
        model,
        [tooling.add, tooling.flaky],
        middleware=[case.instance(lambda m: ChatOpenAI(model=m, max_retries=0))],
        redis_url=stack.redis_url,
        settings=settings,
    ).invoke({"messages": text["obj"]})
    spec, _ = agent_from_dict(
        {
            "model": {"name": case.model, "params": {"max_retries": 0}},
            "tools": ["tests.tooling:add", "tests.tooling:flaky"],
            "middleware": [case.file],
        }
    )
    by_file = create_agent(
        spec.model,
        [tooling.add, tooling.flaky],
        redis_url=stack.redis_url,
        settings=settings,
        middleware=spec.middleware,
    ).invoke({"messages": text["file"]})
    expected = untagged(shape(lc["messages"]), prompt)
    assert untagged(shape(by_instance["messages"]), prompt) == expected
    assert untagged(shape(by_file["messages"]), prompt) == expected
    lc_requests = [r for r in requests_of(servers[0], prompt) if tag in r]
    ll_requests = [r for r in requests_of(servers[1], prompt) if tag in r]
    assert lc_requests
    assert ll_requests == lc_requests * 2  # the instance's run, then the file's


def test_every_builtin_is_converted_or_refused() -> None:
    builtins = {
        n
        for n in lcm.__all__
        if isinstance(getattr(lcm, n), type)
        and issubclass(getattr(lcm, n), lcm.AgentMiddleware)
        and n != "AgentMiddleware"
    }
    covered = set(SCENARIOS) | set(REFUSED_DEPLOYED) | {"HumanInTheLoopMiddleware"}
    assert builtins == covered


@pytest.mark.parametrize("name", sorted(REFUSED_DEPLOYED))
def test_what_cannot_run_deployed_is_refused_with_its_reason(name: str, redis_url: str) -> None:
    with pytest.raises(ValueError, match=f"{name} cannot run deployed: .+") as refused:
        from services.spec.middleware import to_spec

        to_spec(_refused_instance(name))
    assert REFUSED_DEPLOYED[name] in str(refused.value)
    spec, _ = agent_from_dict({"model": "gpt-4o-mini"})
    in_a_file = MiddlewareSpec(type=f"langchain.agents.middleware:{name}")
    with pytest.raises(InvalidSpec, match=f"{name} cannot run deployed"):
        check_deployable(spec.model_copy(update={"middleware": [in_a_file]}))


def _refused_instance(name: str) -> Any:
    import tempfile

    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel

    fake = GenericFakeChatModel(messages=iter([]))
    made: dict[str, Callable[[], Any]] = {
        "ToolErrorMiddleware": lambda: lcm.ToolErrorMiddleware(lambda e, r: "x"),
        "LLMToolEmulator": lambda: lcm.LLMToolEmulator(model=fake),
        "ShellToolMiddleware": lambda: lcm.ShellToolMiddleware(tempfile.mkdtemp()),
        "FilesystemFileSearchMiddleware": lambda: lcm.FilesystemFileSearchMiddleware(
            root_path=tempfile.mkdtemp()
        ),
        "ModelRefusalMiddleware": lambda: lcm.ModelRefusalMiddleware(),
        "ProviderToolSearchMiddleware": lambda: lcm.ProviderToolSearchMiddleware(),
    }
    if name in made:
        return made[name]()
    return object.__new__(getattr(lcm, name))  # its constructor wants classifier objects
