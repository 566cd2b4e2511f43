"""SummarizationMiddleware never separates a tool result from its tool call: a property
test on random conversations, and the partial-overlap case LangChain gets wrong."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain.agents.middleware import SummarizationMiddleware as LcSummarization
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

from loopline.middleware import SummarizationMiddleware, to_spec
from services.middleware.builtins import safe_cutoff_point

pytestmark = pytest.mark.fast


@st.composite
def conversations(draw: st.DrawFn) -> list[Any]:
    """Turns of human text, AI messages with parallel calls, their results (sometimes
    with other messages interleaved, as after_model hooks or human responses add them)."""
    messages: list[Any] = [HumanMessage("start")]
    for turn in range(draw(st.integers(1, 8))):
        calls = [
            {"id": f"c{turn}-{i}", "name": "t", "args": {}} for i in range(draw(st.integers(0, 3)))
        ]
        messages.append(AIMessage("", tool_calls=calls))
        results = [ToolMessage(f"r{c['id']}", tool_call_id=c["id"]) for c in calls]
        for result in draw(st.permutations(results)):
            if draw(st.booleans()) and draw(st.booleans()):
                messages.append(HumanMessage("interjection"))
            messages.append(result)
        if draw(st.booleans()):
            messages.append(HumanMessage("next"))
    return messages


def orphans(kept: list[Any], summarized: list[Any]) -> list[str]:
    calls_before = {c["id"] for m in summarized if isinstance(m, AIMessage) for c in m.tool_calls}
    return [
        m.tool_call_id
        for m in kept
        if isinstance(m, ToolMessage) and m.tool_call_id in calls_before
    ]


@settings(max_examples=500, deadline=None)
@given(conversations(), st.data())
def test_no_cut_ever_orphans_a_tool_result(messages: list[Any], data: st.DataObject) -> None:
    cut = data.draw(st.integers(0, len(messages)))
    safe = safe_cutoff_point(messages, cut)
    assert safe <= cut
    assert orphans(messages[safe:], messages[:safe]) == []
    # where LangChain's cut is already safe, loopline cuts at the same place
    lc = LcSummarization._find_safe_cutoff_point(messages, cut)
    if not orphans(messages[lc:], messages[:lc]) and lc <= cut:
        assert safe == lc


def test_partial_overlap_that_langchain_gets_wrong() -> None:
    messages = [
        HumanMessage("q"),
        AIMessage(
            "",
            tool_calls=[{"id": "a", "name": "t", "args": {}}, {"id": "b", "name": "t", "args": {}}],
        ),
        ToolMessage("ra", tool_call_id="a"),
        HumanMessage("a human answered one call"),
        ToolMessage("rb", tool_call_id="b"),
        AIMessage("done"),
    ]
    lc = LcSummarization._find_safe_cutoff_point(messages, 3)
    assert orphans(messages[lc:], messages[:lc]) == ["b"]  # LangChain orphans "b"
    assert safe_cutoff_point(messages, 3) == 1  # loopline keeps the whole batch


def test_the_middleware_uses_the_safe_cut_and_keeps_langchains_parameters(
    monkeypatch: Any,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "unused")  # ChatOpenAI wants one to be built
    middleware = SummarizationMiddleware(model="openai:gpt-4o-mini", trigger=("messages", 10))
    spec = to_spec(middleware)
    assert spec.type == "SummarizationMiddleware"
    assert spec.params == {"model": "openai:gpt-4o-mini", "trigger": ["messages", 10]}
    assert middleware._find_safe_cutoff_point is not LcSummarization._find_safe_cutoff_point
