"""A thread's checkpoints, one per superstep as LangGraph's are, folded from what the bus
already records instead of stored: the thread's log of runs (``Names.thread_log``), each
run's own ordered event log (``Names.task_log``), and the thread's few entries that no
run wrote (``Names.thread_updates``: an ``update_state``, a run from an earlier
checkpoint, a saver's state that LangGraph wrote and loopline took in). A thread of N
supersteps costs the events of its N supersteps, where LangGraph's savers store the
whole state at each (N² in the length of the conversation).

The fold is LangGraph's checkpoint sequence for a run of ``create_agent``'s graph: the
input's checkpoint (``source`` "input", ``next`` ``('__start__',)``), the one after
``__start__``, then one after each node's superstep (a hook node, the model, the step's
tool calls together), ``next`` naming the nodes of the superstep that follows and
``tasks`` what they wrote. The supersteps are those ``loopline.stream_modes`` shows in
the ``updates`` and ``values`` modes (the same translator reads the log), so history
and streams agree. Steps count on across the runs of the thread, as LangGraph's do.

Checkpoint ids are LangGraph's kind (UUID version 6, ordered by time), made from the
time its event was logged and its place in the thread, so the same log always gives the
same ids. What this module offers the Python API, the gateway and the CLI:

- ``ThreadHistory(reader, spec)``: ``checkpoints(thread_id)`` (oldest first),
  ``find(thread_id, checkpoint_id)``, ``snapshots(thread_id, filter=, before=,
  limit=)`` (LangGraph's ``StateSnapshot``s, newest first), ``snapshot_at(thread_id,
  checkpoint_id)``;
- ``record_update`` / ``record_fork``: what ``update_state`` and a run from an earlier
  checkpoint add to the thread;
- ``copy_thread``: a thread's keys under another id, its runs' logs shared (they do not
  change once a run ended);
- ``current_snapshot`` and ``update_thread``: ``get_state`` of the thread as it stands
  and ``update_state``, the one way both are done (the Python API's and the gateway's).

A read folds only what came since the last one in this process (``_Memo``: the fold
through the thread's ended runs, which do not change, for the most recently read
threads).

Limits: a run's log lasts the deployment's retention (``Settings.retention_s``): runs
whose log is gone give no checkpoints (an update then starts from the thread's state as
it is, ``align_history``).
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import time
import uuid
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from langchain_core.messages import BaseMessage, ToolMessage

from contracts.agent import AgentSpec
from contracts.events import (
    AnyEvent,
    ApprovalRequested,
    DecisionsRefused,
    ModelResponded,
    NodesUpdated,
    TaskCompleted,
    TaskFailed,
    TaskSubmitted,
    parse_event,
)
from contracts.messages import Message, from_langchain, to_langchain
from contracts.streams import DATA_FIELD
from loopline.conversation import (
    HITL_NODE,
    snapshot,
    snapshot_values,
    state_codec,
    waiting_interrupts,
)
from loopline.stream_modes import ModeTranslator, StateView, interrupt_of, state_view
from loopline.threads import ThreadReader
from services.hooks import LS_INTEGRATION, hooks_for, merge_messages, without_stand_in_ids
from services.tasks.store import call_of_interrupt
from services.tasks.thread_runs import untracked_keys

if TYPE_CHECKING:
    from langgraph.types import StateSnapshot

    from loopline.client import Client
    from loopline.threads import ThreadValues

START = "__start__"
TOOLS = "tools"
MODEL = "model"
UPDATE_NODES = (None, MODEL, TOOLS)
"""The nodes ``update_state(as_node=...)`` may name: what follows them is known without
running the graph (the model's reply routes to the tools or the end, the tools' results
to the model)."""
UPDATE_KIND, FORK_KIND = "update", "fork"
KIND_FIELD, AFTER_FIELD, PARENT_FIELD = "kind", "after_run", "parent"
NODE_FIELD, TYPE_FIELD, VALUES_FIELD, RESUME_FIELD = "as_node", "type", "values", "resume"
REPLACE_FIELD = "replace"
RESUME_COPY, RESUME_CONTINUE = "copy", "continue"
"""A fork's way on without an input: from a copy of an earlier checkpoint, or from the
newest itself."""
UUID_EPOCH = 0x01B21DD213814000
"""100-ns intervals from the UUID epoch (1582-10-15) to the Unix epoch."""


def checkpoint_id(at: float, place: int, run_id: str) -> str:
    """A checkpoint id as LangGraph's ``uuid6`` makes them (time first, so ids sort by
    time), from the time its event was logged (``at``, seconds), its place in its run
    (the clock sequence) and its run (the node): the same log gives the same ids."""
    ticks = int(at * 10_000_000) + UUID_EPOCH
    node = uuid.uuid5(uuid.NAMESPACE_OID, run_id).int & 0xFFFFFFFFFFFF
    value = ((ticks >> 12) & 0xFFFFFFFFFFFF) << 80
    value |= (ticks & 0x0FFF) << 64
    value |= (place & 0x3FFF) << 48
    value |= node
    from langgraph.checkpoint.base.id import UUID  # with version 6, as its ids

    return str(UUID(int=value, version=6))


@dataclass(frozen=True)
class Task:
    """One of LangGraph's tasks of a checkpoint: the node to run next and, once it ran,
    what it wrote (``PregelTask.result``)."""

    name: str
    result: Any = None
    interrupts: tuple[Any, ...] = ()
    """What the node asked a human when it ran (``Interrupt``s)."""


@dataclass
class Checkpoint:
    """One state of the thread, as LangGraph checkpoints it after a superstep."""

    id: str
    parent_id: str | None
    step: int
    source: str
    """input, loop, update or fork (LangGraph's ``CheckpointMetadata.source``)."""
    run_id: str
    """The run that wrote it ("" for an ``update_state`` or a fork)."""
    at: float
    messages: list[BaseMessage]
    keys: dict[str, Any]
    """The state's keys besides the messages (decoded)."""
    next: tuple[str, ...] = ()
    tasks: tuple[Task, ...] = ()
    metadata: dict[str, Any] = field(default_factory=dict)
    """The run's config metadata (LangGraph keeps it in every checkpoint's)."""

    def config(self, thread_id: str) -> dict[str, Any]:
        return checkpoint_config(thread_id, self.id)


def checkpoint_config(thread_id: str, checkpoint_id: str) -> dict[str, Any]:
    return {
        "configurable": {
            "thread_id": thread_id,
            "checkpoint_ns": "",
            "checkpoint_id": checkpoint_id,
        }
    }


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value or "")


