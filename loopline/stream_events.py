"""LangChain's ``astream_events(version="v2")`` from the stream-mode items of a task.

The events are not read from the bus a second time: ``stream_task`` (loopline.stream_modes)
already turns the task's log and chunk stream into LangGraph's ``messages``, ``updates``
and ``values`` items in LangGraph's order, and every v2 event of an agent without node
hooks is a function of that sequence:

- the first chunk of a model step opens the ``model`` node (``on_chain_start``) and the
  chat model's run (``on_chat_model_start``); each chunk is an ``on_chat_model_stream``;
- the ``model`` update closes them (``on_chat_model_end``, the node's ``on_chain_stream`` /
  ``on_chain_end``, the graph's ``on_chain_stream``) and opens one ``tools`` node per
  tool call the reply asked for (``on_chain_start``, ``on_tool_start``);
- a tool message ends its tool (``on_tool_end``), the ``tools`` update closes its node;
- the graph's run (``LangGraph``) starts before everything and ends with the last values.

Run ids are stable per task (uuid5 of the task id and the run's place) rather than
LangChain's random uuid7s; ``parent_ids`` follow LangChain's nesting (graph, node, run).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, SystemMessage, ToolMessage
from langgraph.types import Command

from loopline.stream_modes import Item, tool_metadata

GRAPH = "LangGraph"
CHAT_MODEL = "ChatOpenAI"  # the model service's client (langchain-openai)
AGENT_METADATA = {"ls_integration": "langchain_create_agent"}
# what a chat model's run adds to its node's metadata (LangChain's tracer keys)
CHAT_MODEL_KEYS = ("checkpoint_ns", "ls_provider", "ls_model_name", "ls_model_type")
CHAT_MODEL_KEYS_MORE = ("ls_temperature", "ls_max_tokens", "ls_stop", "lc_versions")
EVENTS_MODES = ["messages", "updates", "values"]
Event = dict[str, Any]


@dataclass
class OpenTool:
    """A tool call whose ``tools`` node started and has not ended."""

    call: dict[str, Any]
    node_run: str
    tool_run: str
    metadata: dict[str, Any] = field(default_factory=dict)


class EventTranslator:
    """Turns one task's stream-mode items into LangChain's v2 event dicts."""

    def __init__(
        self, task_id: str, graph_input: Any, inputs: list[BaseMessage], system: str | None
    ) -> None:
        self.task_id = task_id
        self.graph_input = graph_input
        self.state: list[BaseMessage] = list(inputs)
        self.system = system
        self.root = self._run_id("graph")
        self.model_step = 0  # the LangGraph step of the open model node (0: none)
        self.model_meta: dict[str, Any] = {}
        self.model_input: dict[str, Any] = {}
        self.tools: dict[str, OpenTool] = {}  # tool call id -> its open node

    def _run_id(self, place: str) -> str:
        return str(uuid.uuid5(uuid.NAMESPACE_URL, f"loopline:{self.task_id}:run:{place}"))

    def _event(
        self,
        kind: str,
        name: str,
        data: dict[str, Any],
        *,
        run_id: str,
        metadata: dict[str, Any],
        tags: list[str],
        parents: list[str],
    ) -> Event:
        return {
            "event": kind,
            "data": data,
            "name": name,
            "tags": tags,
            "run_id": run_id,
            "metadata": metadata,
            "parent_ids": parents,
        }

    def _graph(self, kind: str, data: dict[str, Any]) -> Event:
        return self._event(
            kind, GRAPH, data, run_id=self.root, metadata=dict(AGENT_METADATA), tags=[], parents=[]
        )

    def begin(self) -> list[Event]:
        return [self._graph("on_chain_start", {"input": self.graph_input})]

    def end(self) -> list[Event]:
        return [self._graph("on_chain_end", {"output": {"messages": list(self.state)}})]

    def take(self, item: Item) -> list[Event]:
        mode, data = item
        if mode == "values":
            self.state = list(data["messages"])
            return []
        if mode == "messages":
            message, meta = data
            if meta["langgraph_node"] not in ("model", "tools"):
                return []  # what a hook node added: no chat model or tool ran
            if isinstance(message, ToolMessage):
                return self._tool_end(message)
            return self._chunk(message, meta)
        return self._update(data)

    # -- the model node ---------------------------------------------------------------

    def _node(self, kind: str, node: str, step: int, data: dict[str, Any], meta: Any) -> Event:
        return self._event(
            kind,
            node,
            data,
            run_id=self._run_id(f"{node}:{step}"),
            metadata=meta,
            tags=[f"graph:step:{step}"],
            parents=[self.root],
        )

    def _chat(self, kind: str, data: dict[str, Any]) -> Event:
        step = self.model_step
        return self._event(
            kind,
            CHAT_MODEL,
            data,
            run_id=self._run_id(f"chat:{step}"),
            metadata=dict(self.model_meta),
            tags=["seq:step:1"],
            parents=[self.root, self._run_id(f"model:{step}")],
        )

    def _chunk(self, chunk: Any, meta: dict[str, Any]) -> list[Event]:
        out: list[Event] = []
        if meta["langgraph_step"] != self.model_step:
            out.extend(self._model_start(meta))
        out.append(self._chat("on_chat_model_stream", {"chunk": chunk}))
        return out

    def _model_start(self, meta: dict[str, Any]) -> list[Event]:
        self.model_step = meta["langgraph_step"]
        self.model_meta = {k: v for k, v in meta.items() if not k.startswith("loopline_")}
        system = [SystemMessage(content=self.system)] if self.system else []
        self.model_input = {"messages": [[*system, *self.state]]}
        node_input = {"messages": list(self.state)}
        return [
            self._node(
                "on_chain_start", "model", self.model_step, {"input": node_input}, _node_meta(meta)
            ),
            self._chat("on_chat_model_start", {"input": self.model_input}),
        ]

    def _model_end(self, message: AIMessage) -> list[Event]:
        step, meta = self.model_step, _node_meta(self.model_meta)
        node_input = {"messages": list(self.state)}
        output: list[Command[Any]] = [Command(update={"messages": [message]})]
        return [
            self._chat("on_chat_model_end", {"output": message, "input": self.model_input}),
            self._node("on_chain_stream", "model", step, {"chunk": output}, meta),
            self._node(
                "on_chain_end", "model", step, {"output": output, "input": node_input}, meta
            ),
        ]

    # -- the tools nodes ----------------------------------------------------------------

    def _tools_start(self, message: AIMessage) -> list[Event]:
        out: list[Event] = []
        step = self.model_step + 1
        for index, call in enumerate(message.tool_calls):
            meta = tool_metadata(self.task_id, step, index)
            opened = OpenTool(
                dict(call),
                node_run=self._run_id(f"tools:{step}:{index}"),
                tool_run=self._run_id(f"tool:{step}:{index}"),
                metadata=meta,
            )
            self.tools[str(call["id"])] = opened
            out.append(self._tool_node("on_chain_start", opened, {"input": [opened.call]}))
            out.append(self._tool("on_tool_start", opened, {"input": call["args"]}))
        return out

    def _tool_node(self, kind: str, tool: OpenTool, data: dict[str, Any]) -> Event:
        return self._event(
            kind,
            "tools",
            data,
            run_id=tool.node_run,
            metadata=tool.metadata,
            tags=[f"graph:step:{tool.metadata['langgraph_step']}"],
            parents=[self.root],
        )

    def _tool(self, kind: str, tool: OpenTool, data: dict[str, Any]) -> Event:
        return self._event(
            kind,
            tool.call["name"],
            data,
            run_id=tool.tool_run,
            metadata={**tool.metadata, "checkpoint_ns": tool.metadata["langgraph_checkpoint_ns"]},
            tags=["seq:step:1"],
            parents=[self.root, tool.node_run],
        )

    def _tool_end(self, message: ToolMessage) -> list[Event]:
        tool = self.tools.get(message.tool_call_id)
        if tool is None:
            return []
        return [self._tool("on_tool_end", tool, {"output": message, "input": tool.call["args"]})]

    def _tools_update(self, message: ToolMessage) -> list[Event]:
        tool = self.tools.pop(message.tool_call_id, None)
        if tool is None:
            return []
        update = {"messages": [message]}
        return [
            self._tool_node("on_chain_stream", tool, {"chunk": update}),
            self._tool_node("on_chain_end", tool, {"output": update, "input": [tool.call]}),
        ]

    # -- updates ------------------------------------------------------------------------

    def _update(self, update: dict[str, Any]) -> list[Event]:
        out: list[Event] = []
        if "model" in update:
            message = update["model"]["messages"][-1]
            out.extend(self._model_end(message))
            out.append(self._graph("on_chain_stream", {"chunk": update}))
            out.extend(self._tools_start(message))
            return out
        if "tools" in update:
            for message in update["tools"]["messages"]:
                out.extend(self._tools_update(message))
        out.append(self._graph("on_chain_stream", {"chunk": update}))
        return out


def _node_meta(chat_meta: dict[str, Any]) -> dict[str, Any]:
    """A model node's metadata: its chat model's without what the chat model's run adds."""
    dropped = {*CHAT_MODEL_KEYS, *CHAT_MODEL_KEYS_MORE}
    meta = {
        k: v for k, v in chat_meta.items() if k not in dropped and not k.startswith("loopline_")
    }
    return {**meta, **AGENT_METADATA}


async def events_of(
    items: AsyncIterator[Item], translator: EventTranslator
) -> AsyncIterator[Event]:
    """The v2 events of a task's stream-mode items, from the graph's start to its end."""
    for event in translator.begin():
        yield event
    async for item in items:
        for event in translator.take(item):
            yield event
    for event in translator.end():
        yield event
