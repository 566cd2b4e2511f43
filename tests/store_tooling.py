"""A tool and a middleware that share the deployment's store from different services:
the tool (tools service) writes through ``ToolRuntime.store``, the hook (loop service)
reads through ``runtime.store``; each records the process it ran in."""

from __future__ import annotations

import os
from typing import Any

from langchain.agents.middleware import AgentMiddleware
from langchain.tools import ToolRuntime
from langchain_core.tools import tool


@tool
def remember(fact: str, runtime: ToolRuntime) -> str:
    """Remember a fact for later."""
    assert runtime.store is not None
    runtime.store.put(("facts", "user-1"), fact, {"fact": fact, "pid": os.getpid()})
    return f"remembered {fact}"


class RecallFacts(AgentMiddleware):
    """Before each model call: what the store holds under ``facts``, copied to ``seen``."""

    def before_model(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        facts = runtime.store.search(("facts",), filter={"fact": {"$ne": ""}})
        runtime.store.put(
            ("seen",),
            f"step-{len(state['messages'])}",
            {"facts": [i.value for i in facts], "pid": os.getpid()},
        )
        return None


VOCABULARY = ("python", "typescript", "guide", "tutorial", "cooking", "soup", "sky", "blue")


def embed(texts: list[str]) -> list[list[float]]:
    """An embedding function for the store's vector index: word counts over a small
    vocabulary, so similar texts score alike and the ranking is known in advance."""
    return [
        [float(text.lower().split().count(word)) + 0.01 for word in VOCABULARY] for text in texts
    ]
