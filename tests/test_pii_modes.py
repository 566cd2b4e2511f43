"""PIIMiddleware on the bus against LangChain's, strategy by strategy (redact, mask, hash,
block), for every built-in detector, a regex and a user's function, on the user's input,
the model's output and tool results. The same middleware instances run in LangChain's
create_agent and in loopline's (services as separate processes, the scripted model over
HTTP): the requests the model receives must be identical byte for byte, and a block must
fail both runs for the same reason."""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
from langchain.agents import create_agent as lc_create_agent
from langchain.agents import middleware as lcm
from langchain.agents.middleware import PIIDetectionError
from langchain_core.messages import BaseMessage
from langchain_core.messages import HumanMessage as LcHumanMessage
from langchain_openai import ChatOpenAI

from loopline.agent import create_agent
from loopline.testing.scripted import (
    Reply,
    ScriptedOpenAIServer,
    ScriptedToolCall,
    first_user_text,
)
from services.settings import Settings
from tests import pii_helpers as pii
from tests.support import ServiceProcesses

pytestmark = pytest.mark.asyncio(loop_scope="module")

SCRIPTS: dict[str, Sequence[Reply]] = {}

# (pii_type, detector, the values of PII_LINE it must find)
DETECTORS: list[tuple[str, Any, list[str]]] = [
    ("email", None, [pii.EMAIL]),
    ("credit_card", None, [pii.CARD]),
    ("ip", None, [pii.IP]),
    ("mac_address", None, [pii.MAC]),
    ("url", None, [pii.URL]),
    ("ssn", pii.SSN_PATTERN, [pii.SSN]),
    ("api_key", pii.detect_api_key, [pii.API_KEY]),
]
RAW = [v for _, _, values in DETECTORS for v in values]


def hashed(pii_type: str, value: str) -> str:
    return f"<{pii_type}_hash:{hashlib.sha256(value.encode()).hexdigest()[:8]}>"


# What each strategy leaves in place of each value (LangChain's documented formats).
EXPECTED: dict[str, list[str]] = {
    "redact": [f"[REDACTED_{t.upper()}]" for t, _, _ in DETECTORS],
    "mask": [
        "ada@****.com",
        "**** **** **** 1111",
        "*.*.*.10",
        "**:**:**:**:**:5E",
        "[MASKED_URL]",
        "****6789",
        f"****{pii.API_KEY[-4:]}",
    ],
    "hash": [hashed(t, v) for t, _, values in DETECTORS for v in values],
}


def all_detectors(strategy: str, **where: bool) -> list[Any]:
    """One LangChain PIIMiddleware per detector (LangChain's own instances: loopline
    converts them, the callable detector travelling by import path)."""
    return [
        lcm.PIIMiddleware(t, detector=d, strategy=strategy, **where)  # type: ignore[arg-type]
        for t, d, _ in DETECTORS
    ]


@dataclass
class Runs:
    """Both runs of one scenario."""

    lc_messages: list[BaseMessage] = field(default_factory=list)
    ll_messages: list[BaseMessage] = field(default_factory=list)
    lc_error: Exception | None = None
    ll_error: Exception | None = None
    lc_requests: list[dict[str, Any]] = field(default_factory=list)
    ll_requests: list[dict[str, Any]] = field(default_factory=list)


async def run_both(
    stack: ServiceProcesses,
    servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer],
    script: list[Reply],
    middleware: list[Any],
    text: str = pii.PII_LINE,
) -> Runs:
    key = f"[{uuid.uuid4().hex[:12]}]"  # picks the script; no detector matches it
    SCRIPTS[key] = script
    prompt = f"{key} {text}"
    runs = Runs()
    lc_agent = lc_create_agent(
        ChatOpenAI(model="gpt-4o-mini", base_url=servers[0].url, api_key="test", max_retries=0),
        tools=[pii.contact],
        middleware=middleware,
    )
    try:
        lc = await lc_agent.ainvoke({"messages": [LcHumanMessage(content=prompt)]})
        runs.lc_messages = lc["messages"]
    except PIIDetectionError as exc:
        runs.lc_error = exc
    agent = create_agent(
        "gpt-4o-mini",
        tools=[pii.contact],
        middleware=middleware,
        redis_url=stack.redis_url,
        settings=Settings(prefix=stack.prefix),
    )
    try:
        ours = await agent.ainvoke({"messages": prompt})
        runs.ll_messages = ours["messages"]
    except Exception as exc:  # the original's class and message (loopline.errors)
        runs.ll_error = exc
    runs.lc_requests = [r for r in servers[0].chat_requests() if first_user_text(r).startswith(key)]
    runs.ll_requests = [r for r in servers[1].chat_requests() if first_user_text(r).startswith(key)]
    return runs