@dataclass
class _Entry:
    """One thing that made checkpoints, in the thread's order: a run, or an update or
    fork recorded between runs."""

    kind: str  # run | update | fork
    run_id: str = ""
    submitted: TaskSubmitted | None = None
    fields: dict[str, Any] = field(default_factory=dict)
    at: float = 0.0
    entry_id: str = ""

    @property
    def mark(self) -> str:
        """What names the entry among the thread's (``_Memo.marks``)."""
        return f"run:{self.run_id}" if self.kind == "run" else f"{self.kind}:{self.entry_id}"


class ThreadHistory:
    """The checkpoints of the threads ``reader`` reads, for runs of the agent ``spec``
    (None: an agent whose middleware this process cannot load: its state keys as
    stored, no reducers)."""

    def __init__(
        self, reader: ThreadReader, spec: AgentSpec | None = None, *, remember: bool = True
    ) -> None:
        self.reader = reader
        self.spec = spec
        self.remember = remember
        """Go on from the fold kept of the thread's ended runs (False: fold it all)."""
        self._views: dict[tuple[int, str], StateView] = {}

    # -- reading -------------------------------------------------------------------------

    async def checkpoints(self, thread_id: str) -> list[Checkpoint]:
        """Every checkpoint of the thread, oldest first (forks' branches included, as
        LangGraph's saver lists them). What ended runs and updates made is kept between
        calls (``_Memo``): a call folds only what came since."""
        entries = await self._entries(thread_id)
        key = (self.reader.names.prefix, self.reader.space.key(thread_id), self._spec_id())
        memo = _MEMOS.get(key) if self.remember else None
        if memo is not None and not await memo.kept(self.reader):
            memo = None  # its oldest run's log is gone (retention): fold what is left
        marks = [e.mark for e in entries]
        if memo is not None and marks[: len(memo.marks)] == memo.marks:
            fold, done = memo.restore(self), len(memo.marks)
        else:
            fold, done = _Fold(self._view, self._untracked()), 0
        rest = entries[done:]
        logs = await self._logs([e.run_id for e in rest if e.kind == "run"])
        final = done + next((i for i, e in enumerate(rest) if not _ended(e, logs)), len(rest))
        for i, entry in enumerate(rest, start=done):
            if i == final:
                _remember(key, _Memo.of(fold, marks[:final]))
            if entry.kind == "run":
                fold.run(entry, logs.get(entry.run_id, []))
            elif entry.kind == UPDATE_KIND:
                fold.update(entry, self._channels())
            else:
                fold.fork(entry)
        if final == len(entries) and final > done:
            _remember(key, _Memo.of(fold, marks))
        return fold.made

    def _spec_id(self) -> str:
        return self.spec.agent_id if self.spec is not None else ""

    async def find(self, thread_id: str, checkpoint_id: str) -> Checkpoint:
        """The thread's checkpoint of that id; ``ValueError`` when it has none (LangGraph
        answers a missing checkpoint with an empty state, but a run from it fails)."""
        for checkpoint in await self.checkpoints(thread_id):
            if checkpoint.id == checkpoint_id:
                return checkpoint
        raise ValueError(f"thread {thread_id} has no checkpoint {checkpoint_id}")

    async def latest(self, thread_id: str) -> Checkpoint | None:
        made = await self.checkpoints(thread_id)
        return _newest(made)

    async def snapshots(
        self,
        thread_id: str,
        *,
        filter: Mapping[str, Any] | None = None,
        before: str | None = None,
        limit: int | None = None,
        at: str | None = None,
    ) -> list[StateSnapshot]:
        """LangGraph's ``get_state_history``: the thread's states newest first, those
        whose metadata holds every item of ``filter``, older than checkpoint ``before``,
        at most ``limit``; ``at``: only that checkpoint (as a saver lists a config that
        names one)."""
        made = sorted(await self.checkpoints(thread_id), key=lambda c: c.id, reverse=True)
        out = []
        for checkpoint in made:
            if before is not None and checkpoint.id >= before:
                continue
            if at is not None and checkpoint.id != at:
                continue
            metadata = self.metadata(checkpoint)
            if filter and any(metadata.get(k, _MISSING) != v for k, v in filter.items()):
                continue
            out.append(self.snapshot(thread_id, checkpoint))
            if limit is not None and len(out) >= limit:
                break
        return out

    async def snapshot_at(self, thread_id: str, checkpoint_id: str) -> StateSnapshot:
        """LangGraph's ``get_state`` of a config with a ``checkpoint_id``: an empty state
        for an id the thread does not have, as LangGraph answers it."""
        from langgraph.types import StateSnapshot

        try:
            return self.snapshot(thread_id, await self.find(thread_id, checkpoint_id))
        except ValueError:
            config = checkpoint_config(thread_id, checkpoint_id)
            return StateSnapshot({}, (), config, None, None, None, (), ())  # type: ignore[arg-type]

    def metadata(self, checkpoint: Checkpoint) -> dict[str, Any]:
        """LangGraph's ``CheckpointMetadata``: the run's config metadata with
        ``create_agent``'s, then ``source``, ``step``, ``parents``."""
        from langgraph.checkpoint.base import EXCLUDED_METADATA_KEYS

        given = {
            k: v
            for k, v in checkpoint.metadata.items()
            if k not in EXCLUDED_METADATA_KEYS and not k.startswith("__")
        }
        return {
            **given,
            "source": checkpoint.source,
            "step": checkpoint.step,
            "parents": {},
            **LS_INTEGRATION,
        }

    def snapshot(self, thread_id: str, checkpoint: Checkpoint) -> StateSnapshot:
        from langgraph.types import PregelTask, StateSnapshot

        tasks: list[PregelTask] = []
        pushed = 0
        for task in checkpoint.tasks or tuple(Task(name) for name in checkpoint.next):
            task_id = str(uuid.uuid5(uuid.NAMESPACE_OID, f"{checkpoint.id}:{len(tasks)}"))
            if task.name == TOOLS:  # one task per call, sent to the tools node
                path: tuple[Any, ...] = ("__pregel_push", pushed, False)
                pushed += 1
            else:
                path = ("__pregel_pull", task.name)
            tasks.append(
                PregelTask(task_id, task.name, path, interrupts=task.interrupts, result=task.result)
            )
        parent = checkpoint.parent_id
        return StateSnapshot(
            values=self.values(checkpoint),
            next=checkpoint.next,
            config=checkpoint.config(thread_id),  # type: ignore[arg-type]
            metadata=self.metadata(checkpoint),  # type: ignore[arg-type]
            created_at=datetime.datetime.fromtimestamp(checkpoint.at, datetime.UTC).isoformat(),
            parent_config=checkpoint_config(thread_id, parent) if parent else None,  # type: ignore[arg-type]
            tasks=tuple(tasks),
            # what its tasks asked, answered since or not (LangGraph's snapshot of a
            # checkpoint gathers them so)
            interrupts=tuple(i for task in tasks for i in task.interrupts),
        )

    def values(self, checkpoint: Checkpoint) -> dict[str, Any]:
        """``StateSnapshot.values``: what LangGraph's channels hold (an input checkpoint
        of a new thread holds nothing)."""
        if checkpoint.source == "input" and not checkpoint.messages and not checkpoint.keys:
            return {}
        values: dict[str, Any] = {"messages": without_stand_in_ids(checkpoint.messages)}
        values.update(checkpoint.keys)
        return values

    # -- the parts --------------------------------------------------------------------------

    def _view(self, submitted: TaskSubmitted | None) -> StateView:
        """The run's view of the state keys: its agent's, from its input's keys (one
        per agent and input keys: most runs give none)."""
        given = submitted.state if submitted is not None else {}
        agent = submitted.agent if submitted is not None else None
        key = (
            id(agent) if self.spec is None else 0,
            json.dumps(given, sort_keys=True, default=str),
        )
        if key not in self._views:
            self._views[key] = self._new_view(submitted)
        return self._views[key]

    def _new_view(self, submitted: TaskSubmitted | None) -> StateView:
        spec = self.spec
        if spec is None and submitted is not None and isinstance(submitted.agent, AgentSpec):
            spec = submitted.agent
        if spec is None:
            return StateView()
        given = submitted.state if submitted is not None else {}
        try:
            codec = hooks_for(spec.agent_id, spec).channels.codec
            return state_view(spec, codec.decode(given))
        except Exception:  # middleware this process cannot load: keys as stored
            return StateView()

    def _channels(self) -> Any:
        if self.spec is None:
            return None
        try:
            return hooks_for(self.spec.agent_id, self.spec).channels
        except Exception:
            return None

    def _untracked(self) -> set[str]:
        if self.spec is None:
            return {"jump_to"}
        try:
            return untracked_keys(hooks_for(self.spec.agent_id, self.spec))
        except Exception:
            return {"jump_to"}

    async def _entries(self, thread_id: str) -> list[_Entry]:
        """The thread's runs (its log) and its updates and forks, in the order they
        happened: an update or fork comes after the run it names (``after_run``)."""
        reader = self.reader
        key = reader.space.key(thread_id)
        pipe = reader.redis.pipeline(transaction=False)
        pipe.xrange(reader.names.thread_log(key))
        pipe.xrange(reader.names.thread_updates(key))
        pipe.hgetall(reader.names.thread_runs(key))
        log, recorded, statuses = await pipe.execute()
        status = {_text(k): _text(v) for k, v in statuses.items()}
        between: dict[str, list[_Entry]] = {}
        for entry_id, raw in recorded:
            fields = {_text(k): v for k, v in raw.items()}
            entry = _Entry(
                kind=_text(fields.get(KIND_FIELD)),
                fields=fields,
                at=int(_text(entry_id).split("-")[0]) / 1000,
                entry_id=_text(entry_id),
            )
            between.setdefault(_text(fields.get(AFTER_FIELD)), []).append(entry)
        entries = list(between.pop("", []))
        seen: set[str] = set()
        parsed = _PARSED.setdefault((reader.names.prefix, key), {})
        _PARSED.move_to_end((reader.names.prefix, key))
        while len(_PARSED) > MEMO_THREADS:
            _PARSED.popitem(last=False)
        for entry_id, raw in log:
            event = parsed.get(entry_id, _MISSING)
            if event is _MISSING:  # read once: a log entry never changes
                data = raw.get(DATA_FIELD.encode())
                found = parse_event(data) if data is not None else None
                event = parsed[entry_id] = found if isinstance(found, TaskSubmitted) else None
            if not isinstance(event, TaskSubmitted) or event.task_id in seen:
                continue
            seen.add(event.task_id)
            if status.get(event.task_id) in ("rejected", "rolled_back", "queued"):
                continue  # left no checkpoint (LangGraph deletes a rolled-back run's)
            entries.append(_Entry("run", event.task_id, event, at=event.at))
            entries.extend(between.pop(event.task_id, []))
        for rest in between.values():  # after runs the log no longer names
            entries.extend(rest)
        return entries

    async def _logs(self, run_ids: Sequence[str]) -> dict[str, list[AnyEvent]]:
        """Each run's log (one round trip for all), with the reply a human is asked
        about where it waits beside the log (``stream_modes.with_asked_replies``)."""
        if not run_ids:
            return {}
        names = self.reader.names
        pipe = self.reader.redis.pipeline(transaction=False)
        for run_id in run_ids:
            pipe.xrange(names.task_log(run_id))
            pipe.hget(names.task_state(run_id), "pending")
        found = await pipe.execute()
        logs = {}
        for i, run_id in enumerate(run_ids):
            entries, pending = found[2 * i], found[2 * i + 1]
            events = []
            for _, raw in entries:
                data = raw.get(DATA_FIELD.encode())
                if data is not None:
                    events.append(parse_event(data))
            logs[run_id] = _with_waiting_reply(events, parse_event(pending) if pending else None)
        return logs


