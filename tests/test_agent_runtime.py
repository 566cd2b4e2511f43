"""The agent's runtime as LangChain gives it, in whichever service runs the code: tools
taking ``ToolRuntime`` (state, context, store, tool call id, config), ``InjectedState``,
``InjectedToolCallId`` and ``InjectedStore`` (hidden from the model's tool schemas);
``context_schema`` with ``invoke(..., context=...)`` reaching hooks in the loop
(``before_model``) and the model service (``wrap_model_call``) and tools; ``state_schema``
and middleware ``state_schema`` keys taken from the input, kept across the run and
returned (in the result and the thread's state).

Each case runs the same agent through LangChain's ``create_agent`` and through loopline
(deployed: every service its own process; embedded: every service in this process),
against twin scripted servers: the same request bodies, the same messages (the tools
answer with what they were given), the same state keys."""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated, Any, NotRequired

import pytest
from langchain.agents import AgentState
from langchain.agents import create_agent as lc_create_agent
from langchain.agents.middleware import ClearToolUsesEdit, ContextEditingMiddleware
from langchain_openai import ChatOpenAI
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.errors import InvalidUpdateError
from langgraph.store.memory import InMemoryStore

from contracts.replies import Reply, ScriptedToolCall
from loopline import create_agent
from loopline.testing.scripted import ScriptedOpenAIServer
from services.settings import Settings
from tests.rewrite_middleware import ChangesRequestList, RewritesState
from tests.runtime_tools import (
    AddsUnknownTool,
    Caller,
    CallerPrompt,
    CountingCalls,
    DynamicTools,
    MoreTally,
    NoteTaker,
    Tally,
    TallyCommands,
    TrailState,
    VisitState,
    check_in,
    count_words,
    mark,
    peek,
    remember,
    whoami,
)
from tests.structured_cases import shape
from tests.support import (
    EMBEDDED_PREFIX,
    ServiceProcesses,
    unique_prefix,
)


def calls(*pairs: tuple[str, dict[str, Any]]) -> Reply:
    return Reply(tool_calls=tuple(ScriptedToolCall(name, args) for name, args in pairs))


@dataclass
class Case:
    """One agent and one run: ``create_agent`` keyword arguments (fresh per run), the
    input's other state keys, the run's context, the scripted replies."""

    prompt: str
    kwargs: Callable[[], dict[str, Any]]
    turns: list[Reply]
    state: dict[str, Any] = field(default_factory=dict)
    context: Any = None
    tools: list[Any] = field(default_factory=lambda: [whoami, peek, remember])


CASES = {
    # everything at once: a ToolRuntime, InjectedState (whole and one key),
    # InjectedToolCallId, InjectedStore; the agent's and a middleware's state keys;
    # the context in a loop hook, a model-service hook and the tools
    "runtime": Case(
        "runtime all",
        lambda: {
            "state_schema": VisitState,
            "context_schema": Caller,
            "middleware": [NoteTaker(), CallerPrompt()],
        },
        [
            calls(("whoami", {"topic": "tea"}), ("peek", {"key": "user_name"})),
            calls(("remember", {"fact": "likes tea"}), ("peek", {"key": "note"})),
            Reply(content="done"),
        ],
        state={"user_name": "Ada", "visits": 3, "unknown_key": "dropped"},
        context=Caller(user_id="u1"),
    ),
    # a dict context, coerced to the context_schema's dataclass as LangGraph does
    "dict_context": Case(
        "runtime dict context",
        lambda: {"context_schema": Caller, "middleware": [NoteTaker()]},
        [calls(("whoami", {"topic": "coffee"})), Reply(content="ok")],
        context={"user_id": "u2", "tier": "pro"},
    ),
    # no context, no schemas: a ToolRuntime still comes, with context None
    "plain": Case(
        "runtime plain",
        dict,
        [
            calls(("whoami", {"topic": "x"}), ("peek", {"key": "structured_response"})),
            Reply(content="k"),
        ],
    ),
}

