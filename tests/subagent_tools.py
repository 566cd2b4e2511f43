"""A tool that runs another agent (a sub-agent), module-level so a deployed tools service
imports it: the sub-agent is made there, on the deployment the service runs on."""

from __future__ import annotations

from functools import cache
from typing import Any

from langchain_core.tools import tool

SPELLER_PROMPT = "You spell words."


@cache
def speller() -> Any:
    """The sub-agent, made once per process on its deployment (``REDIS_URL``)."""
    from loopline import create_agent

    return create_agent(
        "gpt-4o-mini",
        ["tests.delta_tools:spell"],
        system_prompt=SPELLER_PROMPT,
        name="speller",
    )


@tool
def ask_speller(word: str) -> str:
    """Ask the speller agent to spell a word."""
    result = speller().invoke({"messages": [{"role": "user", "content": f"spell {word}"}]})
    return str(result["messages"][-1].content)