def _asker(event: ApprovalRequested) -> str:
    """Which task an interrupt belongs to: a hook's node, or a tool call's
    (``tools:<call id>``)."""
    if event.per_call or event.node == TOOLS:
        return f"{TOOLS}:{call_of_interrupt(event.call_id)}"
    return event.node or HITL_NODE


def _task_key(node: str, update: Any) -> str:
    """The key ``_asker`` gives the task of a node's update."""
    if node != TOOLS:
        return node
    messages = (update or {}).get("messages") or [None]
    return f"{TOOLS}:{getattr(messages[0], 'tool_call_id', '')}"


def _with_waiting_reply(events: list[AnyEvent], pending: AnyEvent | None) -> list[AnyEvent]:
    """A run waiting for a human on a model's reply: the reply (kept in the task's state
    until decided) before the request, after the hooks that ran on it logged with it."""
    if not isinstance(pending, ModelResponded) or not events:
        return events
    asked = events[-1]
    if not isinstance(asked, ApprovalRequested) or asked.step != pending.step:
        return events
    if any(isinstance(e, ModelResponded) and e.step == pending.step for e in events):
        return events
    at = len(events) - 1
    before = events[at - 1] if at else None
    if isinstance(before, NodesUpdated) and before.step == asked.step:
        at -= 1
    return [*events[:at], pending, *events[at:]]


