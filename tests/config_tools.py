"""Hooks that take LangGraph's ``RunnableConfig`` (``config``) as deepagents' memory and
skills middleware do, one beside ``runtime`` and one instead of it, and tools that read
and write the state through LangGraph's config as deepagents' ``StateBackend`` does:
module-level, named by
import path (``tests.config_tools:NAME``) so the service processes import them as a
user's deployment would. Each notes what its config holds in the state (``configs``), so
a parity test compares it with what LangChain's nodes are given."""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Annotated, Any, NotRequired

from langchain.agents import AgentState
from langchain.agents.middleware import AgentMiddleware
from langchain.tools import ToolRuntime
from langchain_core.messages import ToolMessage
from langchain_core.runnables import RunnableConfig
from langgraph._internal._constants import CONFIG_KEY_READ, CONFIG_KEY_SEND
from langgraph.channels.delta import DeltaChannel
from langgraph.config import get_config
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


# -- tools that read and write the state through LangGraph's config, as deepagents'
# StateBackend does (``config["configurable"][CONFIG_KEY_READ]`` / ``[CONFIG_KEY_SEND]``)


def files_reducer(
    left: dict[str, Any] | None, writes: Sequence[dict[str, Any]]
) -> dict[str, Any]:
    """deepagents' batch reducer of ``files``: a None value deletes the file."""
    result = dict(left) if left else {}
    for write in writes:
        for path, data in write.items():
            if data is None:
                result.pop(path, None)
            else:
                result[path] = data
    return result


class FilesState(AgentState[Any]):
    files: Annotated[NotRequired[dict[str, Any]], DeltaChannel(files_reducer)]


def _read_and_send() -> tuple[Any, Any]:
    configurable = get_config()["configurable"]
    return configurable[CONFIG_KEY_READ], configurable[CONFIG_KEY_SEND]


def write_note(path: str, text: str, runtime: ToolRuntime[None, FilesState]) -> ToolMessage:
    """Write a note to a file."""
    read, send = _read_and_send()
    existed = path in (read("files", True) or {})
    send([("files", {path: {"content": text}})])
    after = read("files", True)  # the call's own write, read back
    verb = "updated" if existed else "created"
    return ToolMessage(
        f"{verb} {path}; {sorted(after)}; {after[path]['content']}",
        tool_call_id=runtime.tool_call_id,
    )


def remove_note(path: str, runtime: ToolRuntime[None, FilesState]) -> ToolMessage:
    """Remove a note."""
    _, send = _read_and_send()
    send([("files", {path: None})])
    return ToolMessage(f"removed {path}", tool_call_id=runtime.tool_call_id)


def read_notes(runtime: ToolRuntime[None, FilesState]) -> str:
    """Read every note."""
    read, _ = _read_and_send()
    files = read(["files", "messages"])
    texts = {path: data["content"] for path, data in sorted(files["files"].items())}
    return f"{texts} after {len(files['messages'])} messages"