def view(messages: list[BaseMessage]) -> list[tuple[Any, ...]]:
    """What a run ended with, comparable across the two (ids and metadata aside)."""
    out: list[tuple[Any, ...]] = []
    for m in messages:
        calls = [(c["name"], c["args"], c["id"]) for c in getattr(m, "tool_calls", [])]
        extra = (getattr(m, "tool_call_id", None), getattr(m, "status", None))
        out.append((m.type, m.text if isinstance(m.text, str) else m.text(), calls, extra))
    return out


def same_requests(runs: Runs) -> str:
    """Asserts both models received identical requests; returns them as text."""
    assert runs.lc_requests, "LangChain's model was never called"
    assert runs.ll_requests == runs.lc_requests
    return json.dumps(runs.ll_requests)


def replies(strategy: str, target: str) -> list[Reply]:
    if target == "input":
        return [Reply(content="noted")]
    if target == "output":  # PII in the text of a reply that calls a tool, and of the last
        return [
            Reply(
                content=f"Found: {pii.PII_LINE}",
                tool_calls=(ScriptedToolCall("contact", {"name": "nobody"}),),
            ),
            Reply(content=f"Again: {pii.PII_LINE}"),
        ]
    return [  # tool results: the tool's answer carries the PII
        Reply(tool_calls=(ScriptedToolCall("contact", {"name": "ada"}),)),
        Reply(content="done"),
    ]


WHERE = {
    "input": {"apply_to_input": True},
    "output": {"apply_to_input": False, "apply_to_output": True},
    "tool_results": {"apply_to_input": False, "apply_to_tool_results": True},
}


@pytest.mark.parametrize("target", ["input", "output", "tool_results"])
@pytest.mark.parametrize("strategy", ["redact", "mask", "hash"])
async def test_strategy_matches_langchain(
    stack: ServiceProcesses,
    servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer],
    strategy: str,
    target: str,
) -> None:
    runs = await run_both(
        stack, servers, replies(strategy, target), all_detectors(strategy, **WHERE[target])
    )
    assert runs.lc_error is None and runs.ll_error is None
    sent = same_requests(runs)
    assert view(runs.ll_messages) == view(runs.lc_messages)

    # Where the strategy applies, every detected value is replaced as documented and the
    # card that fails the Luhn check is left alone.
    if target == "input":
        checked = [runs.ll_messages[0].text]
        seen = json.dumps(runs.ll_requests[0]["messages"][0])
    elif target == "output":
        checked = [runs.ll_messages[1].text, runs.ll_messages[-1].text]
        seen = json.dumps(runs.ll_requests[1]["messages"][1])  # the first reply, as re-sent
    else:
        checked = [runs.ll_messages[2].text]
        seen = json.dumps(runs.ll_requests[1]["messages"][2])  # the tool result
        assert runs.ll_messages[2].type == "tool"
    for text in [*checked, seen]:
        assert all(value not in text for value in RAW), text
        assert all(marker in text for marker in EXPECTED[strategy]), text
        assert pii.BAD_CARD in text
    all_text = sent + json.dumps([m.text for m in runs.ll_messages])
    if target != "input":  # only the configured side is touched: the prompt keeps its PII
        assert pii.EMAIL in json.dumps(runs.ll_requests[0]["messages"][0])
    assert pii.BAD_CARD in all_text


@pytest.mark.parametrize(
    ("pii_type", "detector", "values"), DETECTORS, ids=[d[0] for d in DETECTORS]
)
async def test_block_on_input_fails_both(
    stack: ServiceProcesses,
    servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer],
    pii_type: str,
    detector: Any,
    values: list[str],
) -> None:
    """LangChain raises PIIDetectionError before the model is called; loopline fails the
    task with it (invoke raises it again), and its model is not called either."""
    middleware = [lcm.PIIMiddleware(pii_type, detector=detector, strategy="block")]
    runs = await run_both(stack, servers, [Reply(content="never")], middleware)
    assert isinstance(runs.lc_error, PIIDetectionError)
    assert runs.lc_error.pii_type == pii_type
    assert type(runs.ll_error) is PIIDetectionError
    assert str(runs.ll_error) == str(runs.lc_error)
    assert f"of {pii_type} in text content" in str(runs.ll_error)
    assert runs.lc_requests == runs.ll_requests == []