_MISSING = object()

MEMO_THREADS = 256
"""Threads whose fold is kept (the most recently read)."""


@dataclass
class _Memo:
    """A thread's fold through the entries that no longer change (ended runs, updates,
    forks), named by ``marks``; its checkpoints are copied out to each call that goes on
    from it (a later entry sets what comes ``next`` on the last of them)."""

    marks: list[str]
    made: list[Checkpoint]
    head: int
    resume_next: bool

    @classmethod
    def of(cls, fold: _Fold, marks: list[str]) -> _Memo:
        made = [dataclasses.replace(c) for c in fold.made]
        head = next((i for i, c in enumerate(fold.made) if c is fold.head), -1)
        return cls(list(marks), made, head, fold.resume_next)

    async def kept(self, reader: ThreadReader) -> bool:
        """Whether the runs it folded checkpoints of still have their logs: the oldest
        one's is the first to expire."""
        first = next((c.run_id for c in self.made if c.run_id), None)
        return first is None or bool(await reader.redis.exists(reader.names.task_log(first)))

    def restore(self, history: ThreadHistory) -> _Fold:
        fold = _Fold(history._view, history._untracked())
        fold.made = [dataclasses.replace(c) for c in self.made]
        fold.head = fold.made[self.head] if self.head >= 0 else None
        fold.resume_next = self.resume_next
        return fold


