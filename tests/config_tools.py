"""Hooks that take LangGraph's ``RunnableConfig`` (``config``) as deepagents' memory and
skills middleware do, one beside ``runtime`` and one instead of it: module-level, named by
import path (``tests.config_tools:NAME``) so the service processes import them as a
user's deployment would. Each notes what its config holds in the state (``configs``), so
a parity test compares it with what LangChain's nodes are given."""

from __future__ import annotations

import operator
from typing import Annotated, Any

from langchain.agents import AgentState
from langchain.agents.middleware import AgentMiddleware
from langchain_core.runnables import RunnableConfig
from langgraph.runtime import Runtime

PER_NODE = ("langgraph_step", "langgraph_checkpoint_ns")
"""Metadata that differ by run: LangGraph's superstep (loopline's steps are not its
supersteps) and the node's checkpoint namespace (a fresh id each time)."""


class ConfigState(AgentState[Any]):
    configs: Annotated[list[dict[str, Any]], operator.add]


def summary(config: RunnableConfig, runtime: Any = None) -> dict[str, Any]:
    """What a node's config holds (tuples as lists: the state keeps JSON's lists)."""
    metadata = dict(config.get("metadata") or {})
    configurable = dict(config.get("configurable") or {})
    return {
        "node": metadata.get("langgraph_node"),
        "ns": str(configurable.get("checkpoint_ns", "")).split(":")[0],
        "thread_id": configurable.get("thread_id"),
        "tags": list(config.get("tags") or []),
        "recursion_limit": config.get("recursion_limit"),
        "metadata": {
            k: list(v) if isinstance(v, tuple) else v
            for k, v in metadata.items()
            if k not in PER_NODE
        },
        "runtime": type(runtime).__name__ if runtime is not None else None,
    }


class ConfigReader(AgentMiddleware[ConfigState]):
    """``before_agent`` takes the runtime and the config (deepagents' MemoryMiddleware's
    signature), ``before_model`` the config only."""

    state_schema = ConfigState

    def before_agent(  # type: ignore[override]
        self, state: ConfigState, runtime: Runtime[Any], config: RunnableConfig
    ) -> dict[str, Any] | None:
        return {"configs": [summary(config, runtime)]}

    async def abefore_agent(  # type: ignore[override]
        self, state: ConfigState, runtime: Runtime[Any], config: RunnableConfig
    ) -> dict[str, Any] | None:
        return {"configs": [summary(config, runtime)]}

    def before_model(  # type: ignore[override]
        self, state: ConfigState, config: RunnableConfig
    ) -> dict[str, Any] | None:
        return {"configs": [summary(config)]}

    async def abefore_model(  # type: ignore[override]
        self, state: ConfigState, config: RunnableConfig
    ) -> dict[str, Any] | None:
        return {"configs": [summary(config)]}