CASES["command"] = Case(
    # a tool's Command(update=...) (its message and state keys; a call beside it in the
    # same step still sees the state before it), and wrap_model_call's
    # ExtendedModelResponse command counting model calls in a state key
    "runtime command",
    lambda: {"state_schema": VisitState, "middleware": [CountingCalls()]},
    [
        calls(("check_in", {"name": "Bo"}), ("peek", {"key": "visits"})),
        calls(("peek", {"key": "model_calls"}), ("whoami", {"topic": "after"})),
        Reply(content="bye"),
    ],
    state={"visits": 3},
    tools=[check_in, peek, whoami],
)

CASES["dynamic"] = Case(
    # dynamic tools: middleware hide one of the agent's tools from the model and add one
    # no agent defines, which its wrap_tool_call runs in the tools service
    "runtime dynamic",
    lambda: {"middleware": [DynamicTools()]},
    [calls(("lucky_number", {"seed": 6}), ("whoami", {"topic": "luck"})), Reply(content="42")],
)

CASES["token_counter"] = Case(
    # LangChain's ContextEditingMiddleware with a custom token_counter (it travels to the
    # context service by import path): older tool results cleared once it counts over 30
    "runtime token counter",
    lambda: {
        "middleware": [
            ContextEditingMiddleware(
                edits=[ClearToolUsesEdit(trigger=30, keep=1, clear_at_least=5)],
                token_counter=count_words,
            )
        ]
    },
    [
        calls(("whoami", {"topic": "one"})),
        calls(("whoami", {"topic": "two"})),
        calls(("whoami", {"topic": "three"})),
        Reply(content="done"),
    ],
)

CASES["reducers"] = Case(
    # keys declared with reducers (the agent's state_schema: a list added to; a
    # middleware's: a number summed, a dict by a function of the user's) updated from
    # the input, before_model and after_model hooks, wrap_model_call's command and
    # tools' Commands, two of them in one step, over two steps; the tools and hooks
    # see the folded values
    "runtime reducers hooked",
    lambda: {"state_schema": TrailState, "middleware": [Tally()]},
    [
        calls(("mark", {"label": "a"}), ("mark", {"label": "b"}), ("peek", {"key": "trail"})),
        calls(("mark", {"label": "c"}), ("peek", {"key": "by_label"})),
        Reply(content="marked"),
    ],
    state={"trail": ["in"], "tally": 1000},
    tools=[mark, peek],
)

CASES["reducers_inline"] = Case(
    # the same with no hook of the loop stage (the tools service joins the step's
    # results, the model service folds two wrap_model_call commands), keys left unset
    # by the input starting from their reducers' empty values
    "runtime reducers inline",
    lambda: {"state_schema": TrailState, "middleware": [TallyCommands(), MoreTally()]},
    [
        calls(("mark", {"label": "a"}), ("mark", {"label": "b"}), ("peek", {"key": "tally"})),
        calls(("mark", {"label": "c"})),
        Reply(content="marked"),
    ],
    tools=[mark, peek],
)

UNKNOWN = Case(
    # a tool middleware add that nothing can run: the model call is refused
    "runtime unknown tool",
    lambda: {"middleware": [AddsUnknownTool()]},
    [Reply(content="never asked")],
)
TWICE = Case(
    # two calls of one step set keys that have no reducer: LangGraph refuses the step
    "runtime twice",
    lambda: {"state_schema": VisitState},
    [calls(("check_in", {"name": "Al"}), ("check_in", {"name": "Bo"})), Reply(content="never")],
    tools=[check_in],
)
# wrap_model_call middleware that change earlier messages from the model call: a
# command replacing the tool result by id beside the reply, one tagging the human message
# on every call, a layer appending to the request's own list (LangChain writes it back)
for kind, make in {
    "rewrite_replace": lambda: RewritesState("replace"),
    "rewrite_tag": lambda: RewritesState("tag_human"),
    "rewrite_append": lambda: ChangesRequestList("append"),
}.items():
    CASES[kind] = Case(
        f"runtime {kind}",
        lambda make=make: {"middleware": [make()]},
        [calls(("whoami", {"topic": "tea"})), calls(("peek", {"key": "x"})), Reply(content="k")],
    )