_MEMOS: OrderedDict[tuple[str, str, str], _Memo] = OrderedDict()
_PARSED: OrderedDict[tuple[str, str], dict[Any, Any]] = OrderedDict()
"""Each thread's log entries as parsed: a run's ``TaskSubmitted`` (None: another
event), by entry id."""


def _remember(key: tuple[str, str, str], memo: _Memo) -> None:
    _MEMOS[key] = memo
    _MEMOS.move_to_end(key)
    while len(_MEMOS) > MEMO_THREADS:
        _MEMOS.popitem(last=False)


def _ended(entry: _Entry, logs: Mapping[str, list[AnyEvent]]) -> bool:
    """Whether what the entry makes can no longer change: an update or fork, a run that
    ended (or whose log is gone)."""
    if entry.kind != "run":
        return True
    events = logs.get(entry.run_id, [])
    return not events or isinstance(events[-1], (TaskCompleted, TaskFailed))


def _newest(made: Sequence[Checkpoint]) -> Checkpoint | None:
    return max(made, key=lambda c: c.id) if made else None


class _Fold:
    """The thread's checkpoints as its entries make them, in order."""

    def __init__(self, view_of: Any, untracked: set[str]) -> None:
        self.view_of = view_of
        self.untracked = untracked
        self.made: list[Checkpoint] = []
        self.head: Checkpoint | None = None
        """The checkpoint the next entry starts from (a fork moves it back)."""
        self.resume_next = False
        """The next run goes on from ``head`` without an input (a fork of a checkpoint
        whose next node was still to run)."""

    def _add(self, checkpoint: Checkpoint) -> Checkpoint:
        # ids sort by time: one logged in the same tick as its parent still sorts after it
        if self.made and checkpoint.id <= self.made[-1].id:
            checkpoint.id = checkpoint_id(
                _at_of(self.made[-1].id) + 1e-7, _place(checkpoint.id), checkpoint.run_id or "x"
            )
        self.made.append(checkpoint)
        self.head = checkpoint
        return checkpoint

    def _keys(self, keys: Mapping[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in keys.items() if k not in self.untracked}

    def run(self, entry: _Entry, events: list[AnyEvent]) -> None:
        """A run's checkpoints: its input's and ``__start__``'s (none when it goes on
        from a checkpoint without an input), then one per superstep of its log."""
        submitted = entry.submitted
        assert submitted is not None
        if not events:  # its log is gone (retention): no checkpoints of its own
            return
        view = self.view_of(submitted)
        head = self.head
        run = _RunFold(self, entry.run_id, view, dict(submitted.metadata), head)
        base = list(head.messages) if head is not None else []
        base_keys = dict(head.keys) if head is not None else {}
        if self.resume_next and head is not None:
            self.resume_next = False
            run.translator.state, run.translator.keys = base, base_keys
        else:
            inputs = [to_langchain(m) for m in submitted.messages]
            first = run.made("input", submitted.at, base, base_keys)
            first.next, first.tasks = (START,), (Task(START, {"messages": inputs}),)
            given = [(k, v) for k, v in view.initial.items() if k in submitted.state]
            # the input's keys join the thread's through their reducers (a new thread:
            # the reducers' empty values, as the run starts from them)
            keys = _joined(view, base_keys, given) if head is not None else dict(view.initial)
            run.translator.state, run.translator.keys = [*base, *inputs], keys
            run.made("loop", submitted.at, run.translator.state, keys)
        run.read(events)

    def update(self, entry: _Entry, channels: Any) -> None:
        """``update_state``: the values through the state's reducers, as ``as_node``
        wrote them."""
        from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

        head = self.head
        raw = entry.fields
        parent_id = _text(raw.get(PARENT_FIELD)) or (head.id if head is not None else "")
        parent = next((c for c in self.made if c.id == parent_id), head)
        values = JsonPlusSerializer().loads_typed((_text(raw[TYPE_FIELD]), raw[VALUES_FIELD]))
        messages = list(parent.messages) if parent is not None else []
        keys = dict(parent.keys) if parent is not None else {}
        if _text(raw.get(REPLACE_FIELD)):  # the whole state, as a saver held it
            messages, keys = [], {}
        if "messages" in values:
            messages = merge_messages(messages, _as_list(values["messages"]))
        others = [(k, v) for k, v in values.items() if k != "messages"]
        if others:
            keys = (
                channels.apply(keys, others) if channels is not None else {**keys, **dict(others)}
            )
        as_node = _text(raw.get(NODE_FIELD)) or None
        if parent is not None:
            # written as a node the parent had next: that task's result, as LangGraph
            # shows an update in place of the node's run (None stands for the model)
            parent.tasks = _with_result(parent, as_node or MODEL, dict(values))
        checkpoint = Checkpoint(
            checkpoint_id(entry.at, 0, entry.entry_id),
            parent.id if parent is not None else None,
            (parent.step if parent is not None else -2) + 1,
            "update",
            "",
            entry.at,
            without_stand_in_ids(messages),
            self._keys(keys),
            next=next_after(as_node, messages),
        )
        self._add(checkpoint)

    def fork(self, entry: _Entry) -> None:
        """A run from a checkpoint: with an input, the run's input checkpoint follows
        it; with none from an earlier one, LangGraph first copies it (``source``
        "fork") and goes on from the copy; with none from the newest, it goes on from
        the checkpoint itself."""
        parent_id = _text(entry.fields.get(PARENT_FIELD))
        parent = next((c for c in self.made if c.id == parent_id), None)
        if parent is None:
            return
        resume = _text(entry.fields.get(RESUME_FIELD))
        self.head = parent
        self.resume_next = resume in (RESUME_COPY, RESUME_CONTINUE) and bool(parent.next)
        if resume != RESUME_COPY:
            return
        copy = Checkpoint(
            checkpoint_id(entry.at, 0, entry.entry_id),
            parent.id,
            parent.step + 1,
            "fork",
            "",
            entry.at,
            list(parent.messages),
            dict(parent.keys),
            next=parent.next,
            tasks=tuple(Task(t.name) for t in parent.tasks),
            metadata=dict(parent.metadata),
        )
        self._add(copy)


class _RunFold:
    """One run's supersteps as its log shows them (``ModeTranslator``'s ``updates``
    and ``values``): each node's update is a task of the checkpoint before its
    superstep; the state after it, the next checkpoint."""

    def __init__(
        self,
        fold: _Fold,
        run_id: str,
        view: StateView,
        metadata: dict[str, Any],
        head: Checkpoint | None,
    ) -> None:
        self.fold = fold
        self.run_id = run_id
        self.metadata = metadata
        self.translator = ModeTranslator(run_id, ("updates", "values"), [], view)
        self.step = head.step if head is not None else -2
        self.place = 0
        self.last = head
        self.pending: list[Task] = []
        self.asked: dict[str, list[Any]] = {}
        """Node -> the interrupts it asked that its task does not hold yet."""

    def made(
        self, source: str, at: float, messages: Sequence[BaseMessage], keys: Mapping[str, Any]
    ) -> Checkpoint:
        self.step += 1
        self.place += 1
        parent = self.fold.head.id if self.fold.head is not None else None
        self.last = self.fold._add(
            Checkpoint(
                checkpoint_id(at, self.place, self.run_id),
                parent,
                self.step,
                source,
                self.run_id,
                at,
                list(messages),
                self.fold._keys(keys),
                metadata=self.metadata,
            )
        )
        return self.last

    def read(self, events: Sequence[AnyEvent]) -> None:
        ended = False
        for event in events:
            ended = ended or isinstance(event, TaskCompleted)
            if isinstance(event, (TaskFailed, DecisionsRefused)):
                break
            if isinstance(event, ApprovalRequested):  # kept with the task that asked
                self.asked.setdefault(_asker(event), []).append(interrupt_of(event))
            try:
                items = self.translator._event(event)
            except Exception:  # a failure the run reported: its checkpoints end here
                break
            for mode, data in items:
                if mode == "updates":
                    self._updates(data, event.at)
                elif mode == "values" and self.pending and not self._waiting(data):
                    self._close(event.at, data)
        if ended or self.last is None:
            return
        waiting = [
            Task(node.partition(":")[0], None, tuple(asked)) for node, asked in self.asked.items()
        ]
        if self.pending or waiting:  # under way, or waiting for a human
            self.last.next = tuple(t.name for t in [*self.pending, *waiting])
            self.last.tasks = (*self.pending, *waiting)

    def _waiting(self, values: Mapping[str, Any]) -> bool:
        """``values`` shown while the run stops for a human, mid-superstep (a tools
        step whose other calls wait): no superstep ended."""
        return "__interrupt__" in values or self.translator.tools is not None

    def _updates(self, data: Mapping[str, Any], at: float) -> None:
        for node, update in data.items():
            if node in ("__interrupt__", "__metadata__"):
                continue
            if node != TOOLS and self.pending:  # the superstep before ended
                self._close(at)
            asked = tuple(self.asked.pop(_task_key(node, update), ()))
            if node == TOOLS:
                update = self._with_todos(update)
            # a node that returned nothing wrote {} (LangGraph's task result)
            self.pending.append(Task(node, {} if update is None else update, asked))
            if node != TOOLS and update is None:  # no values follow
                self._close(at)

    def _in_call_order(self, tasks: list[Task]) -> list[Task]:
        """A tools superstep's tasks in the order of the calls (LangGraph's), not the
        order they ended in."""
        if not any(t.name == TOOLS for t in tasks):
            return tasks
        reply = next(
            (m for m in reversed(self.translator.state) if getattr(m, "tool_calls", None)), None
        )
        order = {call["id"]: i for i, call in enumerate(getattr(reply, "tool_calls", []))}

        def place(task: Task) -> int:
            messages = (task.result or {}).get("messages") or [None]
            return order.get(getattr(messages[0], "tool_call_id", ""), len(order))

        return sorted(tasks, key=place)

    def _with_todos(self, update: Any) -> Any:
        """A ``write_todos`` call's task result with the list it set: loopline's todos
        service applies it (no ``Command`` of the tool's says so)."""
        messages = (update or {}).get("messages") or []
        done = [m for m in messages if isinstance(m, ToolMessage) and m.name == "write_todos"]
        if not done or done[0].status == "error" or "todos" in update:
            return update
        for message in reversed(self.translator.state):
            for call in getattr(message, "tool_calls", None) or []:
                if call["id"] == done[0].tool_call_id:
                    return {**update, "todos": call["args"].get("todos")}
        return update

    def _close(self, at: float, values: Mapping[str, Any] | None = None) -> None:
        """A superstep ended: the checkpoint before it learns its ``next`` and
        ``tasks``; the one after it holds the state."""
        if self.last is not None:
            tasks = self._in_call_order(self.pending)
            self.last.next = tuple(t.name for t in tasks)
            self.last.tasks = tuple(tasks)
        self.pending = []
        translator = self.translator
        shown = dict(values) if values is not None else translator._values()
        messages = shown.pop("messages", translator.state)
        self.made("loop", at, messages, {**translator.keys, **shown})


def _joined(view: StateView, keys: dict[str, Any], writes: list[tuple[str, Any]]) -> dict[str, Any]:
    if not writes:
        return dict(keys)
    try:
        return view.channels.apply(keys, writes)
    except Exception:  # refused where the run started: it failed there
        return dict(keys)


def _with_result(checkpoint: Checkpoint, node: str, result: Any) -> tuple[Task, ...]:
    """The checkpoint's tasks, the first one of ``node`` without a result given one."""
    tasks = list(checkpoint.tasks) or [Task(name) for name in checkpoint.next]
    for i, task in enumerate(tasks):
        if task.name == node and task.result is None:
            tasks[i] = Task(node, result)
            return tuple(tasks)
    return tuple(checkpoint.tasks)


def _as_list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, (list, tuple)) else [value]


