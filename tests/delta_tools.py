"""Tools that stream partial output (``ToolRuntime.emit_output_delta``, LangGraph's
``tools`` stream mode), module-level so a deployed tools service imports them."""

from __future__ import annotations

from langchain.tools import ToolRuntime
from langchain_core.tools import tool


@tool
def spell(word: str, runtime: ToolRuntime) -> str:
    """Spell a word letter by letter, then give it whole."""
    for letter in word:
        runtime.emit_output_delta(letter)
    return word.upper()


@tool
def refuse(reason: str) -> str:
    """Always fails."""
    raise ValueError(f"refused: {reason}")
