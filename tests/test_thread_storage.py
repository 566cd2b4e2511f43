"""What a thread costs to keep, by its number of supersteps (LangGraph's checkpoints):
loopline keeps each superstep's events once (the runs' logs, the transcript) and folds
the checkpoints from them (``loopline.history``), so the bytes per checkpoint stay flat
from 10 to 500 supersteps; LangGraph's ``InMemorySaver`` stores the state at each one,
so its bytes per checkpoint grow with the thread. Measured with Redis's ``MEMORY USAGE``
of every key of the thread and its runs, and the saver's serialized bytes, on the same
scripted replies. ``-s`` prints the figures."""

from __future__ import annotations

import uuid
from typing import Any

from langchain.agents import create_agent as lc_create_agent
from langchain_openai import ChatOpenAI
from langgraph.checkpoint.memory import InMemorySaver

from contracts.replies import Reply, ScriptedToolCall
from loopline import create_agent
from loopline.history import ThreadHistory
from loopline.syncrun import run_sync
from loopline.testing.scripted import ScriptedOpenAIServer
from tests import tooling

SIZES = (10, 100, 500)


def RESPONDER(body: dict[str, Any]) -> Reply:
    """``rounds N`` asks for N tool rounds in one run: a call, its result, the next."""
    rounds = int(str(body["messages"][0]["content"]).split()[-1])
    done = sum(1 for m in body["messages"] if m["role"] == "tool")
    if done < rounds:
        return Reply(tool_calls=(ScriptedToolCall("add", {"a": done, "b": 2}),))
    return Reply(content=f"{done} rounds")


def model(server: ScriptedOpenAIServer) -> ChatOpenAI:
    return ChatOpenAI(model="gpt-4o-mini", base_url=server.url, api_key="test")


def run(agent: Any, supersteps: int) -> dict[str, Any]:
    """A run of about ``supersteps`` supersteps: input, start, then model and tools
    in turn."""
    config = {
        "configurable": {"thread_id": f"storage-{uuid.uuid4().hex[:8]}"},
        "recursion_limit": 10 * supersteps,
    }
    agent.invoke({"messages": f"rounds {(supersteps - 3) // 2}"}, config)
    return config


def loopline_bytes(agent: Any, config: dict[str, Any]) -> tuple[int, int]:
    """The bytes Redis holds for the thread and its runs, and its checkpoints: every key
    of the thread's hash tag (what a rewrite of its transcript keeps apart included) and
    every key of its runs."""
    thread_id = config["configurable"]["thread_id"]

    async def measure() -> tuple[int, int]:
        async with agent.client() as client:
            reader = client.threads()
            key = client.space.key(thread_id)
            pattern = client.names.thread_key(key, "*").replace("[", "\\[")
            keys = [k async for k in client.redis.scan_iter(match=pattern, count=1000)]
            assert set(client.names.thread_keys(key)) & {_text(k) for k in keys}
            for run_id in await reader.run_ids(thread_id):
                keys += client.names.task_keys(run_id)
            total = 0
            for name in keys:
                total += int(await client.redis.memory_usage(name, samples=0) or 0)
            made = await ThreadHistory(reader, agent.spec).checkpoints(thread_id)
            return total, len(made)

    return run_sync(agent._on_private_loop(measure()))  # type: ignore[no-any-return]


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def transcripts(agent: Any, config: dict[str, Any]) -> list[list[str]]:
    """Each run's transcript as the client reads it (``Client.messages``), oldest run
    first, each message's text."""
    thread_id = config["configurable"]["thread_id"]

    async def read() -> list[list[str]]:
        async with agent.client() as client:
            runs = await client.threads().run_ids(thread_id)
            return [[m.text() for m in await client.messages(run)] for run in runs]

    return run_sync(agent._on_private_loop(read()))  # type: ignore[no-any-return]


def saver_bytes(saver: InMemorySaver) -> tuple[int, int]:
    """The bytes LangGraph's saver holds (checkpoints, metadata, channel values,
    writes), and its checkpoints."""
    total, count = 0, 0
    for namespaces in saver.storage.values():
        for checkpoints in namespaces.values():
            for (_, data), (_, meta), _parent in checkpoints.values():
                total += len(data) + len(meta)
                count += 1
    total += sum(len(data) for _, data in saver.blobs.values())
    total += sum(len(w[2][1]) for writes in saver.writes.values() for w in writes.values())
    return total, count