def next_after(as_node: str | None, messages: Sequence[BaseMessage]) -> tuple[str, ...]:
    """What LangGraph's agent runs after a state written as ``as_node``: the model
    after the tools; after the model, a tools task for each call of the last reply
    that no later tool message answers (``create_agent``'s own routing reads the
    messages so), else nothing."""
    from langchain.agents.factory import _fetch_last_ai_and_tool_messages

    if as_node == TOOLS:
        return (MODEL,)
    listed: list[Any] = list(messages)
    reply, answers = _fetch_last_ai_and_tool_messages(listed)
    if reply is None:
        return ()
    answered = {m.tool_call_id for m in answers}
    return tuple(TOOLS for call in reply.tool_calls if call["id"] not in answered)


def _at_of(checkpoint_id: str) -> float:
    value = uuid.UUID(checkpoint_id).int
    ticks = ((value >> 80) << 12) | ((value >> 64) & 0x0FFF)
    return (ticks - UUID_EPOCH) / 10_000_000


def _place(checkpoint_id: str) -> int:
    return (uuid.UUID(checkpoint_id).int >> 48) & 0x3FFF


# -- writing: what no run records ---------------------------------------------------------


async def _last_run(reader: ThreadReader, thread_id: str) -> str:
    runs = await reader.run_ids(thread_id)
    return runs[-1] if runs else ""


