"""loopline's ``TodoListMiddleware``, ``ContextEditingMiddleware`` and ``ClearToolUsesEdit``
are LangChain's middleware: the same classes' attributes and in-process behaviour (LangChain's
``create_agent`` runs them as its own), the texts LangChain's, and the model sees the same
requests when loopline's services run them natively."""

from __future__ import annotations

import uuid
import warnings
from collections.abc import Sequence
from typing import Any

import pytest
from langchain.agents import create_agent as lc_create_agent
from langchain.agents.middleware import AgentMiddleware
from langchain.agents.middleware import todo as lc_todo
from langchain.agents.middleware.context_editing import (
    DEFAULT_TOOL_PLACEHOLDER,
)
from langchain.agents.middleware.context_editing import (
    ClearToolUsesEdit as LcClearToolUsesEdit,
)
from langchain.agents.middleware.context_editing import (
    ContextEditingMiddleware as LcContextEditingMiddleware,
)
from langchain.agents.middleware.types import ModelRequest, ModelResponse
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.utils.function_calling import convert_to_openai_tool
from langchain_openai import ChatOpenAI
from langgraph.prebuilt import tool_node

from contracts.agent import AgentSpec, ModelSpec
from contracts.messages import from_langchain
from loopline.middleware import (
    ClearToolUsesEdit,
    ContextEditingMiddleware,
    TodoListMiddleware,
    to_spec,
)
from loopline.testing.scripted import Reply, ScriptedOpenAIServer, ScriptedToolCall
from services import tool_errors
from services.editing.engine import ClearToolUses
from services.middleware.todo import parallel_write_todos_error
from services.tasks.plan import after_model_results
from tests import tooling
from tests.support import embedded_agent

SYSTEM_PROMPT = "You are a meticulous assistant."


def todos(*items: tuple[str, str]) -> dict[str, Any]:
    return {"todos": [{"content": c, "status": s} for c, s in items]}


TURNS = [
    Reply(
        tool_calls=(
            ScriptedToolCall("write_todos", todos(("fetch", "in_progress"), ("sum", "pending"))),
            ScriptedToolCall("add", {"a": 1, "b": 2}),
        )
    ),
    Reply(
        tool_calls=(
            ScriptedToolCall("write_todos", todos(("fetch", "completed"))),
            ScriptedToolCall("write_todos", todos(("sum", "completed"))),
            ScriptedToolCall("big_output", {"n": 900}),
        )
    ),
    Reply(tool_calls=(ScriptedToolCall("big_output", {"n": 1100}),)),
    Reply(
        tool_calls=(
            ScriptedToolCall("write_todos", todos(("fetch", "completed"), ("sum", "completed"))),
        )
    ),
    Reply(content="All done: 3."),
]
SCRIPTS = {"native": TURNS, "custom edit": TURNS}


def thread() -> Any:
    return {"configurable": {"thread_id": f"native-{uuid.uuid4()}"}}


EDIT = {"trigger": 500, "keep": 1, "clear_tool_inputs": True}


class DropToolOutputs:
    """A ``ContextEdit`` of the user's own (not one the context service implements)."""

    def apply(self, messages: list[AnyMessage], *, count_tokens: Any) -> None:
        for index, message in enumerate(messages[:-1]):
            if isinstance(message, ToolMessage):
                messages[index] = message.model_copy(update={"content": "dropped"})


def captured_request(middleware: Any, request: ModelRequest[Any]) -> ModelRequest[Any]:
    """The request ``middleware.wrap_model_call`` hands the model."""
    seen: list[ModelRequest[Any]] = []

    def handler(r: ModelRequest[Any]) -> ModelResponse[Any]:
        seen.append(r)
        return ModelResponse(result=[])

    middleware.wrap_model_call(request, handler)
    return seen[0]


