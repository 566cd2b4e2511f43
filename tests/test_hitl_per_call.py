"""Per-call human in the loop (``HumanInTheLoopMiddleware(interrupt_mode="per_call")``) on
the bus: a gated call's interrupt in the tools consumer parks that call with nothing held,
the step's other calls go on, every service may restart while it waits, and a decision
(CLI or API) resumes it exactly as LangChain resumes ``Command(resume={id: decision})``."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
from langchain.agents import create_agent as lc_create_agent
from langchain.agents.middleware import HumanInTheLoopMiddleware as LcHITL
from langchain_core.messages import HumanMessage as LcHumanMessage
from langchain_openai import ChatOpenAI
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from contracts import ApprovalRequested, HumanMessage, TaskCompleted
from contracts.agent import AgentSpec
from contracts.events import (
    ToolCompleted,
    ToolInterrupted,
    ToolRequested,
    ToolResumed,
    parse_event,
)
from contracts.streams import DATA_FIELD, GROUPS, Names
from loopline.agentfile import agent_from_dict
from loopline.client import Client
from loopline.testing.scripted import Reply, ScriptedOpenAIServer, ScriptedToolCall
from tests import tooling
from tests.support import (
    ServiceProcesses,
    restart,
    run_cli,
    wait_for,
)

pytestmark = pytest.mark.asyncio(loop_scope="module")

RECORD = f"/tmp/loopline-per-call-{uuid.uuid4().hex}.jsonl"  # the tool's side effects
EDIT_TURNS = [
    Reply(
        tool_calls=(
            ScriptedToolCall("add", {"a": 1, "b": 2}),
            ScriptedToolCall("big_output", {"n": 3}),
        )
    ),
    Reply(content="the sum is what the tool said"),
]
REJECT_TURNS = [
    Reply(tool_calls=(ScriptedToolCall("add", {"a": 5, "b": 6}),)),
    Reply(content="understood, not adding"),
]
RESPOND_TURNS = [
    Reply(tool_calls=(ScriptedToolCall("add", {"a": 7, "b": 8}),)),
    Reply(content="the human answered for the tool"),
]
TWO_TURNS = [
    Reply(
        tool_calls=(
            ScriptedToolCall("slow_effect", {"tag": "A", "seconds": 0.05, "record": RECORD}),
            ScriptedToolCall("add", {"a": 2, "b": 3}),
        )
    ),
    Reply(content="one ran, one did not"),
]
EDIT = {"name": "add", "args": {"a": 10, "b": 20}}
REJECT = {"type": "reject", "message": "not today"}
RESPOND = {"type": "respond", "message": "fifteen, says the human"}
GATED = {"add": True, "slow_effect": {"allowed_decisions": ["approve", "reject"]}}


SCRIPTS = {
    "edit-pc": EDIT_TURNS,
    "reject-pc": REJECT_TURNS,
    "respond-pc": RESPOND_TURNS,
    "two-pc": TWO_TURNS,
}


def spec() -> AgentSpec:
    made, _ = agent_from_dict(
        {
            "model": "gpt-4o-mini",
            "tools": ["tests.tooling:add", "tests.tooling:big_output", "tests.tooling:slow_effect"],
            "middleware": [
                {
                    "type": "HumanInTheLoopMiddleware",
                    "interrupt_on": GATED,
                    "interrupt_mode": "per_call",
                }
            ],
        }
    )
    return made


async def langchain_run(server: ScriptedOpenAIServer, prompt: str, decide: Any) -> dict[str, Any]:
    """LangChain's own agent, paused and resumed by interrupt id with ``decide(value)``."""
    agent = lc_create_agent(
        ChatOpenAI(model="gpt-4o-mini", base_url=server.url, api_key="test"),
        tools=[tooling.add, tooling.big_output, tooling.slow_effect],
        middleware=[LcHITL(interrupt_on=GATED, interrupt_mode="per_call")],  # type: ignore[arg-type]
        checkpointer=InMemorySaver(),
    )
    config: Any = {"configurable": {"thread_id": "t1"}}
    first = await agent.ainvoke({"messages": [LcHumanMessage(content=prompt)]}, config)
    answers = {i.id: decide(i.value) for i in first["__interrupt__"]}
    resumed: dict[str, Any] = await agent.ainvoke(Command(resume=answers), config)
    assert "__interrupt__" not in resumed
    return resumed


async def settled(redis: aioredis.Redis, names: Names) -> None:
    """Nothing pending and nothing unread in any consumer group: no compute is held."""

    async def idle() -> bool:
        for service in ("loop", "context", "model", "tools", "todos"):
            for stream in names.inputs_of(service):
                if not await redis.exists(stream):
                    continue
                for group in await redis.xinfo_groups(stream):
                    if group["name"].decode() != GROUPS[service]:
                        continue
                    if group["pending"] or group.get("lag"):
                        return False
        return True

    await wait_for(idle, timeout=20)