REFUSED = {"unknown": UNKNOWN, "twice": TWICE}

SCRIPTS = {case.prompt: case.turns for case in [*CASES.values(), *REFUSED.values()]}


def chat_model(server: ScriptedOpenAIServer) -> ChatOpenAI:
    return ChatOpenAI(model="gpt-4o-mini", base_url=server.url, api_key="test")


def the_input(case: Case, where: str) -> dict[str, Any]:
    """The case's input, its prompt marked with where it runs (each run's requests are
    picked by it; the scripts match by the prompt's start)."""
    return {"messages": [{"role": "user", "content": f"{case.prompt} {where}"}], **case.state}


def run_langchain(
    case: Case, server: ScriptedOpenAIServer, where: str, **more: Any
) -> dict[str, Any]:
    agent = lc_create_agent(
        chat_model(server), tools=case.tools, store=InMemoryStore(), **case.kwargs(), **more
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result: dict[str, Any] = agent.invoke(the_input(case, where), context=case.context)
    return result


def requests_for(server: ScriptedOpenAIServer, prompt: str) -> list[dict[str, Any]]:
    return [
        r
        for r in server.chat_requests()
        if any(m.get("role") == "user" and m.get("content") == prompt for m in r["messages"])
    ]


def state_keys(result: dict[str, Any]) -> dict[str, Any]:
    """The result's keys besides messages (loopline adds its task id and todo list)."""
    return {k: v for k, v in result.items() if k not in ("messages", "task_id", "todos")}


def check_same(
    case: Case,
    where: str,
    servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer],
    lc: dict[str, Any],
    ours: dict[str, Any],
) -> None:
    prompt = f"{case.prompt} {where}"
    lc_requests = requests_for(servers[0], prompt)
    ll_requests = requests_for(servers[1], prompt)
    assert len(lc_requests) == len(case.turns) == len(ll_requests)
    for step, (lc_req, ll_req) in enumerate(zip(lc_requests, ll_requests, strict=True), 1):
        assert ll_req == lc_req, f"step {step}: request bodies differ"
    assert shape(ours["messages"]) == shape(lc["messages"])
    assert state_keys(ours) == state_keys(lc)


def deployed(case: Case, stack: ServiceProcesses, **more: Any) -> Any:
    settings = Settings(redis_url=stack.redis_url, prefix=stack.prefix)
    names = [f"tests.runtime_tools:{t.__name__}" for t in case.tools]
    return create_agent("gpt-4o-mini", names, settings=settings, **case.kwargs(), **more)


@pytest.mark.parametrize("name", list(CASES))
async def test_deployed_matches_langchain(
    name: str, stack: ServiceProcesses, servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer]
) -> None:
    case = CASES[name]
    lc = await asyncio.to_thread(run_langchain, case, servers[0], "deployed")
    ours = await deployed(case, stack).ainvoke(the_input(case, "deployed"), context=case.context)
    check_same(case, "deployed", servers, lc, ours)


def embedded_agent(case: Case, server: ScriptedOpenAIServer) -> Any:
    """The case's agent on the embedded services (the ``embedded`` fixture's)."""
    return create_agent(
        chat_model(server), case.tools, settings=Settings(prefix=EMBEDDED_PREFIX), **case.kwargs()
    )


@pytest.mark.parametrize("name", list(CASES))
async def test_embedded_matches_langchain(
    name: str, embedded: None, servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer]
) -> None:
    case = CASES[name]
    lc = await asyncio.to_thread(run_langchain, case, servers[0], "embedded")
    agent = embedded_agent(case, servers[1])
    ours = await agent.ainvoke(the_input(case, "embedded"), context=case.context)
    check_same(case, "embedded", servers, lc, ours)