def test_a_threads_storage_is_linear_in_its_supersteps(
    embedded: None, servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer]
) -> None:
    ours, theirs = [], []
    for size in SIZES:
        ll = create_agent(model(servers[1]), [tooling.add], checkpointer=InMemorySaver())
        total, count = loopline_bytes(ll, run(ll, size))
        ours.append(total / count)
        saver = InMemorySaver()
        run(lc_create_agent(model(servers[0]), [tooling.add], checkpointer=saver), size)
        lc_total, lc_count = saver_bytes(saver)
        assert lc_count == count  # the same checkpoints on both sides
        theirs.append(lc_total / lc_count)
        print(
            f"{count} checkpoints: loopline {total} B ({total / count:.0f} B each), "
            f"LangGraph InMemorySaver {lc_total} B ({lc_total / lc_count:.0f} B each)"
        )
    # flat per checkpoint: linear in the thread's length (within 25% from 100 to 500)
    assert ours[2] <= ours[1] * 1.25, ours
    assert ours[2] <= ours[0] * 1.25, ours
    # where LangGraph's saver grows with the length (the whole state at each)
    assert theirs[2] > theirs[1] * 3 > theirs[0] * 3, theirs


def test_a_threads_storage_over_many_turns_is_linear(
    embedded: None, servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer]
) -> None:
    """Each run of a thread starts from the thread's whole transcript; once it ended it
    keeps where to read it in the thread's, not a copy, so N turns cost N turns' bytes
    (a copy per run, kept for the retention time, cost the square: 3.2, 6.7, 15.1 KB
    per checkpoint at 4, 33, 100 turns). Every run's transcript still reads whole."""
    per_checkpoint = []
    for turns in (10, 40):
        ll = create_agent(model(servers[1]), [tooling.add], checkpointer=InMemorySaver())
        config = {"configurable": {"thread_id": f"turns-{uuid.uuid4().hex[:8]}"}}
        for _ in range(turns):  # input, start, model: three checkpoints a turn
            ll.invoke({"messages": "rounds 0"}, config)
        total, count = loopline_bytes(ll, config)
        assert count == 3 * turns
        per_checkpoint.append(total / count)
        print(f"{count} checkpoints over {turns} turns: {total} B ({total / count:.0f} B each)")
        read = transcripts(ll, config)
        assert [len(t) for t in read] == [2 * (n + 1) for n in range(turns)]
        assert read[-1][:2] == ["rounds 0", "0 rounds"]
    assert per_checkpoint[1] <= per_checkpoint[0] * 1.25, per_checkpoint


def test_an_ended_runs_transcript_outlives_a_rewrite_of_its_threads(
    embedded: None, servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer]
) -> None:
    """``update_state`` that changes a message the runs had (not only appends) moves the
    thread's transcript on; the runs that ended before still read theirs, from the list
    kept apart, which goes with the thread."""
    from langchain_core.messages import AIMessage, HumanMessage

    ll = create_agent(model(servers[1]), [tooling.add], checkpointer=InMemorySaver())
    thread_id = f"rewrite-{uuid.uuid4().hex[:8]}"
    config = {"configurable": {"thread_id": thread_id}}
    ll.invoke({"messages": "rounds 0"}, config)
    ll.invoke({"messages": "rounds 1"}, config)
    first_reply = ll.get_state(config).values["messages"][1]
    ll.update_state(config, {"messages": [AIMessage("edited", id=first_reply.id)]})
    ll.update_state(config, {"messages": [HumanMessage("appended")]})  # appends: kept in place
    ll.invoke({"messages": "rounds 0"}, config)

    # the responder answers by the thread's first message: "0 rounds" each turn
    before = [["rounds 0", "0 rounds"], ["rounds 0", "0 rounds", "rounds 1", "0 rounds"]]
    read = transcripts(ll, config)
    assert read[:2] == before
    edited = ["rounds 0", "edited", "rounds 1", "0 rounds", "appended", "rounds 0", "0 rounds"]
    assert read[2] == edited

    async def kept_then_removed() -> tuple[list[str], list[str]]:
        async with ll.client() as client:
            key = client.space.key(thread_id)
            pattern = client.names.thread_messages(key) + "@*"
            kept = [_text(k) async for k in client.redis.scan_iter(match=pattern)]
            assert await client.threads().remove(thread_id)
            left = [_text(k) async for k in client.redis.scan_iter(match=pattern)]
            return kept, left

    kept, left = run_sync(ll._on_private_loop(kept_then_removed()))
    assert kept == [f"{kept[0].rpartition('@')[0]}@0"]  # one rewrite: epoch 0 kept
    assert left == []