async def log_of(client: Client, task_id: str) -> list[Any]:
    return [event async for _, event in client.events(task_id, follow=False)]


async def approvals_of(client: Client, task_id: str) -> list[ApprovalRequested]:
    return [
        e
        async for _, e in client.subscribe("approvals", from_start=True, follow=False)
        if isinstance(e, ApprovalRequested) and e.task_id == task_id
    ]


def last_request(server: ScriptedOpenAIServer, prompt: str) -> list[Any]:
    return [r for r in server.chat_requests() if prompt in str(r["messages"])][-1]["messages"]


def tool_texts(messages: list[Any]) -> dict[str, str]:
    return {m.tool_call_id: str(m.content) for m in messages if m.type == "tool"}


async def finish_with(
    client: Client, task_id: str, decision: dict[str, Any]
) -> tuple[list[str], list[Any]]:
    """Answer the one waiting call; the calls answered and the finished transcript."""
    answered = await client.decide(task_id, decision)
    done = await client.wait(task_id)
    assert isinstance(done, TaskCompleted)
    return answered, await client.messages(task_id)


async def test_gated_call_waits_alone_survives_restarts_and_resumes_edited(
    stack: ServiceProcesses, servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer]
) -> None:
    prompt = f"edit-pc {uuid.uuid4()}"
    lc_result = await langchain_run(
        servers[0], prompt, lambda _: {"type": "edit", "edited_action": EDIT}
    )
    names = Names(stack.prefix)
    async with Client(stack.redis_url, stack.prefix) as client:
        task_id = await client.submit(spec(), [HumanMessage(content=prompt)])
        _, outcome = await client.outcome(task_id)
        assert isinstance(outcome, ApprovalRequested)
        request = outcome.request
        assert request["type"] == "tool_approval"
        assert (request["name"], request["args"]) == ("add", {"a": 1, "b": 2})
        gated_id = request["tool_call_id"]

        # the step's other call is not held up by the waiting one
        async def other_done() -> bool:
            return any(
                isinstance(e, ToolCompleted) and e.message.tool_call_id != gated_id
                for e in await log_of(client, task_id)
            )

        await wait_for(other_done, timeout=20)

        # a duplicate of the gated call's request neither runs it nor asks again
        state: Any = await client.redis.hget(names.task_state(task_id), "agent")
        ai = (await client.messages(task_id))[-1]
        call = next(c for c in ai.tool_calls if c.id == gated_id)  # type: ignore[attr-defined]
        dup = ToolRequested(task_id=task_id, step=1, agent_id=state.decode(), call=call)
        await client.redis.xadd(names.tools, {DATA_FIELD: dup.model_dump_json()})
        await settled(client.redis, names)
        asked = [e for e in await log_of(client, task_id) if isinstance(e, ApprovalRequested)]
        assert len(asked) == 1
        assert len(await approvals_of(client, task_id)) == 1
        assert len(await client.messages(task_id)) == 2  # the prompt and the model's turn

        for service in ("tools", "loop", "model"):
            restart(stack, service)

        listed = run_cli(stack, "approvals", "--json")
        assert listed.returncode == 0, listed.stderr
        rows = [json.loads(line) for line in listed.stdout.splitlines() if task_id in line]
        assert [r["request"]["tool_call_id"] for r in rows] == [gated_id]

        decided = run_cli(stack, "decide", task_id, "--edit", json.dumps(EDIT["args"]))
        assert decided.returncode == 0, decided.stderr
        assert "the sum is what the tool said" in decided.stdout

        done = await client.wait(task_id)
        assert isinstance(done, TaskCompleted)
        messages = await client.messages(task_id)
        log = await log_of(client, task_id)

    assert tool_texts(messages) == tool_texts(lc_result["messages"])
    assert (
        'Executed instead: add with arguments {"a": 10, "b": 20}' in tool_texts(messages)[gated_id]
    )
    assert tool_texts(messages)[gated_id].endswith("Tool response:\n30")
    assert sum(isinstance(e, ToolCompleted) for e in log) == 2
    # the model's last request is the one LangChain's own agent sent
    assert last_request(servers[1], prompt) == last_request(servers[0], prompt)