async def acaptured_request(middleware: Any, request: ModelRequest[Any]) -> ModelRequest[Any]:
    seen: list[ModelRequest[Any]] = []

    async def handler(r: ModelRequest[Any]) -> ModelResponse[Any]:
        seen.append(r)
        return ModelResponse(result=[])

    await middleware.awrap_model_call(request, handler)
    return seen[0]


def conversation(outputs: int = 6, size: int = 400) -> list[AnyMessage]:
    messages: list[AnyMessage] = [HumanMessage("hi", id="h")]
    for i in range(outputs):
        name = ("search", "add", "fetch")[i % 3]
        call = {"id": f"c{i}", "name": name, "args": {"i": i}}
        messages.append(AIMessage("", id=f"a{i}", tool_calls=[call]))
        messages.append(ToolMessage("x" * size, tool_call_id=f"c{i}", name=name, id=f"t{i}"))
    return messages


def request_of(
    messages: Sequence[AnyMessage], system: SystemMessage | None = None
) -> ModelRequest[Any]:
    return ModelRequest(model=None, messages=list(messages), system_message=system)  # type: ignore[arg-type]


@pytest.mark.fast
def test_the_classes_are_langchains() -> None:
    todo, editing = TodoListMiddleware(), ContextEditingMiddleware()
    assert isinstance(todo, lc_todo.TodoListMiddleware) and isinstance(todo, AgentMiddleware)
    assert isinstance(editing, LcContextEditingMiddleware)
    assert isinstance(editing.edits[0], LcClearToolUsesEdit)
    lc_editing = LcContextEditingMiddleware()
    assert (todo.name, editing.name) == ("TodoListMiddleware", "ContextEditingMiddleware")
    assert todo.state_schema is lc_todo.PlanningState
    assert editing.state_schema is lc_editing.state_schema
    assert (editing.token_count_method, editing.token_counter) == ("approximate", None)
    assert editing.edits[0].trigger == lc_editing.edits[0].trigger  # type: ignore[attr-defined]
    # LangChain's editing middleware declares no tools at all (create_agent reads none)
    assert not hasattr(editing, "tools") and not hasattr(lc_editing, "tools")


@pytest.mark.fast
@pytest.mark.parametrize("description", [None, "Keep a list of what is left to do."])
def test_write_todos_is_langchains_tool(description: str | None) -> None:
    kwargs = {} if description is None else {"tool_description": description}
    ours, theirs = TodoListMiddleware(**kwargs).tools, lc_todo.TodoListMiddleware(**kwargs).tools
    assert [t.name for t in ours] == [t.name for t in theirs] == ["write_todos"]
    assert ours[0].description == theirs[0].description
    assert ours[0].description == (description or lc_todo.WRITE_TODOS_TOOL_DESCRIPTION)
    assert ours[0].args_schema is theirs[0].args_schema is lc_todo.WriteTodosInput
    # the schema the services send for the agent is that of LangChain's tool
    assert TodoListMiddleware(**kwargs).tool_schema() == convert_to_openai_tool(theirs[0])


@pytest.mark.fast
def test_texts_are_imported_from_langchain() -> None:
    import services.editing.engine as engine
    import services.middleware.todo as todo

    assert todo.WRITE_TODOS_SYSTEM_PROMPT is lc_todo.WRITE_TODOS_SYSTEM_PROMPT
    assert todo.WRITE_TODOS_TOOL_DESCRIPTION is lc_todo.WRITE_TODOS_TOOL_DESCRIPTION
    assert todo.Todo is lc_todo.Todo
    assert ClearToolUsesEdit().placeholder == DEFAULT_TOOL_PLACEHOLDER
    assert engine.ClearToolUses().placeholder == DEFAULT_TOOL_PLACEHOLDER
    assert tool_errors.TOOL_INVOCATION_ERROR_TEMPLATE is tool_node.TOOL_INVOCATION_ERROR_TEMPLATE
    assert (
        tool_errors.INVALID_TOOL_NAME_ERROR_TEMPLATE is tool_node.INVALID_TOOL_NAME_ERROR_TEMPLATE
    )


