"""The stream modes LangGraph's server adds to a graph's own: ``events``, ``debug``,
``checkpoints`` and ``tasks``, made from the items of the stream-mode layer the other
modes come from, so they agree with them.

- ``tasks``: a node's task when it starts (its input, triggers, the run's metadata) and
  its result, as ``loopline.stream_parts.Lifecycle`` makes them for LangGraph's v3 run
  object; the model's and a hook node's input is the state as the last ``values`` gave it.
- ``checkpoints``: the thread's checkpoints the run makes, as ``loopline.history`` folds
  them from the run's log (the same ones ``/threads/{id}/history`` lists), each sent with
  the ``values`` item of its superstep: the input's and ``__start__``'s with the first,
  then one per superstep. A stateless run has no thread, hence no checkpoints (LangGraph's
  server runs it without a checkpointer and sends none either).
- ``debug``: both, as LangGraph's ``debug`` mode wraps them (``{"type": "checkpoint" |
  "task" | "task_result", "step", "timestamp", "payload"}``), a checkpoint's payload with
  ``checkpoint`` and ``parent_checkpoint`` as the server adds them.
- ``events``: LangChain's ``astream_events(version="v2")`` events
  (``loopline.stream_events.EventTranslator``), the graph's run named after the graph as
  the server names it, without the graph's own ``on_chain_stream`` events (the server
  turns those into the other modes' frames).
"""

from __future__ import annotations

import datetime
import time
import uuid
from collections.abc import Sequence
from typing import Any

from langchain_core.messages import BaseMessage

from loopline.api.records import RunRecord
from loopline.api.tenant import Tenant
from loopline.history import MODEL, START, TOOLS, Checkpoint, ThreadHistory, next_after
from loopline.stream_events import EVENTS_MODES, EventTranslator
from loopline.stream_modes import Item
from loopline.stream_parts import LIFECYCLE_MODES, Lifecycle

SERVER_MODES = ("events", "debug", "checkpoints", "tasks")
"""Modes LangGraph's server streams beyond the graph's ``stream`` modes loopline has."""

READS: dict[str, tuple[str, ...]] = {
    "events": tuple(EVENTS_MODES),
    "tasks": (*LIFECYCLE_MODES, "values"),
    "checkpoints": ("values",),
    "debug": (*LIFECYCLE_MODES, "values"),
}
"""The stream-mode layer's modes each is made from (``values`` marks the supersteps)."""

CHECKPOINT_METADATA = ("source", "step", "parents")
"""What a streamed checkpoint's metadata holds (the run's config metadata is added to a
checkpoint when it is saved, after the server streamed it)."""

Frame = tuple[str, Any]


def reads(requested: Sequence[str]) -> list[str]:
    """The stream-mode layer's modes the server modes among ``requested`` need."""
    found: list[str] = []
    for mode in requested:
        for name in READS.get(mode, ()):
            if name not in found:
                found.append(name)
    return found