async def record_update(
    reader: ThreadReader,
    thread_id: str,
    values: Mapping[str, Any],
    as_node: str | None,
    parent_id: str | None,
    *,
    replace: bool = False,
) -> str:
    """An ``update_state`` on the thread (after its last run, from checkpoint
    ``parent_id``, None: its newest): the values as given (LangGraph's serializer), so
    the fold applies them through the reducers; ``replace``: they are the whole state
    (a saver's newest checkpoint that LangGraph wrote, taken in). The new checkpoint's
    id."""
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    kind, data = JsonPlusSerializer().dumps_typed(dict(values))
    fields = {
        KIND_FIELD: UPDATE_KIND,
        AFTER_FIELD: await _last_run(reader, thread_id),
        PARENT_FIELD: parent_id or "",
        NODE_FIELD: as_node or "",
        TYPE_FIELD: kind,
        VALUES_FIELD: data,
        REPLACE_FIELD: "1" if replace else "",
    }
    key = reader.names.thread_updates(reader.space.key(thread_id))
    entry_id = _text(await reader.redis.xadd(key, fields))  # type: ignore[arg-type]
    at = int(entry_id.split("-")[0]) / 1000
    made = await ThreadHistory(reader).checkpoints(thread_id)
    for checkpoint in reversed(made):
        if checkpoint.source == "update" and abs(checkpoint.at - at) < 1e-6:
            return checkpoint.id
    return checkpoint_id(at, 0, entry_id)


async def record_fork(reader: ThreadReader, thread_id: str, parent_id: str, *, resume: str) -> None:
    """A run from checkpoint ``parent_id`` is about to start (or, from an earlier one
    whose next node is none, a copy of it is the thread's state): ``resume``
    ``RESUME_COPY`` or ``RESUME_CONTINUE`` without an input, "" with one."""
    fields = {
        KIND_FIELD: FORK_KIND,
        AFTER_FIELD: await _last_run(reader, thread_id),
        PARENT_FIELD: parent_id,
        RESUME_FIELD: resume,
    }
    key = reader.names.thread_updates(reader.space.key(thread_id))
    await reader.redis.xadd(key, fields)  # type: ignore[arg-type]