SYSTEMS = {
    "none": None,
    "text": SystemMessage(SYSTEM_PROMPT),
    "blocks": SystemMessage([{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]),
}


@pytest.mark.fast
@pytest.mark.parametrize("system", list(SYSTEMS))
@pytest.mark.parametrize("prompt", [None, "Plan first."])
async def test_the_model_gets_langchains_system_message(system: str, prompt: str | None) -> None:
    kwargs = {} if prompt is None else {"system_prompt": prompt}
    request = request_of([HumanMessage("hi")], SYSTEMS[system])
    ours, theirs = TodoListMiddleware(**kwargs), lc_todo.TodoListMiddleware(**kwargs)
    expected = captured_request(theirs, request).system_message
    assert expected is not None
    assert captured_request(ours, request).system_message == expected
    assert (await acaptured_request(ours, request)).system_message == expected
    assert (prompt or lc_todo.WRITE_TODOS_SYSTEM_PROMPT) in expected.text


@pytest.mark.fast
async def test_parallel_write_todos_are_refused_as_langchain_refuses_them() -> None:
    calls = [
        {"id": "w1", "name": "write_todos", "args": todos(("a", "pending"))},
        {"id": "x", "name": "add", "args": {"a": 1, "b": 2}},
        {"id": "w2", "name": "write_todos", "args": todos(("b", "pending"))},
    ]
    state: Any = {"messages": [HumanMessage("hi"), AIMessage("", tool_calls=calls)]}
    expected = lc_todo.TodoListMiddleware().after_model(state, None)  # type: ignore[arg-type]
    assert expected is not None
    assert TodoListMiddleware().after_model(state, None) == expected  # type: ignore[arg-type]
    assert await TodoListMiddleware().aafter_model(state, None) == expected  # type: ignore[arg-type]
    # the loop service, which runs the hook natively, answers the same
    spec = AgentSpec(model=ModelSpec(name="m"), middleware=[TodoListMiddleware().to_spec()])
    answers = after_model_results(spec, from_langchain(state["messages"][1]))  # type: ignore[arg-type]
    assert {k: (v.content, v.status) for k, v in answers.items()} == {
        m.tool_call_id: (m.content, m.status) for m in expected["messages"]
    }
    assert parallel_write_todos_error() == expected["messages"][0].content


EDITS: dict[str, dict[str, Any]] = {
    "below trigger": {"trigger": 100_000},
    "defaults over trigger": {"trigger": 100},
    "keep and inputs": {"trigger": 200, "keep": 2, "clear_tool_inputs": True},
    "exclude": {"trigger": 200, "keep": 1, "exclude_tools": ("add",)},
    "at least": {"trigger": 200, "keep": 0, "clear_at_least": 150},
    "placeholder": {"trigger": 200, "placeholder": "[gone]"},
}


@pytest.mark.fast
@pytest.mark.parametrize("edit", list(EDITS))
async def test_context_edits_in_process_are_langchains(edit: str) -> None:
    messages = conversation()
    request = request_of(messages)
    lc = LcContextEditingMiddleware(edits=[LcClearToolUsesEdit(**EDITS[edit])])
    expected = captured_request(lc, request).messages
    ours = ContextEditingMiddleware(edits=[ClearToolUsesEdit(**EDITS[edit])])
    assert captured_request(ours, request).messages == expected
    assert (await acaptured_request(ours, request)).messages == expected
    # LangChain's edit given to loopline's class, and the engine the services run
    assert captured_request(ContextEditingMiddleware(edits=lc.edits), request).messages == expected
    assert ours.edit(messages) == expected
    assert messages == conversation()  # the state's messages are left as they were
    if edit != "below trigger":
        assert expected != messages


@pytest.mark.fast
def test_a_custom_token_counter_decides_as_in_langchain() -> None:
    request = request_of(conversation(size=10))

    def count(messages: Sequence[Any]) -> int:
        return 1000 * len(messages)  # far above the trigger, where the approximation is not

    edit: dict[str, Any] = {"trigger": 5000, "keep": 1}
    lc = LcContextEditingMiddleware(edits=[LcClearToolUsesEdit(**edit)], token_counter=count)
    ours = ContextEditingMiddleware(edits=[ClearToolUsesEdit(**edit)], token_counter=count)
    expected = captured_request(lc, request).messages
    assert sum(m.content == DEFAULT_TOOL_PLACEHOLDER for m in expected) == 5
    assert captured_request(ours, request).messages == expected


@pytest.mark.fast
def test_include_tools_narrows_the_edit_in_process_as_in_the_services() -> None:
    messages = conversation()
    edit = ClearToolUsesEdit(trigger=200, keep=1, include_tools=("search", "fetch"))
    ours = ContextEditingMiddleware(edits=[edit])
    in_process = captured_request(ours, request_of(messages)).messages
    assert in_process == ours.edit(messages)  # the context service's engine
    cleared = {m.name for m in in_process if m.content == DEFAULT_TOOL_PLACEHOLDER}
    assert cleared == {"search", "fetch"}
    assert edit.engine_edit() == ClearToolUses(
        trigger=200, keep=1, include_tools=("search", "fetch")
    )


@pytest.mark.fast
def test_langchains_and_loopline_instances_travel_alike() -> None:
    edit: dict[str, Any] = {"trigger": 10, "keep": 1, "exclude_tools": ("a",)}
    ours = to_spec(ContextEditingMiddleware(edits=[ClearToolUsesEdit(**edit)]))
    theirs = to_spec(LcContextEditingMiddleware(edits=[LcClearToolUsesEdit(**edit)]))
    assert ours == theirs and ours.type == "ContextEditingMiddleware"
    assert ours.params["edits"][0]["exclude_tools"] == ["a"]
    assert ours.params["edits"][0]["trigger"] == 10
    prompt = {"system_prompt": "plan!", "tool_description": "todos"}
    assert to_spec(TodoListMiddleware(**prompt)) == to_spec(lc_todo.TodoListMiddleware(**prompt))
    assert to_spec(TodoListMiddleware()).params == {}


@pytest.mark.fast
@pytest.mark.parametrize("cls", [ContextEditingMiddleware, LcContextEditingMiddleware])
def test_an_edit_the_services_lack_runs_embedded_and_is_refused_deployed(cls: Any) -> None:
    middleware = cls(edits=[DropToolOutputs()])
    assert to_spec(middleware, embedded=True).type.startswith("local:")
    with pytest.raises(ValueError, match="implements ClearToolUsesEdit only"):
        to_spec(middleware)


def _lc_run(server: ScriptedOpenAIServer, prompt: str, middleware: list[Any]) -> dict[str, Any]:
    agent = lc_create_agent(
        ChatOpenAI(model="gpt-4o-mini", base_url=server.url, api_key="test"),
        tools=[tooling.big_output, tooling.add],
        system_prompt=SYSTEM_PROMPT,
        middleware=middleware,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result: dict[str, Any] = agent.invoke({"messages": [HumanMessage(prompt)]})
    return result


def _requests(server: ScriptedOpenAIServer, prompt: str) -> list[dict[str, Any]]:
    """The requests of one run, its prompt blanked so runs with different prompts compare."""
    found = [r for r in server.chat_requests() if r["messages"][1]["content"] == prompt]
    for request in found:
        request["messages"][1]["content"] = "<prompt>"
    return found


def _assert_same_requests(expected: list[dict[str, Any]], got: list[dict[str, Any]]) -> None:
    assert len(got) == len(expected) == len(TURNS)
    for step, (theirs, ours) in enumerate(zip(expected, got, strict=True), 1):
        assert ours["messages"] == theirs["messages"], f"step {step}: messages differ"
        assert ours["tools"] == theirs["tools"], f"step {step}: tool schemas differ"


async def test_langchain_and_loopline_run_loopline_middleware_as_langchains(
    redis_url: str, monkeypatch: pytest.MonkeyPatch, scripted: ScriptedOpenAIServer
) -> None:
    """The same agent three times on the same replies: LangChain's create_agent with
    LangChain's classes, LangChain's create_agent with loopline's (in-process, as any
    AgentMiddleware), and loopline's agent with loopline's (the services run them
    natively). The model sees the same requests; the todo lists end the same."""

    def langchains() -> list[Any]:
        edit = LcClearToolUsesEdit(**EDIT)  # type: ignore[arg-type]
        return [lc_todo.TodoListMiddleware(), LcContextEditingMiddleware(edits=[edit])]

    def looplines() -> list[Any]:
        edit = ClearToolUsesEdit(**EDIT)  # type: ignore[arg-type]
        return [TodoListMiddleware(), ContextEditingMiddleware(edits=[edit])]

    reference = _lc_run(scripted, "native langchain", langchains())
    in_langchain = _lc_run(scripted, "native in langchain", looplines())
    agent = embedded_agent(
        redis_url,
        monkeypatch,
        scripted,
        tools=[tooling.big_output, tooling.add],
        system_prompt=SYSTEM_PROMPT,
        middleware=looplines(),
    )
    assert [m.type for m in agent.spec.middleware] == [
        "TodoListMiddleware",
        "ContextEditingMiddleware",
    ]  # run natively by the services, not as in-process hooks
    on_loopline = await agent.ainvoke({"messages": [HumanMessage("native loopline")]}, thread())

    expected = _requests(scripted, "native langchain")
    _assert_same_requests(expected, _requests(scripted, "native in langchain"))
    _assert_same_requests(expected, _requests(scripted, "native loopline"))
    # the scenario exercised what it claims: the prompt, the refusal, the edits
    system = "".join(block["text"] for block in expected[0]["messages"][0]["content"])
    assert SYSTEM_PROMPT in system and lc_todo.WRITE_TODOS_SYSTEM_PROMPT in system
    assert expected[0]["tools"][0]["function"]["description"] == (
        lc_todo.WRITE_TODOS_TOOL_DESCRIPTION
    )
    assert DEFAULT_TOOL_PLACEHOLDER in str(expected[3]["messages"])
    for result in (reference, in_langchain, on_loopline):
        refused = [m for m in result["messages"] if getattr(m, "status", None) == "error"]
        assert [m.content for m in refused] == [parallel_write_todos_error()] * 2
    final = todos(("fetch", "completed"), ("sum", "completed"))["todos"]
    assert reference["todos"] == in_langchain["todos"] == on_loopline["todos"] == final
    assert on_loopline["messages"][-1].content == reference["messages"][-1].content


async def test_an_edit_of_the_users_own_runs_embedded_as_in_langchain(
    redis_url: str, monkeypatch: pytest.MonkeyPatch, scripted: ScriptedOpenAIServer
) -> None:
    """A ContextEdit loopline's context service does not implement: embedded, the
    middleware runs in-process as LangChain's, and the model sees what it sees there."""
    reference = _lc_run(
        scripted, "custom edit langchain", [LcContextEditingMiddleware(edits=[DropToolOutputs()])]
    )
    agent = embedded_agent(
        redis_url,
        monkeypatch,
        scripted,
        tools=[tooling.big_output, tooling.add],
        system_prompt=SYSTEM_PROMPT,
        middleware=[ContextEditingMiddleware(edits=[DropToolOutputs()])],
    )
    result = await agent.ainvoke({"messages": [HumanMessage("custom edit loopline")]}, thread())

    expected = _requests(scripted, "custom edit langchain")
    _assert_same_requests(expected, _requests(scripted, "custom edit loopline"))
    assert "dropped" in str(expected[3]["messages"])
    assert result["messages"][-1].content == reference["messages"][-1].content