async def test_the_cases_show_what_they_claim(
    stack: ServiceProcesses, servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer]
) -> None:
    """Read from loopline's side: the injected arguments never reach the model, the
    context reached every service, the dynamic tools reached the model and ran."""
    case = CASES["runtime"]
    ours = await deployed(case, stack).ainvoke(the_input(case, "claims"), context=case.context)
    first = requests_for(servers[1], f"{case.prompt} claims")[0]
    parameters = {t["function"]["name"]: t["function"]["parameters"] for t in first["tools"]}
    assert parameters["whoami"]["properties"] == {"topic": {"type": "string"}}
    assert parameters["peek"]["properties"] == {"key": {"type": "string"}}
    assert first["messages"][0] == {"role": "system", "content": "You serve u1."}
    told = [m.content for m in ours["messages"] if m.type == "tool"]
    assert '"context": {"tier": "free", "type": "Caller", "user_id": "u1"}' in told[0]
    assert '"value": "for u1 (free)"' in told[3]  # the loop's hook state, read by a tool
    assert ours["user_name"] == "Ada" and ours["visits"] == 3 and "unknown_key" not in ours

    dynamic = CASES["dynamic"]
    await deployed(dynamic, stack).ainvoke(the_input(dynamic, "claims"))
    asked = requests_for(servers[1], f"{dynamic.prompt} claims")
    assert [t["function"]["name"] for t in asked[0]["tools"]] == ["whoami", "peek", "lucky_number"]
    assert asked[1]["messages"][-2] == {
        "role": "tool",
        "content": "42",
        "tool_call_id": "call_0_0_lucky_number",
    }

    counted = CASES["token_counter"]
    await deployed(counted, stack).ainvoke(the_input(counted, "claims"))
    last = requests_for(servers[1], f"{counted.prompt} claims")[-1]["messages"]
    results = [m["content"] for m in last if m["role"] == "tool"]
    # the oldest cleared; clear_at_least reached by it (counted again), so no more
    assert results[0] == "[cleared]" and '"topic": "two"' in results[1]

    # the model-stage rewrites reached the state: the state's tool result clipped, the
    # next request sent it clipped (it saw it whole the step before); the appended
    # reminders stand in the state before each reply
    replaced = CASES["rewrite_replace"]
    result = await deployed(replaced, stack).ainvoke(the_input(replaced, "claims"))
    sent = requests_for(servers[1], f"{replaced.prompt} claims")
    assert next(m.content for m in result["messages"] if m.type == "tool") == "[clipped]"
    assert sent[1]["messages"][-1]["content"] != "[clipped]"
    assert sent[2]["messages"][2]["content"] == "[clipped]"
    appended = CASES["rewrite_append"]
    result = await deployed(appended, stack).ainvoke(the_input(appended, "claims"))
    humans = [m.content for m in result["messages"] if m.type == "human"]
    assert humans[1:] == ["remember to be nice!"] * 3


@pytest.mark.parametrize("name", ["runtime", "reducers"])
async def test_thread_state_keeps_the_state_keys(
    name: str,
    stack: ServiceProcesses,
    servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer],
) -> None:
    """``get_state(...).values`` of a thread has the custom keys, as LangGraph's, after
    a second run whose input keys join the thread's (a reducer adds to its value)."""
    case = CASES[name]
    config = {"configurable": {"thread_id": f"t-{unique_prefix()}"}}
    lc_agent = lc_create_agent(
        chat_model(servers[0]),
        tools=case.tools,
        store=InMemoryStore(),
        checkpointer=InMemorySaver(),
        **case.kwargs(),
    )
    agent = deployed(case, stack)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(2):
            await asyncio.to_thread(
                lc_agent.invoke, the_input(case, "thread"), config, context=case.context
            )
            await agent.ainvoke(the_input(case, "thread"), config, context=case.context)
        lc_values = lc_agent.get_state(config).values
    values = (await agent.aget_state(config)).values
    assert shape(values["messages"]) == shape(lc_values["messages"])
    assert state_keys(values) == state_keys(lc_values)


async def raised_everywhere(
    case: Case,
    expected: type[Exception],
    stack: ServiceProcesses,
    servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer],
) -> list[Exception]:
    """What the case raises through LangChain, deployed and embedded (in that order);
    each must raise ``expected`` (or a subclass)."""
    found: list[Exception] = []
    with pytest.raises(expected) as raised:
        await asyncio.to_thread(run_langchain, case, servers[0], "deployed")
    found.append(raised.value)
    with pytest.raises(expected) as raised:
        await deployed(case, stack).ainvoke(the_input(case, "deployed"))
    found.append(raised.value)
    with pytest.raises(expected) as raised:
        await embedded_agent(case, servers[1]).ainvoke(the_input(case, "embedded"))
    found.append(raised.value)
    return found


