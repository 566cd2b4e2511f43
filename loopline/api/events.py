"""A run's stream items, each with its position, so a client that reconnects with the
last id it saw gets every later item once: no gap, no duplicate.

The items are the stream-mode layer's (``loopline.stream_modes.ModeTranslator``), made
from two append-only streams of the task: its log and its chunk stream. Each item comes
from one entry of one of them (a chunk from its batch, the rest from the log event that
made it), and the items of one entry come in a fixed order, so an item's position is
(source, entry id, index within the entry). An event id carries the last position seen
in both sources (``Cursor``); a reconnect replays the run's entries from its start
through a fresh translator, which rebuilds the same items, and skips every item at or
before the cursor of its source.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

from langchain_core.messages import BaseMessage

from contracts.agent import AgentSpec
from contracts.chunks import ChunkBatch
from contracts.events import AnyEvent, DecisionsRefused, TaskFailed
from contracts.messages import to_langchain
from loopline.api.records import RunRecord
from loopline.api.tenant import NotFound, Tenant
from loopline.api.wire import BadRequest
from loopline.client import LostTaskWatch
from loopline.stream_modes import (
    Item,
    ModeTranslator,
    StateView,
    prime,
    state_view,
    thread_steps,
    with_asked_replies,
)

Position = tuple[int, int, int]
"""(entry milliseconds, entry sequence, index of the item within the entry)."""
START: Position = (0, 0, -1)


def entry_position(entry_id: str, index: int) -> Position:
    ms, _, seq = entry_id.partition("-")
    return int(ms or 0), int(seq or 0), index


@dataclass(frozen=True)
class Cursor:
    """The last item a client saw from the task's log and from its chunk stream."""

    log: Position = START
    chunks: Position = START

    def encode(self) -> str:
        return f"{_pos(self.log)}|{_pos(self.chunks)}"

    @classmethod
    def decode(cls, text: str) -> Cursor:
        """A ``Last-Event-ID``; ``ValueError`` when it is not one of this gateway's."""
        log, sep, chunks = text.partition("|")
        if not sep:
            raise ValueError(f"not a stream position: {text!r}")
        return cls(_unpos(log), _unpos(chunks))

    def seen(self, source: str, position: Position) -> bool:
        return position <= (self.log if source == "log" else self.chunks)

    def after(self, source: str, position: Position) -> Cursor:
        return replace(self, **{source: position})


def _pos(p: Position) -> str:
    return f"{p[0]}-{p[1]}.{p[2]}"


def _unpos(text: str) -> Position:
    entry, _, index = text.rpartition(".")
    ms, _, seq = entry.partition("-")
    return int(ms), int(seq), int(index)


@dataclass(frozen=True)
class Failed:
    """The task failed, or refused the answers this run resumed it with: the stream
    says so (unless it was stopped) and ends."""

    event: TaskFailed | DecisionsRefused


Positioned = tuple[str, Position, Item | Failed]


class PositionedTranslator(ModeTranslator):
    """``ModeTranslator`` whose items say where they come from."""

    def __init__(self, task_id: str, modes: Sequence[str], view: StateView | None = None) -> None:
        super().__init__(task_id, modes, [], view)
        self._entry_of: dict[int, str] = {}
        self._places: list[Position] = []  # of released chunk-stream items, in order

    def take_positioned(
        self, batches: list[tuple[str, ChunkBatch]], events: list[tuple[str, AnyEvent]]
    ) -> list[Positioned]:
        """``take``, each item with its position (in the same order)."""
        for entry_id, batch in batches:
            self._entry_of[id(batch)] = entry_id
            self.pending.append(batch)
        out: list[Positioned] = []
        made: dict[str, int] = {}  # items made per entry (one entry may bring two events)
        for entry_id, event in events:
            if self.done:  # what follows in the log is a later run's (a resume's)
                return out
            out.extend(self._placed_chunks(self._release_before(event)))
            first = made.get(entry_id, 0)
            if isinstance(event, TaskFailed) or (
                isinstance(event, DecisionsRefused) and self.resumed
            ):  # the translator would raise its exception (a refusal: of this resume's)
                self.done = True
                out.append(("log", entry_position(entry_id, first), Failed(event)))
                return out
            items = self._event(event)
            made[entry_id] = first + len(items)
            out.extend(
                ("log", entry_position(entry_id, first + k), item) for k, item in enumerate(items)
            )
            out.extend(self._placed_chunks(self._release_after(event)))
        if not self.done:
            out.extend(self._placed_chunks(self._release(self._due)))
        return out

    def _batch_items(self, batch: ChunkBatch) -> list[Item]:
        items = super()._batch_items(batch)
        entry = self._entry_of.pop(id(batch))
        self._places.extend(entry_position(entry, n) for n in range(len(items)))
        return items

    def _placed_chunks(self, items: list[Item]) -> list[Positioned]:
        """Released chunk-stream items with the positions ``_batch_items`` noted."""
        places, self._places = self._places[: len(items)], self._places[len(items) :]
        return [("chunks", p, item) for p, item in zip(places, items, strict=True)]