@pytest.mark.parametrize(
    ("target", "pii_type"), [("output", "email"), ("tool_results", "credit_card")]
)
async def test_block_on_output_and_tool_results_fails_both(
    stack: ServiceProcesses,
    servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer],
    target: str,
    pii_type: str,
) -> None:
    middleware = [lcm.PIIMiddleware(pii_type, strategy="block", **WHERE[target])]  # type: ignore[arg-type]
    runs = await run_both(stack, servers, replies("block", target), middleware)
    assert isinstance(runs.lc_error, PIIDetectionError)
    assert type(runs.ll_error) is PIIDetectionError
    assert str(runs.ll_error) == str(runs.lc_error)
    same_requests(runs)
    assert len(runs.ll_requests) == 1  # the run stopped before (output) or at the next call


async def test_a_card_that_fails_luhn_is_not_blocked(
    stack: ServiceProcesses, servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer]
) -> None:
    middleware = [lcm.PIIMiddleware("credit_card", strategy="block")]
    runs = await run_both(
        stack, servers, [Reply(content="noted")], middleware, text=f"old card {pii.BAD_CARD}"
    )
    assert runs.lc_error is None and runs.ll_error is None
    assert pii.BAD_CARD in same_requests(runs)
    assert view(runs.ll_messages) == view(runs.lc_messages)


ARGS_SCRIPT = [
    Reply(tool_calls=(ScriptedToolCall("contact", {"name": pii.EMAIL}),)),
    Reply(content="done"),
]


async def test_tool_call_arguments_are_left_alone_without_apply_to_output(
    stack: ServiceProcesses, servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer]
) -> None:
    """Checking input only (the default), a block does not fire on the arguments of the
    model's tool calls, in LangChain or in loopline: the tool gets them as they are."""
    middleware = [lcm.PIIMiddleware("email", strategy="block")]
    runs = await run_both(stack, servers, ARGS_SCRIPT, middleware, text="look up ada")
    assert runs.lc_error is None and runs.ll_error is None
    assert f"no record for {pii.EMAIL}" in same_requests(runs)
    assert view(runs.ll_messages) == view(runs.lc_messages)


async def test_tool_call_arguments_are_also_redacted_with_apply_to_output(
    stack: ServiceProcesses, servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer]
) -> None:
    """loopline's intended difference: with apply_to_output, the model's tool-call
    arguments are handled too, so the tool receives the hashed address. Everything else
    the model is sent is LangChain's, exactly."""
    middleware = [lcm.PIIMiddleware("email", strategy="hash", apply_to_output=True)]
    runs = await run_both(stack, servers, ARGS_SCRIPT, middleware, text="look up ada")
    assert runs.lc_error is None and runs.ll_error is None
    digest = hashed("email", pii.EMAIL)
    lc_sent, ll_sent = json.dumps(runs.lc_requests), json.dumps(runs.ll_requests)
    assert pii.EMAIL in lc_sent and pii.EMAIL not in ll_sent
    assert ll_sent == lc_sent.replace(pii.EMAIL, digest)
    ai = next(m for m in runs.ll_messages if m.type == "ai")
    assert ai.tool_calls[0]["args"] == {"name": digest}  # type: ignore[attr-defined]
    tool = next(m for m in runs.ll_messages if m.type == "tool")
    assert tool.text == f"no record for {digest}"


@pytest.mark.fast
async def test_langchain_instances_travel_with_their_detectors() -> None:
    """LangChain's own instances become specs that name the detector they were given: the
    built-in one by nothing, a regex by its pattern, a function by its import path."""
    from contracts.agent import MiddlewareSpec
    from loopline.middleware import from_spec, to_spec

    specs = [
        to_spec(lcm.PIIMiddleware(t, detector=d, strategy="mask", apply_to_output=True))
        for t, d, _ in DETECTORS
    ]
    detectors = [s.params.get("detector") for s in specs]
    assert detectors == [None] * 5 + [
        pii.SSN_PATTERN,
        {"callable": "tests.pii_helpers:detect_api_key"},
    ]
    for spec, (_, _, values) in zip(specs, DETECTORS, strict=True):
        rebuilt = from_spec(MiddlewareSpec.model_validate_json(spec.model_dump_json()))
        assert rebuilt.strategy == "mask" and rebuilt.apply_to_output
        assert [m["value"] for m in rebuilt.detector(pii.PII_LINE)] == values