async def test_a_tool_middleware_add_that_nothing_runs_is_refused_as_langchain_refuses(
    stack: ServiceProcesses,
    servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer],
    embedded: None,
) -> None:
    raised, *ours = await raised_everywhere(UNKNOWN, ValueError, stack, servers)
    assert "Unknown tools: ['lucky_number']" in str(raised)
    # LangChain's error: the same type and message, deployed and embedded
    for failed in ours:
        assert type(failed) is ValueError
        assert str(raised) in str(failed)
    assert not requests_for(servers[1], UNKNOWN.prompt)  # the model was never called


async def test_two_updates_of_a_key_without_a_reducer_in_one_step_raise_as_langgraph_raises(
    stack: ServiceProcesses,
    servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer],
    embedded: None,
) -> None:
    """LangGraph's ``InvalidUpdateError`` (a key without a reducer takes one value per
    superstep), deployed and embedded: the same type and message, the same requests."""
    raised, *ours = await raised_everywhere(TWICE, InvalidUpdateError, stack, servers)
    assert "At key 'visits': Can receive only one value per step" in str(raised)
    for failed in ours:
        assert type(failed) is InvalidUpdateError
        assert str(failed) == str(raised)
    asked = len(requests_for(servers[0], f"{TWICE.prompt} deployed"))
    for where in ("deployed", "embedded"):
        assert len(requests_for(servers[1], f"{TWICE.prompt} {where}")) == asked == 1


async def test_a_context_that_does_not_fit_its_schema_raises_as_langchain_raises(
    stack: ServiceProcesses, servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer]
) -> None:
    case = CASES["dict_context"]
    bad = Case(case.prompt, case.kwargs, case.turns, context={"user": "u3"})
    with pytest.raises(TypeError) as raised:
        await asyncio.to_thread(run_langchain, bad, servers[0], "bad context")
    with pytest.raises(TypeError) as ours:
        await deployed(bad, stack).ainvoke(the_input(bad, "bad context"), context=bad.context)
    assert str(ours.value) == str(raised.value)
    assert not requests_for(servers[1], f"{case.prompt} bad context")


def test_schemas_that_cannot_travel_are_refused_in_one_line(redis_url: str) -> None:
    from services.errors import ConfigurationError
    from services.spec import local
    from services.spec.validation import check_deployable

    local_ref = local.register_instance(Caller)  # how embedded agents name it
    spec = create_agent("gpt-4o-mini", [], redis_url=redis_url).spec
    with pytest.raises(ConfigurationError, match="in-process object"):
        check_deployable(spec.model_copy(update={"context_schema": local_ref}))
    with pytest.raises(ConfigurationError, match="context does not fit"):
        check_deployable(
            spec.model_copy(
                update={"context_schema": "tests.runtime_tools:Caller", "context": {"x": 1}}
            )
        )
    with pytest.raises(ConfigurationError, match="'json' is not allowed"):
        check_deployable(spec.model_copy(update={"state_schema": "json:JSONDecoder"}))


class OneArgReducer(AgentState[Any]):
    """A reducer LangGraph refuses (it takes one argument, not two)."""

    kept: NotRequired[Annotated[list[str], len]]


def test_a_reducer_langgraph_refuses_is_refused_where_the_agent_is_made(embedded: None) -> None:
    with pytest.raises(ValueError) as raised:
        lc_create_agent(
            ChatOpenAI(model="gpt-4o-mini", api_key="test"), [], state_schema=OneArgReducer
        )
    with pytest.raises(ValueError) as ours:
        create_agent("gpt-4o-mini", [], state_schema=OneArgReducer)
    assert str(ours.value).endswith(str(raised.value))
    assert "Invalid reducer signature" in str(raised.value)
