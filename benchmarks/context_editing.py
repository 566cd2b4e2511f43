"""Context editing: LangChain's ``ClearToolUsesEdit`` versus loopline's engine.

The workload is the one where LangChain hurts: a long agent run (1,000 tool results,
~300k tokens) counted with the model's tokenizer and ``clear_at_least`` set, so LangChain
re-tokenizes the whole conversation after every result it clears. loopline counts each
message once when it arrives; the steady-state figure is one edit given those cached
counts, the cold figure also pays for counting every message once.

Run ``python -m benchmarks.context_editing``; it prints a Markdown table and writes it to
``benchmarks/results/context_editing.md``.
"""

from __future__ import annotations

import os
import random
import tempfile
import time
import warnings
from collections.abc import Callable, Sequence
from copy import deepcopy
from pathlib import Path
from typing import Any

from contracts.messages import (
    AIMessage,
    HumanMessage,
    Message,
    SystemMessage,
    ToolCall,
    ToolMessage,
    to_langchain,
)
from services.context.counting import ModelCounter, install_offline_tiktoken_cache
from services.context.engine import ClearToolUses, apply_edits, base_tokens_for, edit_context

MODEL = "gpt-4"
TOOL_RESULTS = 1_000
CALLS_PER_TURN = 2
WORDS_PER_RESULT = 88  # ~300 tokens per result: the random words average ~3.3 tokens
EDIT = ClearToolUses(trigger=150_000, clear_at_least=20_000, keep=3)
LANGCHAIN_REPEATS = 3
LOOPLINE_REPEATS = 20
RESULTS_FILE = Path(__file__).parent / "results" / "context_editing.md"


def _ensure_offline_tiktoken() -> None:
    """Make ``gpt-4``'s encoding (cl100k_base) loadable for both sides without internet."""
    directory = os.environ.get("TIKTOKEN_CACHE_DIR")
    if not directory:
        directory = os.path.join(tempfile.gettempdir(), "loopline-tiktoken-cache")
        os.environ["TIKTOKEN_CACHE_DIR"] = directory
    install_offline_tiktoken_cache(directory)


