"""The caller's callback handlers around a run of an agent, as LangGraph's graph reports
its run to them.

LangGraph's ``invoke`` starts a chain run named after the graph (``run_name``, else the
graph's name: the agent's, or ``"LangGraph"``) on the callback manager of its config
(``config["callbacks"]``, its tags and metadata, and what LangChain adds from the
environment: a LangSmith tracer when tracing is on), ends it with the output or the
error, and runs its nodes under that run. Here the run goes on the bus; its handlers get
the graph's run, and the agent's tools run under it where they run in the caller's
process (``services.held_callbacks``), so an agent a tool invokes reports its own run as
a child of the caller's, as LangGraph's subgraph does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from langchain_core.runnables import RunnableConfig


@dataclass(frozen=True)
class GraphRun:
    """One run of the agent as its caller's handlers see it."""

    manager: Any
    """LangChain's ``AsyncCallbackManagerForChainRun`` of the run."""

    @classmethod
    async def start(
        cls, config: RunnableConfig, input: Any, name: str, run_id: Any = None
    ) -> GraphRun | None:
        """The run started on ``config``'s handlers; None when there are none (nothing
        to report to, and nothing for the tools to run under)."""
        from langchain_core.runnables.config import get_async_callback_manager_for_config

        callbacks = get_async_callback_manager_for_config(config)
        if not callbacks.handlers:
            return None
        manager = await callbacks.on_chain_start(
            None, input, name=config.get("run_name") or name, run_id=run_id
        )
        return cls(manager)

    def children(self) -> Any:
        """The callbacks the run's nodes and tools run under (its child manager)."""
        return self.manager.get_child()

    async def end(self, output: Any) -> None:
        await self.manager.on_chain_end(output)

    async def error(self, exc: BaseException) -> None:
        await self.manager.on_chain_error(exc)