async def copy_thread(reader: ThreadReader, source: str, target: str) -> None:
    """LangGraph's ``copy_thread``: the target thread gets the source's state and every
    checkpoint; the runs' logs are shared, not copied (a run's log does not change once
    it ended). A target that exists, or a source with a run going, is refused."""
    names, redis = reader.names, reader.redis
    info = await reader.info(source)
    if info is None:
        raise ValueError(f"thread {source} does not exist")
    if info.active:
        raise ValueError(f"thread {source} has a run going ({info.active}): copy it between runs")
    if await reader.info(target) is not None:
        raise ValueError(f"thread {target} exists already")
    src, dst = reader.space.key(source), reader.space.key(target)
    parts = ("state", "messages", "todos", "runs", "log", "updates")
    for part in parts:
        dumped = await redis.dump(names.thread_key(src, part))
        if dumped is not None:
            await redis.restore(names.thread_key(dst, part), 0, dumped)
    await redis.persist(names.thread_state(dst))
    await redis.zadd(names.threads, {dst: time.time()})


# -- the thread as it stands, and an update of it -----------------------------------------


async def current_snapshot(client: Client, history: ThreadHistory, thread_id: str) -> StateSnapshot:
    """``get_state`` without a checkpoint: the values as the run left them (or stand
    now, while it goes) with the interrupts a waiting run asked, the identity of the
    newest checkpoint and, between runs, what comes next (an update may have set it).
    ``history`` names the thread's agent (its ``spec``)."""
    spec = _spec_of(history)
    state = await history.reader.current(thread_id)
    waits = await waiting_interrupts(client, state)
    latest = await history.latest(thread_id)
    live: StateSnapshot = snapshot(spec, state, waits)
    if latest is None:
        return live
    folded = history.snapshot(thread_id, latest)
    between = state.status != "running"
    return live._replace(
        config=folded.config,
        parent_config=folded.parent_config,
        metadata=folded.metadata,
        created_at=folded.created_at if between else live.created_at,
        next=folded.next if between else live.next,
        tasks=folded.tasks if between else live.tasks,
    )


async def update_thread(
    history: ThreadHistory,
    thread_id: str,
    values: Mapping[str, Any],
    as_node: str | None,
    at: str | None,
) -> Checkpoint:
    """LangGraph's ``update_state`` on a thread between runs: a new checkpoint whose
    values are checkpoint ``at``'s (None: the newest) with ``values`` through the
    state's reducers, written as node ``as_node``, which decides what runs next; the
    thread's working copy (what its next run starts from) becomes it. ``as_node``
    naming a middleware's hook is refused (``NotImplementedError``: the bus runs on from
    the model or the tools only), so is a thread with a run going or waiting
    (``ValueError``). The new checkpoint."""
    if as_node not in UPDATE_NODES:
        raise NotImplementedError(
            f"update_state(as_node={as_node!r}) is not implemented: an update is "
            "written as the model's or the tools' (as_node='model', 'tools' or None)"
        )
    spec, reader = _spec_of(history), history.reader
    info = await reader.info(thread_id)
    if info is not None and info.active:
        raise ValueError(
            f"thread {thread_id} has a run going or waiting ({info.active}): "
            "update_state applies to a thread between runs"
        )
    # what the reducers refuse is refused here, before anything is recorded
    current = await reader.current(thread_id)
    updated_values(current, values, hooks_for(spec.agent_id, spec).channels)
    if at is None:
        await align_history(history, thread_id, current)
    made = await record_update(reader, thread_id, values, as_node, at)
    checkpoint = await history.find(thread_id, made)
    await set_working_copy(history, thread_id, checkpoint)
    return checkpoint


async def align_history(history: ThreadHistory, thread_id: str, current: ThreadValues) -> None:
    """Before an update of the newest state: where the history's newest checkpoint
    does not hold the thread's state (the logs of the runs that made it are past the
    retention), the state as it is becomes a checkpoint, so the update applies to it,
    not to what is left of the history."""
    latest = await history.latest(thread_id)
    folded = len(latest.messages) if latest is not None else 0
    if current.messages and folded != len(current.messages):
        values = snapshot_values(_spec_of(history), current)
        await record_update(history.reader, thread_id, values, None, None, replace=True)


async def set_working_copy(history: ThreadHistory, thread_id: str, checkpoint: Checkpoint) -> None:
    """The thread's working copy in Redis (what its next run starts from) becomes the
    checkpoint's state."""
    keys = dict(checkpoint.keys)
    todos = keys.pop("todos", None)
    messages = [from_langchain(m) for m in checkpoint.messages]
    codec = state_codec(_spec_of(history))
    await history.reader.replace(thread_id, messages, todos, codec.dumps(keys))


def updated_values(
    state: Any, values: Mapping[str, Any], channels: Any
) -> tuple[list[Message], list[dict[str, Any]] | None, dict[str, Any]]:
    """A thread's messages, todo list and middleware keys with ``values`` applied as
    LangGraph's ``update_state`` applies them: ``messages`` through ``add_messages`` (an
    update by id replaces, ``RemoveMessage`` removes), the other keys through the
    state's reducers."""
    from langgraph.graph.message import add_messages

    messages: list[Message] = list(state.messages)
    if "messages" in values:
        merged = add_messages([to_langchain(m) for m in messages], values["messages"])
        messages = [from_langchain(m) for m in merged]
    others = [(k, v) for k, v in values.items() if k != "messages"]
    keys = channels.apply(state.keys, others) if others else dict(state.keys)
    todos = keys.pop("todos", state.todos)
    return messages, todos, keys


def _spec_of(history: ThreadHistory) -> AgentSpec:
    if history.spec is None:
        raise ValueError("the thread's agent is not known: no run of it yet")
    return history.spec