async def test_rejected_call_tells_the_model_as_langchain_does(
    stack: ServiceProcesses, servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer]
) -> None:
    prompt = f"reject-pc {uuid.uuid4()}"
    lc_result = await langchain_run(servers[0], prompt, lambda _: REJECT)
    async with Client(stack.redis_url, stack.prefix) as client:
        task_id = await client.submit(spec(), [HumanMessage(content=prompt)])
        _, outcome = await client.outcome(task_id)
        assert isinstance(outcome, ApprovalRequested)
        # a decision the call does not allow is refused; the call waits for another one
        after = await client.last_entry(task_id)
        answered = await client.decide(task_id, {"type": "bogus"})
        _, refusal = await client.outcome_of_decisions(task_id, answered, after=after)
        assert isinstance(refusal, ToolInterrupted) and refusal.error
        assert [r.request["tool_call_id"] for r in await client.waiting_calls(task_id)] == answered

        answered, messages = await finish_with(client, task_id, REJECT)
    assert tool_texts(messages) == tool_texts(lc_result["messages"])
    assert "not today" in tool_texts(messages)[answered[0]]
    assert last_request(servers[1], prompt) == last_request(servers[0], prompt)


async def test_a_human_answering_for_the_tool_is_what_the_model_gets(
    stack: ServiceProcesses, servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer]
) -> None:
    prompt = f"respond-pc {uuid.uuid4()}"
    lc_result = await langchain_run(servers[0], prompt, lambda _: RESPOND)
    async with Client(stack.redis_url, stack.prefix) as client:
        task_id = await client.submit(spec(), [HumanMessage(content=prompt)])
        _, outcome = await client.outcome(task_id)
        assert isinstance(outcome, ApprovalRequested)
        assert outcome.request["args"] == {"a": 7, "b": 8}
        answered, messages = await finish_with(client, task_id, RESPOND)
    # the tool did not run (it would have said 15): the human's words are its result,
    # a success, as LangChain's own agent records them
    assert tool_texts(messages) == tool_texts(lc_result["messages"])
    assert tool_texts(messages)[answered[0]] == RESPOND["message"]
    ours = next(m for m in messages if m.type == "tool")
    theirs = next(m for m in lc_result["messages"] if m.type == "tool")
    assert ours.status == theirs.status == "success"
    assert last_request(servers[1], prompt) == last_request(servers[0], prompt)


async def test_two_gated_calls_are_answered_one_by_one_by_call_id(
    stack: ServiceProcesses,
    servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer],
) -> None:
    prompt = f"two-pc {uuid.uuid4()}"

    def lc_decide(value: dict[str, Any]) -> dict[str, Any]:
        return {"type": "approve"} if value["name"] == "slow_effect" else REJECT

    lc_result = await langchain_run(servers[0], prompt, lc_decide)
    names = Names(stack.prefix)
    async with Client(stack.redis_url, stack.prefix) as client:
        task_id = await client.submit(spec(), [HumanMessage(content=prompt)])

        async def both_wait() -> list[ApprovalRequested] | None:
            found = await client.waiting_calls(task_id)
            return found if len(found) == 2 else None

        waiting = await wait_for(both_wait, timeout=30)
        ids = {r.request["name"]: r.request["tool_call_id"] for r in waiting}

        unnamed = run_cli(stack, "decide", task_id, "--approve")
        assert unnamed.returncode != 0 and ids["add"] in unnamed.stderr

        after = await client.last_entry(task_id)
        answered = await client.decide(task_id, {ids["slow_effect"]: {"type": "approve"}})
        _, still = await client.outcome_of_decisions(task_id, answered, after=after)
        assert isinstance(still, ApprovalRequested)
        assert still.request["tool_call_id"] == ids["add"]

        # a duplicate decision after the call ran does not run it again
        raw: Any = await client.redis.hget(
            names.task_state(task_id), f"wait:1:{ids['slow_effect']}"
        )
        parked = parse_event(raw)
        assert isinstance(parked, ToolInterrupted)
        again = ToolResumed(
            task_id=task_id,
            step=1,
            agent_id=parked.agent_id,
            call=parked.call,
            decision={"type": "approve"},
        )
        await client.redis.xadd(names.tools, {DATA_FIELD: again.model_dump_json()})
        await settled(client.redis, names)

        decided = run_cli(stack, "decide", task_id, "--call", ids["add"], "--reject", "not today")
        assert decided.returncode == 0, decided.stderr
        assert "one ran, one did not" in decided.stdout
        messages = await client.messages(task_id)
        log = await log_of(client, task_id)

    starts = [
        json.loads(line)
        for line in Path(RECORD).read_text().splitlines()
        if json.loads(line)["what"] == "start"
    ]
    assert len(starts) == 2  # LangChain's run and loopline's: once each
    assert sum(isinstance(e, ToolCompleted) for e in log) == 2
    assert tool_texts(messages) == tool_texts(lc_result["messages"])
    assert last_request(servers[1], prompt) == last_request(servers[0], prompt)