def build_conversation(seed: int = 7) -> tuple[SystemMessage, list[Message]]:
    """A research run: parallel tool calls answered by ~300-token results."""
    rng = random.Random(seed)
    vocabulary = [
        "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 9)))
        for _ in range(3_000)
    ]
    tools = ("search", "read_file", "shell", "fetch_url")
    system = SystemMessage(content="You are a meticulous research agent. Cite your sources.")
    messages: list[Message] = [HumanMessage(content="Survey the literature on stream processing.")]
    for turn in range(TOOL_RESULTS // CALLS_PER_TURN):
        calls = [
            ToolCall(
                id=f"call_{turn}_{k}",
                name=tools[(turn + k) % len(tools)],
                args={"query": " ".join(rng.choices(vocabulary, k=6)), "page": turn},
            )
            for k in range(CALLS_PER_TURN)
        ]
        messages.append(AIMessage(content="", id=f"ai_{turn}", tool_calls=calls))
        for call in calls:
            text = " ".join(rng.choices(vocabulary, k=WORDS_PER_RESULT))
            messages.append(ToolMessage(content=text, tool_call_id=call.id, name=call.name))
    return system, messages


def _best_of(repeats: int, action: Callable[[], Any]) -> tuple[float, Any]:
    best, result = float("inf"), None
    for _ in range(repeats):
        started = time.perf_counter()
        result = action()
        best = min(best, time.perf_counter() - started)
    return best, result


def run(
    langchain_repeats: int = LANGCHAIN_REPEATS, loopline_repeats: int = LOOPLINE_REPEATS
) -> dict[str, float]:
    """Time both sides on the same conversation and check they produce the same view."""
    _ensure_offline_tiktoken()
    from langchain.agents.middleware.context_editing import ClearToolUsesEdit
    from langchain_openai import ChatOpenAI

    system, messages = build_conversation()
    lc_system = to_langchain(system)
    lc_messages = [to_langchain(m) for m in messages]
    chat_model = ChatOpenAI(model=MODEL, api_key="x")

    def count_tokens(batch: Sequence[Any]) -> int:
        # What the middleware's "model" method does: system prompt + messages, with the
        # request's tools (which ChatOpenAI ignores, with a warning).
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return chat_model.get_num_tokens_from_messages([lc_system, *batch], [])

    lc_edit = ClearToolUsesEdit(
        trigger=EDIT.trigger,
        clear_at_least=EDIT.clear_at_least,
        keep=EDIT.keep,
        clear_tool_inputs=EDIT.clear_tool_inputs,
        exclude_tools=EDIT.exclude_tools,
        placeholder=EDIT.placeholder,
    )

    def langchain() -> list[Any]:
        edited = deepcopy(lc_messages)  # as ContextEditingMiddleware.wrap_model_call does
        lc_edit.apply(edited, count_tokens=count_tokens)
        return edited

    counter = ModelCounter(MODEL)
    counts = [counter.count_message(m) for m in messages]
    base = base_tokens_for(counter, system)

    def steady() -> Any:
        return edit_context(messages, [EDIT], counter, counts=counts, base_tokens=base)

    def cold() -> Any:
        fresh = [counter.count_message(m) for m in messages]
        return edit_context(
            messages, [EDIT], counter, counts=fresh, base_tokens=base_tokens_for(counter, system)
        )

    total_tokens = count_tokens(lc_messages)
    loopline_s, result = _best_of(loopline_repeats, steady)
    loopline_cold_s, cold_result = _best_of(max(1, loopline_repeats // 5), cold)
    replay_s, replayed = _best_of(loopline_repeats, lambda: apply_edits(messages, result.applied))
    langchain_s, expected = _best_of(langchain_repeats, langchain)

    assert [to_langchain(m) for m in result.messages] == expected, "views differ"
    assert cold_result == result and replayed == result.messages
    assert result.tokens == count_tokens(expected) and result.reports[0].tokens_before == (
        total_tokens
    )
    cleared = len(result.reports[0].cleared_tool_call_ids)
    return {
        "messages": float(len(messages)),
        "tool_results": float(TOOL_RESULTS),
        "tokens_before": float(total_tokens),
        "tokens_after": float(result.tokens),
        "cleared_results": float(cleared),
        "langchain_s": langchain_s,
        "loopline_s": loopline_s,
        "loopline_cold_s": loopline_cold_s,
        "apply_edits_s": replay_s,
        "speedup": langchain_s / loopline_s,
        "speedup_cold": langchain_s / loopline_cold_s,
    }


def to_markdown(figures: dict[str, float]) -> str:
    f = figures
    return "\n".join(
        [
            "# Context editing: LangChain `ClearToolUsesEdit` vs loopline",
            "",
            f"Conversation: {f['messages']:.0f} messages, {f['tool_results']:.0f} tool results, "
            f"{f['tokens_before']:,.0f} tokens (`model` counting, {MODEL}). "
            f"Edit: trigger={EDIT.trigger:,}, keep={EDIT.keep}, "
            f"clear_at_least={EDIT.clear_at_least:,}; it cleared {f['cleared_results']:.0f} "
            f"results ({f['tokens_before']:,.0f} → {f['tokens_after']:,.0f} tokens). "
            f"Identical output checked. Best of {LANGCHAIN_REPEATS} (LangChain) / "
            f"{LOOPLINE_REPEATS} (loopline) runs.",
            "",
            "| implementation | time (s) | speedup |",
            "|---|---:|---:|",
            f"| LangChain `ClearToolUsesEdit.apply` (deepcopy + ChatOpenAI counting) "
            f"| {f['langchain_s']:.4f} | 1× |",
            f"| loopline `edit_context`, cached per-message counts (steady state) "
            f"| {f['loopline_s']:.6f} | {f['speedup']:,.0f}× |",
            f"| loopline cold: count every message once + `edit_context` "
            f"| {f['loopline_cold_s']:.4f} | {f['speedup_cold']:,.1f}× |",
            f"| loopline `apply_edits` (model service replay, no counting) "
            f"| {f['apply_edits_s']:.6f} | — |",
            "",
        ]
    )


def main() -> None:
    figures = run()
    table = to_markdown(figures)
    print(table)
    RESULTS_FILE.parent.mkdir(parents=True, exist_ok=True)
    RESULTS_FILE.write_text(table)


if __name__ == "__main__":
    main()
