"""LangChain's ``astream_events(version="v2")`` from the stream-mode items of a task.

The events are not read from the bus a second time: ``stream_task`` (loopline.stream_modes)
already turns the task's log and chunk stream into LangGraph's ``messages``, ``updates``
and ``values`` items in LangGraph's order, and every v2 event is a function of that
sequence:

- the first chunk of a model step opens the ``model`` node (``on_chain_start``) and the
  chat model's run (``on_chat_model_start``); each chunk is an ``on_chat_model_stream``;
- the ``model`` update closes them (``on_chat_model_end``, the node's ``on_chain_stream`` /
  ``on_chain_end``, the graph's ``on_chain_stream``); once its after_model nodes ran,
  one ``tools`` node opens per tool call the reply asked for (``on_chain_start``,
  ``on_tool_start``);
- a tool message ends its tool (``on_tool_end``), the ``tools`` update closes its node;
- a hook node's update (``<middleware>.<hook>``) is its whole run: ``on_chain_start``
  with the state it read, ``on_chain_stream`` and ``on_chain_end`` with its update, in
  the superstep after the node before it (the tools of a reply start after its
  after_model nodes);
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

from loopline.stream_modes import INTERRUPT, Item, node_metadata, tool_metadata

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
        self,
        task_id: str,
        graph_input: Any,
        inputs: list[BaseMessage],
        system: str | None,
        *,
        name: str = GRAPH,
        metadata: dict[str, Any] | None = None,
    ) -> None:
        self.task_id = task_id
        self.name = name
        """The graph's run: LangGraph's graph name in Python, the graph id on LangGraph's
        server (which names the run after it)."""
        self.metadata = {**AGENT_METADATA, **(metadata or {})}
        self.graph_input = graph_input
        self.state: list[BaseMessage] = list(inputs)
        self.system = system
        self.root = self._run_id("graph")
        self.model_step = 0  # the LangGraph step of the open model node (0: none)
        self.step = 0  # the LangGraph step of the last node that ran
        self.values: dict[str, Any] = {"messages": list(inputs)}  # the state as it stands
        self.model_meta: dict[str, Any] = {}
        self.model_input: dict[str, Any] = {}
        self.tools: dict[str, OpenTool] = {}  # tool call id -> its open node
        self.calls: list[Any] = []  # the last reply's calls, sent once its hook nodes ran

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
            kind,
            self.name,
            data,
            run_id=self.root,
            metadata=dict(self.metadata),
            tags=[],
            parents=[],
        )

    def begin(self) -> list[Event]:
        return [self._graph("on_chain_start", {"input": self.graph_input})]

    def end(self) -> list[Event]:
        return [self._graph("on_chain_end", {"output": self._state()})]

    def _state(self) -> dict[str, Any]:
        """The state as it stands: what a node reads, what the graph gives at its end."""
        return {**self.values, "messages": list(self.state)}

    def take(self, item: Item) -> list[Event]:
        mode, data = item
        if mode == "values":
            self.values = dict(data)
            self.state = list(data["messages"])
            return []
        if _of_hook_node(mode, data):  # its messages: no chat model or tool ran
            return self._hook_nodes(data) if mode == "updates" else []
        if mode == "updates" and INTERRUPT in data:  # the run stops: no call is sent
            return [self._graph("on_chain_stream", {"chunk": data})]
        return [*self._send_calls(), *self._item(mode, data)]

    def _item(self, mode: str, data: Any) -> list[Event]:
        if mode == "messages":
            message, meta = data
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
        self.model_step = self.step = meta["langgraph_step"]
        self.model_meta = {k: v for k, v in meta.items() if not k.startswith("loopline_")}
        system = [SystemMessage(content=self.system)] if self.system else []
        self.model_input = {"messages": [[*system, *self.state]]}
        node_input = self._state()
        return [
            self._node(
                "on_chain_start", "model", self.model_step, {"input": node_input}, _node_meta(meta)
            ),
            self._chat("on_chat_model_start", {"input": self.model_input}),
        ]

    def _model_end(self, message: AIMessage) -> list[Event]:
        step, meta = self.model_step, _node_meta(self.model_meta)
        node_input = self._state()
        output: list[Command[Any]] = [Command(update={"messages": [message]})]
        return [
            self._chat("on_chat_model_end", {"output": message, "input": self.model_input}),
            self._node("on_chain_stream", "model", step, {"chunk": output}, meta),
            self._node(
                "on_chain_end", "model", step, {"output": output, "input": node_input}, meta
            ),
        ]

    # -- the tools nodes ----------------------------------------------------------------

    def _send_calls(self) -> list[Event]:
        """The tools nodes of the last reply's calls, once its after_model nodes ran."""
        if not self.calls:
            return []
        calls, self.calls = self.calls, []
        out: list[Event] = []
        self.step += 1
        step = self.step
        for index, call in enumerate(calls):
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
            self.calls = list(message.tool_calls)
            return out
        if "tools" in update:
            for message in update["tools"]["messages"]:
                out.extend(self._tools_update(message))
        out.append(self._graph("on_chain_stream", {"chunk": update}))
        return out

    # -- hook nodes ------------------------------------------------------------------------

    def _hook_nodes(self, update: dict[str, Any]) -> list[Event]:
        """A hook node ran (one per superstep): its run, from the state it read."""
        out: list[Event] = []
        for node, written in update.items():
            self.step += 1
            meta = node_metadata(self.task_id, node, self.step)
            read = self._state()
            out.append(self._node("on_chain_start", node, self.step, {"input": read}, meta))
            out.append(self._node("on_chain_stream", node, self.step, {"chunk": written}, meta))
            ended = {"output": written, "input": read}
            out.append(self._node("on_chain_end", node, self.step, ended, meta))
            out.append(self._graph("on_chain_stream", {"chunk": {node: written}}))
        return out


def _of_hook_node(mode: str, data: Any) -> bool:
    """Whether an item is a hook node's (``<middleware>.<hook>``): its update or a
    message it added."""
    if mode == "messages":
        return str(data[1]["langgraph_node"]) not in ("model", "tools")
    return mode == "updates" and all("." in node for node in data)


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