class ServerModes:
    """The ``events``, ``debug``, ``checkpoints`` and ``tasks`` frames of one run, from
    each of its items in order (every item, also those a reconnect skips: the frames
    depend on what came before)."""

    def __init__(self, tenant: Tenant, record: RunRecord, requested: Sequence[str]) -> None:
        self.tenant = tenant
        self.record = record
        self.wanted = {m for m in requested if m in SERVER_MODES}
        graph_id = record.assistant_id.partition("@")[0]
        self.run_metadata = {
            "ls_integration": "langchain_create_agent",
            **record.metadata,
            "graph_id": graph_id,
            "assistant_id": record.assistant_id,
            "run_attempt": 1,  # the server's attempt count: a loopline run is one attempt
            "run_id": record.run_id,
        }
        self.lifecycle = Lifecycle((), self.run_metadata)
        self.state: dict[str, Any] = {}  # the last values: what a node's task reads
        self.values_seen = 0
        self.sent: set[str] = set()  # checkpoints sent
        self.step = 0  # the superstep of the last checkpoint (or values) sent
        self.ran: str | None = None  # the node the last checkpoint sent had next
        self.history: ThreadHistory | None = None
        self.events: EventTranslator | None = None
        self.began = False

    async def prepare(self) -> None:
        """What the frames need besides the items: the run's agent (its system prompt
        for ``events``, its state keys for the checkpoints)."""
        spec = await self.tenant.spec_of_task(self.record.task_id)
        if self.record.thread_id and self.wanted & {"checkpoints", "debug"}:
            self.history = ThreadHistory(self.tenant.threads, spec)
        if "events" in self.wanted:
            graph_input = self.record.kwargs.get("input")
            system = spec.system_prompt if spec is not None else None
            self.events = EventTranslator(
                self.record.task_id,
                graph_input,
                [],
                system,
                name=self.record.assistant_id.partition("@")[0],
                metadata={
                    **{k: v for k, v in self.run_metadata.items() if k != "ls_integration"},
                    **({"thread_id": self.record.thread_id} if self.record.thread_id else {}),
                },
            )

    async def frames(self, item: Item) -> list[Frame]:
        out: list[Frame] = []
        if self.events is not None:
            if not self.began:
                self.began = True
                out.extend(("events", e) for e in self.events.begin())
            out.extend(("events", e) for e in self.events.take(item) if not self._graph_stream(e))
        mode, data = item
        if mode in LIFECYCLE_MODES:
            out.extend(self._tasks(self.lifecycle.take(mode, data)))
        elif mode == "values":
            self.state = dict(data)
            self.values_seen += 1
            # a new run's first values come with its input's and __start__'s checkpoints;
            # a resume's first values are the state it goes on from (no new checkpoint)
            ahead = -1 if self.record.is_resume else 1
            out.extend(await self._checkpoints(self.values_seen + ahead))
            if self.history is None:
                self.step = self.values_seen - 1
        return out

    def _graph_stream(self, event: dict[str, Any]) -> bool:
        """The graph's own ``on_chain_stream`` events carry its stream-mode chunks: the
        server sends those as the modes' frames, never as ``events``."""
        assert self.events is not None
        return bool(event["event"] == "on_chain_stream" and event["run_id"] == self.events.root)

    async def closing(self) -> list[Frame]:
        """The frames after the run's last item (it ended, or stopped for a human)."""
        out = await self._checkpoints(None)
        if self.events is not None:
            out.extend(("events", e) for e in self.events.end())
        return out

    # -- tasks ------------------------------------------------------------------------------

    def _tasks(self, items: list[Item]) -> list[Frame]:
        out: list[Frame] = []
        for mode, payload in items:
            if mode != "tasks":  # the ``tools`` mode's items, not asked for here
                continue
            if "input" in payload and payload["name"] != "tools":
                payload = {**payload, "input": self.state}  # the node reads the state
            kind = "task" if "input" in payload else "task_result"
            if "tasks" in self.wanted:
                out.append(("tasks", payload))
            if "debug" in self.wanted:
                out.append(("debug", _debug(kind, self.step + 1, payload)))
        return out

    # -- checkpoints -------------------------------------------------------------------------

    async def _checkpoints(self, through: int | None) -> list[Frame]:
        """The run's checkpoints not sent yet, the first ``through`` of them (None: all)."""
        if self.history is None:
            return []
        made = await self._made()
        out: list[Frame] = []
        for checkpoint in made if through is None else made[:through]:
            if checkpoint.id in self.sent:
                continue
            self.sent.add(checkpoint.id)
            self.step = checkpoint.step
            payload = self._payload(checkpoint, self.ran)
            self.ran = payload["next"][0] if payload["next"] else None
            if "checkpoints" in self.wanted:
                out.append(("checkpoints", payload))
            if "debug" in self.wanted:
                shown = {
                    **payload,
                    "checkpoint": _short(payload["config"]),
                    "parent_checkpoint": _short(payload["parent_config"]),
                }
                out.append(("debug", _debug("checkpoint", checkpoint.step, shown, checkpoint.at)))
        return out

    async def _made(self) -> list[Checkpoint]:
        """This run's checkpoints, oldest first (a resume's: those after it began)."""
        assert self.history is not None
        after_ms = int(self.record.log_after.partition("-")[0] or 0)
        made = await self.history.checkpoints(self.record.thread_id)
        return [c for c in made if c.run_id == self.record.task_id and c.at * 1000 > after_ms]

    def _payload(self, checkpoint: Checkpoint, ran: str | None) -> dict[str, Any]:
        """LangGraph's ``CheckpointPayload`` of a checkpoint made after node ``ran``:
        its tasks as they stand when it is made (none has run: no results)."""
        assert self.history is not None
        snapshot = self.history.snapshot(self.record.thread_id, checkpoint)
        tasks = [
            {"id": t.id, "name": t.name, "interrupts": list(t.interrupts), "state": None}
            for t in snapshot.tasks
        ]
        following = list(snapshot.next)
        if not following:  # the log has not shown yet what runs next
            following = list(_next_without_log(ran, snapshot.values.get("messages") or []))
            tasks = [_pending_task(checkpoint.id, n, i) for i, n in enumerate(following)]
        run = {
            "run_id": self.record.run_id,
            "graph_id": self.run_metadata["graph_id"],
            "assistant_id": self.record.assistant_id,
        }
        return {
            "config": _with(snapshot.config, run),
            "parent_config": _with(snapshot.parent_config, run),
            # the channels as they stand: a new thread's input checkpoint has no messages
            # saved, the stream reads the empty channel
            "values": _messages_as_dicts({"messages": [], **snapshot.values}),
            "metadata": {k: (snapshot.metadata or {}).get(k) for k in CHECKPOINT_METADATA},
            "next": following,
            "tasks": tasks,
        }