async def base_state(tenant: Tenant, record: RunRecord) -> tuple[list[BaseMessage], dict[str, Any]]:
    """The state when the run begins: its messages (a resume's as its record says; a new
    run's are the thread's transcript through the run's inputs, read once the task
    started) and the other keys the thread's earlier runs left (the todo list,
    middleware state)."""
    state = await tenant.threads.of_run(record.thread_id, record.task_id)
    if record.is_resume:
        messages = state.messages[: record.base_len]
    else:
        messages = state.through(record.input_ids[-1] if record.input_ids else None)
    return [to_langchain(m) for m in messages], state.keys


async def _registered_spec(tenant: Tenant, ref: str) -> AgentSpec | None:
    if not ref:
        return None
    try:
        return (await tenant.assistant(ref)).spec
    except (NotFound, BadRequest):  # removed since: the task's own copy
        return None


async def run_view(tenant: Tenant, record: RunRecord) -> StateView:
    """What a run's ``values`` and ``updates`` show besides the messages: its agent's
    output schema keys, as LangGraph's server shows them, folded by their reducers
    (``loopline.stream_modes.state_view``; every key when the agent's middleware cannot
    be loaded here). The agent is the registration the run started (kept by the
    gateway: known before the task has started), else the spec the task stored."""
    spec = await _registered_spec(tenant, record.agent_ref)
    if spec is None:
        spec = await tenant.spec_of_task(record.task_id)
    if spec is None:
        return StateView()
    try:
        return state_view(spec, {}, output_only=True)
    except Exception:  # middleware this process cannot import
        return StateView()


async def run_items(
    tenant: Tenant, record: RunRecord, modes: Sequence[str], *, block_ms: int = 1000
) -> AsyncIterator[Positioned]:
    """Every item of the run from its start, positioned, until it ends, fails or stops
    at an interrupt. A resume goes on from the task's log before it (``prime``)."""
    view = await run_view(tenant, record)
    translator = PositionedTranslator(record.task_id, modes, view)
    client = tenant.client
    counts_steps = "messages" in modes and bool(record.thread_id)  # LangGraph's go on
    if record.is_resume:  # it goes on from where the run before it stopped
        if counts_steps:
            translator.superstep = await thread_steps(client, record.thread_id, translator)
        await prime(client, translator, record.task_id, record.log_after)
        messages, keys = await base_state(tenant, record)
        translator.resume_from(messages, record.answered, keys)
    watch = LostTaskWatch(client, record.task_id)
    await watch.begin()
    chunks_after, log_after = record.chunks_after, record.log_after
    started = False
    while not translator.done:
        batches, events = await client.feed(record.task_id, chunks_after, log_after, block_ms)
        if batches:
            chunks_after = batches[-1][0]
        if events:
            log_after = events[-1][0]
            watch.seen = True
        elif not batches and (lost := await watch.lost()) is not None:
            # Redis lost the task: no entry of its log will come; placed after them all
            yield "log", entry_position(log_after, 1 << 30), Failed(lost)
            return
        if not started and (events or record.is_resume):
            started = True
            if not record.is_resume:
                translator.state, keys = await base_state(tenant, record)
                translator.keys = {**translator.keys, **keys}
                if counts_steps:  # the earlier runs have ended: this one started
                    translator.superstep = await thread_steps(client, record.thread_id, translator)
            for k, item in enumerate(translator.begin()):
                yield "log", entry_position(record.log_after, k), item
        events = await with_asked_replies(client, record.task_id, events)
        for positioned in translator.take_positioned(batches, events):
            yield positioned


__all__ = ["Cursor", "Failed", "run_items"]
