"""LangGraph's ``tools`` and ``tasks`` stream modes, sub-agents' items under their
namespaces, ``stream(..., version="v2")`` parts, and what the v3 run stream
(``stream_events(version="v3")``) is fed, from a task's stream-mode items.

LangGraph 1.2's v3 streaming is a ``StreamMux`` of transformers (its own values, messages,
lifecycle and subgraph transformers; ``create_agent``'s ``ToolCallTransformer`` and
``SubagentTransformer``; a middleware's, such as PII redaction) fed by the graph's
``stream(..., subgraphs=True, version="v2")``. The agent runs LangGraph's own v3 entry
(``Pregel._pregel_stream_v3``) on its ``stream``, so the run object, its projections and
the transformers are LangGraph's; this module gives that ``stream`` what LangGraph's
gives:

- ``tools`` items (``Lifecycle``): ``tool-started`` when a call of the reply starts
  reporting (its first partial output, the agent it runs, or its result),
  ``tool-output-delta`` for what ``ToolRuntime.emit_output_delta`` wrote (carried on the
  task's chunk stream), ``tool-finished`` with its tool message, and ``tool-error`` for
  the calls still running when the run fails (LangGraph's ``on_tool_error`` comes before
  the run raises);
- ``tasks`` items (``Lifecycle``), which the v3 mux reads to find subgraphs and
  sub-agents: a node's task starts (with the agent's ``lc_agent_name`` in its metadata)
  and its result, for the model, each tool call (its input the call, as LangGraph's
  tools task) and each hook node;
- a sub-agent's items (``nested``): an agent run inside a tool call is a task of its
  own; the tools service notes it on its parent's chunk stream (``Subtask``) and the
  parent's stream follows it there, its items under ``("tools:<call's task id>",)`` as
  LangGraph's subgraph namespace, before the call's result (the call waits for it);
- v2 parts (``parts_of``): ``{"type", "ns", "data"}`` dicts, ``values`` with their
  interrupts apart; under the v3 flag (``CONFIG_KEY_STREAM_MESSAGES_V2``) the model
  service calls the model as LangGraph's v3 streaming does (a v2 streaming handler:
  ``services.model.streaming.BlockRelay``), so the ``messages`` mode carries LangChain's
  own content-block protocol events, each with the call's ``run_id`` in its metadata as
  ``StreamMessagesHandlerV2`` emits them, and the reply is the one they assemble; tool
  messages leave the ``messages`` mode (they are the ``tools`` mode's).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from langchain_core.messages import AIMessage, AIMessageChunk, ToolMessage

from contracts.chunks import Subtask
from loopline.stream_modes import INTERRUPT, SUBTASK, TOOLS_NODE, Item

Part = dict[str, Any]
Namespace = tuple[str, ...]
NsItem = tuple[Namespace, str, Any]
Follow = Callable[[Subtask, Namespace], AsyncIterator[Item]]
"""The items of an agent a tool call ran (its own task's stream), in its namespace."""

LIFECYCLE_MODES = ("messages", "updates")
"""What the ``tools`` and ``tasks`` modes are read from: the model's reply (its calls),
the nodes' updates and the tools' messages."""

DERIVED = ("tools", "tasks")
"""Modes made here from the others (the ``tools`` mode's partial outputs excepted)."""


class Lifecycle:
    """LangGraph's ``tools`` and ``tasks`` items of one agent's run (one namespace)."""

    def __init__(self, ns: Namespace, metadata: dict[str, Any]) -> None:
        self.ns = ns
        self.metadata = metadata  # a task's metadata: the agent's name, ls_integration
        self.calls: dict[str, dict[str, Any]] = {}  # the last reply's calls by id
        self.running: dict[str, str] = {}  # started calls -> their task ids, in order
        self.model_task: str | None = None  # the model node's open task
        self.count = 0  # tasks started: their ids are stable within the stream

    def take(self, mode: str, data: Any) -> list[Item]:
        if mode == "messages":
            message, meta = data
            if _tool_result(data):
                return self._finished(message, _task_of(meta))
            if meta.get("langgraph_node") == "model":
                return self._model_start()
            return []
        if mode == "updates" and isinstance(data, dict):
            return self._updated(data)
        if mode == "tools":
            return [*self._started(str(data["tool_call_id"])), ("tools", data)]
        if mode == SUBTASK:  # (call id, its agent, the call's namespace: tools:<task id>)
            return self._started(data[0], _task_of({"langgraph_checkpoint_ns": data[2]}))
        return []

    def failed(self, error: BaseException) -> list[Item]:
        """The run failed: the reply's calls that had not ended failed with it."""
        out: list[Item] = []
        for call_id in list(self.calls):
            out.extend(self._started(call_id))
        for call_id, task_id in self.running.items():
            payload = {"event": "tool-error", "tool_call_id": call_id, "message": str(error)}
            out.append(("tools", payload))
            out.append(("tasks", self._result(task_id, TOOLS_NODE, None, str(error))))
        self.running = {}
        return out

    # -- nodes ---------------------------------------------------------------------------

    def _updated(self, update: dict[str, Any]) -> list[Item]:
        out: list[Item] = []
        for node, written in update.items():
            if node == "model":
                out.extend(self._model_start())
                replies = [m for m in _written_messages(written) if isinstance(m, AIMessage)]
                if replies:
                    self.calls = {str(c["id"]): dict(c) for c in replies[-1].tool_calls}
                task_id, self.model_task = self.model_task, None
                out.append(("tasks", self._result(str(task_id), node, written)))
            elif "." in node:  # a hook node: its whole task
                task_id = self._task_id(node)
                out.append(("tasks", self._start(task_id, node, {}, ("branch:to:" + node,))))
                out.append(("tasks", self._result(task_id, node, written)))
                self._calls_of(written)
        return out

    def _calls_of(self, written: Any) -> None:
        """An after_model hook that rewrote the reply (HumanInTheLoopMiddleware's
        edits, or its answer when a run resumes after the reply was shown): the tools
        run its calls as it wrote them."""
        replies = [m for m in _written_messages(written) if isinstance(m, AIMessage)]
        if replies and replies[-1].tool_calls:
            calls = {str(c["id"]): dict(c) for c in replies[-1].tool_calls}
            self.calls = {k: v for k, v in calls.items() if k not in self.running}

    def _model_start(self) -> list[Item]:
        if self.model_task is not None:
            return []
        self.model_task = self._task_id("model")
        return [("tasks", self._start(self.model_task, "model", {}, ("branch:to:model",)))]

    def _started(self, call_id: str, task_id: str | None = None) -> list[Item]:
        """The call's task starts; ``task_id``: its id where its items gave it (a tool
        message's or a sub-agent's namespace), so the ``tasks`` items and the sub-agent's
        namespace name one task, as LangGraph's."""
        call = self.calls.pop(call_id, None)
        if call is None:
            return []
        task_id = task_id or self._task_id(call_id)
        self.running[call_id] = task_id
        payload = {
            "event": "tool-started",
            "tool_call_id": call_id,
            "tool_name": call["name"],
            "input": call["args"],
        }
        task = self._start(task_id, TOOLS_NODE, [call], ("__pregel_push",))
        return [("tasks", task), ("tools", payload)]

    def _finished(self, message: ToolMessage, task_id: str | None) -> list[Item]:
        call_id = message.tool_call_id
        out = self._started(call_id, task_id)
        task_id = self.running.pop(call_id, None)
        finished = {"event": "tool-finished", "tool_call_id": call_id, "output": message}
        out.append(("tools", finished))
        if task_id is not None:
            out.append(("tasks", self._result(task_id, TOOLS_NODE, {"messages": [message]})))
        return out

    # -- task payloads (LangGraph's TaskPayload and TaskResultPayload) -------------------

    def _task_id(self, place: str) -> str:
        self.count += 1
        where = "|".join(self.ns)
        return str(uuid.uuid5(uuid.NAMESPACE_URL, f"loopline:{where}:{place}:{self.count}"))

    def _start(self, task_id: str, name: str, input: Any, triggers: tuple[str, ...]) -> Any:
        return {
            "id": task_id,
            "name": name,
            "input": input,
            "triggers": triggers,
            "metadata": dict(self.metadata),
        }

    def _result(self, task_id: str, name: str, result: Any, error: str | None = None) -> Any:
        return {"id": task_id, "name": name, "error": error, "result": result, "interrupts": []}


def _written_messages(written: Any) -> list[Any]:
    """The messages a node's update wrote: one update, or several (a ``wrap_model_call``
    whose commands wrote beside the reply gives the model node a list of them)."""
    updates = written if isinstance(written, list) else [written]
    return [m for u in updates if isinstance(u, dict) for m in u.get("messages") or []]


def _task_of(meta: dict[str, Any]) -> str | None:
    """The task id in a tools node's checkpoint namespace (``...|tools:<task id>``)."""
    node, _, task_id = (
        str(meta.get("langgraph_checkpoint_ns") or "").rpartition("|")[2].partition(":")
    )
    return task_id if node == TOOLS_NODE and task_id else None


def _tool_result(data: Any) -> bool:
    message, meta = data
    return isinstance(message, ToolMessage) and meta.get("langgraph_node") == TOOLS_NODE


def internal_modes(modes: Sequence[str], *, subgraphs: bool = False) -> list[str]:
    """The modes to read for ``modes``: the derived ones need the model's reply, the
    nodes' updates and the tools' messages; ``subgraphs``: the agents tool calls ran."""
    wanted = [m for m in modes if m != "tasks"]
    if any(m in DERIVED for m in modes):
        wanted += [m for m in (*LIFECYCLE_MODES, "tools") if m not in wanted]
    if subgraphs:
        wanted.append(SUBTASK)
    return wanted


async def nested(
    items: AsyncIterator[Item],
    modes: Sequence[str],
    follow: Follow | None,
    *,
    ns: Namespace = (),
    metadata: dict[str, Any] | None = None,
) -> AsyncIterator[NsItem]:
    """``(namespace, mode, data)`` of a run's items of ``modes``, with the derived modes,
    and (``follow``) the items of the agents its tool calls ran under their namespaces
    (see the module's docstring); ``metadata``: its tasks' metadata."""
    lifecycle = Lifecycle(ns, metadata or {})
    derived = any(m in DERIVED for m in modes)  # else the items pass as they are
    try:
        async for mode, data in items:
            for extra_mode, extra in lifecycle.take(mode, data) if derived else ():
                if extra_mode in modes:
                    yield ns, extra_mode, extra
            if mode == SUBTASK and follow is not None:
                _, link, segment = data  # the call, its agent, the call's namespace
                child = (*ns, segment)
                child_meta = subtask_metadata(link)
                async for item in nested(
                    follow(link, child), modes, follow, ns=child, metadata=child_meta
                ):
                    yield item
            elif mode in modes and mode not in (*DERIVED, SUBTASK):
                yield ns, mode, data
    except Exception as exc:
        for extra_mode, extra in lifecycle.failed(exc) if derived else ():
            if extra_mode in modes:
                yield ns, extra_mode, extra
        raise


def subtask_metadata(link: Subtask) -> dict[str, Any]:
    """What LangGraph puts in the metadata of a sub-agent's items: its run's config
    metadata (what it inherited from its parent's tool, the caller's keys and thread
    among them), ``create_agent``'s binding (its name, or the one it inherited)."""
    from services.hooks import LS_INTEGRATION

    named = {"lc_agent_name": link.name} if link.name else {}
    return {**LS_INTEGRATION, **link.metadata, **named}


def v3_messages(message: Any, meta: dict[str, Any]) -> list[Any]:
    """The v3 ``messages`` data of one item, as ``StreamMessagesHandlerV2`` emits it: a
    content-block event with its model call's ``run_id``, a whole message a node added
    as it is; no v1 chunks (the v2 handler takes none) and no tool messages (they are
    the ``tools`` mode's)."""
    if isinstance(message, dict):
        return [(message, {**_without_loopline(meta), "run_id": _run_id(meta)})]
    if isinstance(message, AIMessageChunk | ToolMessage):
        return []
    return [(message, meta)]


def _without_loopline(meta: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in meta.items() if not k.startswith("loopline_")}


def _run_id(meta: dict[str, Any]) -> str:
    """A model call's run id, stable for its node's task and attempt."""
    place = f"{meta.get('langgraph_checkpoint_ns')}:{meta.get('loopline_attempt', 1)}"
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"loopline:chat:{place}"))


async def parts_of(items: AsyncIterator[NsItem], *, messages_v2: bool) -> AsyncIterator[Part]:
    """LangGraph's ``stream(..., version="v2")`` parts of the agent's items;
    ``messages_v2``: the v3 flag's ``messages`` (``v3_messages``)."""
    async for ns, mode, data in items:
        if mode == "messages" and messages_v2:
            for shown in v3_messages(*data):
                yield {"type": "messages", "ns": ns, "data": shown}
            continue
        yield _part(ns, mode, data)


def _part(ns: Namespace, mode: str, data: Any) -> Part:
    if mode == "values" and isinstance(data, dict):
        values = dict(data)
        interrupts = values.pop(INTERRUPT, ())
        return {"type": mode, "ns": ns, "data": values, "interrupts": interrupts}
    return {"type": mode, "ns": ns, "data": data}