def _next_without_log(ran: str | None, messages: Sequence[BaseMessage]) -> tuple[str, ...]:
    """What ``create_agent``'s graph runs after node ``ran``, for a checkpoint the log
    has not shown the next node of yet (it is the newest): the model after ``__start__``
    and after the tools, after the model its tool calls (``history.next_after``). After
    a hook node it is left unknown (empty)."""
    if ran in (START, TOOLS):
        return (MODEL,)
    if ran == MODEL:
        return next_after(MODEL, messages)
    return ()


def _pending_task(checkpoint_id: str, name: str, index: int) -> dict[str, Any]:
    task_id = str(uuid.uuid5(uuid.NAMESPACE_OID, f"{checkpoint_id}:{index}"))
    return {"id": task_id, "name": name, "interrupts": [], "state": None}


def _debug(kind: str, step: int, payload: Any, at: float | None = None) -> dict[str, Any]:
    when = datetime.datetime.fromtimestamp(at or time.time(), datetime.UTC).isoformat()
    return {"step": step, "timestamp": when, "type": kind, "payload": payload}


def _with(config: Any, run: dict[str, Any]) -> dict[str, Any] | None:
    """A checkpoint's config with the run's keys, as the server's run config has them."""
    if not config:
        return None
    return {"configurable": {**config["configurable"], **run}}


def _short(config: dict[str, Any] | None) -> dict[str, Any] | None:
    """The server's ``checkpoint`` / ``parent_checkpoint``: a config's checkpoint keys."""
    if config is None:
        return None
    given = config["configurable"]
    keys = ("checkpoint_id", "thread_id", "checkpoint_ns")
    return {k: given[k] for k in keys if k in given}


def _messages_as_dicts(values: dict[str, Any]) -> dict[str, Any]:
    messages = values.get("messages")
    if isinstance(messages, list):
        shown = [m.model_dump() if isinstance(m, BaseMessage) else m for m in messages]
        return {**values, "messages": shown}
    return dict(values)


__all__ = ["SERVER_MODES", "ServerModes", "reads"]
