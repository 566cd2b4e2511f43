"""How a transition runs: its Lua script built from its file, its typed arguments, its
reply decoded by name, and its fusion with the entry's commit.

A transition is a class of arguments (``Args``: a frozen dataclass whose fields are the
script's ARGV, by name) and a Lua file in ``lua/`` whose first line lists the same names
(``-- ARGV: step cause ...``, checked when the script is built). The script the server
runs is assembled from parts, never by hand: the arguments as a table ``arg`` (so the
body reads ``arg.step``, not ``ARGV[1]``), the shared functions of ``lua/common.lua``, the
body as the function ``transition()``, then either ``return reply(transition())`` or, for
a fused call, ``lua/fused.lua``, which also commits the entry being handled.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar

from contracts.streams import DATA_FIELD, Names
from services.connection import ScriptCall
from services.entry import COMMIT_LUA, CURRENT, PendingCommit, commit_parts
from services.tasks.state import TaskKeys, TaskState

Register = Callable[[str], ScriptCall]
"""How scripts are registered (``Runtime.register_script``: the lean client or redis-py)."""

LUA_DIR = Path(__file__).parent / "lua"


@cache
def lua_file(name: str) -> str:
    return (LUA_DIR / f"{name}.lua").read_text().replace("__DATA__", DATA_FIELD)


def _argv_value(value: Any) -> Any:
    """One argument as the script gets it: JSON for lists and dicts, "" for None."""
    if isinstance(value, bool):
        return "1" if value else "0"
    if value is None:
        return ""
    if isinstance(value, list | dict):
        return json.dumps(value)
    return value


@dataclass(frozen=True, slots=True)
class Args:
    """A transition's arguments; subclasses name their Lua file in ``LUA``."""

    LUA: ClassVar[str]
    RETURNS_STATE: ClassVar[bool] = True
    """Whether the script replies with the task's state (``TaskState``)."""

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return _field_names(cls)

    def argv(self) -> list[Any]:
        return [_argv_value(getattr(self, name)) for name in self.names()]


_FIELD_NAMES: dict[type[Args], tuple[str, ...]] = {}


def _field_names(cls: type[Args]) -> tuple[str, ...]:
    found = _FIELD_NAMES.get(cls)
    if found is None:
        found = _FIELD_NAMES[cls] = tuple(f.name for f in dataclasses.fields(cls))
    return found


def declared_argv(lua: str) -> tuple[str, ...]:
    """The argument names a Lua file declares on its first line."""
    first = lua.splitlines()[0]
    if not first.startswith("-- ARGV:"):
        raise ValueError(f"a transition's Lua must start with '-- ARGV: names', not {first!r}")
    return tuple(first.removeprefix("-- ARGV:").split())


def checked_body(args: type[Args]) -> tuple[str, str]:
    """A script's Lua body and its ``arg`` table (ARGV by name), once the body's declared
    ARGV is checked against the arguments class."""
    body = lua_file(args.LUA)
    names = args.names()
    if declared_argv(body) != names:
        raise ValueError(
            f"lua/{args.LUA}.lua declares ARGV {declared_argv(body)}, {args.__name__} has {names}"
        )
    return body, ", ".join(f"{name} = ARGV[{i}]" for i, name in enumerate(names, 1))


FUSED_SNAPSHOT = """
local full_snapshot = snapshot
local function snapshot(applied)
  return {applied = applied}
end
"""
"""In a fused script the transition's ``snapshot(applied)`` reads nothing: ``fused.lua``
reads the few fields the commit decides on, and the whole state (``full_snapshot``) only
when the entry is left to its handler."""


def build_script(args: type[Args], *, fused: bool = False) -> str:
    """The whole script of a transition (``fused``: with the entry's commit)."""
    body, table = checked_body(args)
    names = args.names()
    parts = [
        f"local TASK_KEYS, ARGC = {TaskKeys.COUNT}, {len(names)}\n",
        f"local arg = {{{table}}}\n",
        lua_file("common"),
        COMMIT_LUA if fused else "",
        # fused: the transition's reply is `applied` alone; fused.lua reads what it needs
        FUSED_SNAPSHOT if fused else "",
        "local function transition()\n",
        body,
        "\nend\n",
    ]
    if fused:
        parts.append(lua_file("fused"))
    else:
        runner = "reply(transition())" if args.RETURNS_STATE else "transition()"
        parts.append(f"return {runner}\n")
    return "".join(parts)


A = TypeVar("A", bound=Args)


class Transition(Generic[A]):
    """One state change of a task, run atomically on its keys. A ``Fusion`` makes the
    same script also commit the entry being handled (``lua/fused.lua``)."""

    def __init__(
        self, args: type[A], register: Register, names: Names, *, fusable: bool = False
    ) -> None:
        self.args = args
        self.names = names
        self._plain = register(build_script(args))
        self._fused = register(build_script(args, fused=True)) if fusable else None

    async def __call__(self, task_id: str, args: A, fusion: Fusion | None = None) -> TaskState:
        keys = TaskKeys.of(self.names, task_id).all()
        if fusion is None or self._fused is None:
            reply = await self._plain(keys=keys, args=args.argv())
            return TaskState.from_reply(reply)
        more_keys, more_args = fusion.parts()
        reply = await self._fused(keys=keys + more_keys, args=args.argv() + more_args)
        state = TaskState.from_reply(reply)
        if state.committed:
            fusion.entry.committed = True  # its handler must publish nothing more
        return state

    async def raw(self, task_id: str, args: A) -> list[Any]:
        """The reply as it is, for scripts that do not reply with the state."""
        keys = TaskKeys.of(self.names, task_id).all()
        return list(await self._plain(keys=keys, args=args.argv()))


@dataclass(frozen=True)
class Fusion:
    """Commit the entry being handled with the transition, when it lands in a predicted
    state: applied now, in one of ``phases``. In ``publish_phase`` it also publishes
    ``outputs`` (encoded events with their streams), if the transcript then has
    ``expect_len`` messages (what the outputs were built for; otherwise nothing is
    committed and the caller goes on as usual); a task that ended leaves the deadline set.
    """

    entry: PendingCommit
    task_id: str
    phases: tuple[str, ...]
    publish_phase: str
    outputs: Sequence[tuple[str, bytes]]
    deadlines_key: str
    expect_len: int | None = None

    @classmethod
    def of_current_entry(
        cls,
        task_id: str,
        *,
        phases: tuple[str, ...],
        publish_phase: str,
        outputs: Sequence[tuple[str, bytes]],
        deadlines_key: str,
        expect_len: int | None,
        cluster: Names | None,
    ) -> Fusion | None:
        """None where a transition cannot commit the entry: outside a consumer's handler,
        or on a Redis Cluster (``cluster``: the deployment's names there) where some key
        the commit takes is not in the task's slot. With partitioned work streams
        (``Names.partitions``) every key is, as long as the entry came from the task's
        partition; without them (or for an entry from the one ``tasks`` stream) the
        transition runs alone and the entry is committed in steps after it."""
        entry = CURRENT.get()
        if entry is None or entry.committed:
            return None
        fusion = cls(entry, task_id, phases, publish_phase, outputs, deadlines_key, expect_len)
        if cluster is not None and not cluster.same_slot(task_id, fusion.keys()):
            return None
        return fusion

    def keys(self) -> list[str]:
        """Every key the fused commit takes besides the task's own."""
        entry = self.entry
        return [
            *(stream for stream, _ in self.outputs),
            self.deadlines_key,
            *(stream for stream, _ in entry.outbox),
            *(key for key, _, _ in entry.writes),
            entry.stream,
        ]

    def parts(self) -> tuple[list[str], list[Any]]:
        """The KEYS and ARGV that follow the transition's own (``lua/fused.lua``)."""
        keys = [stream for stream, _ in self.outputs] + [self.deadlines_key]
        args: list[Any] = [
            "," + ",".join(self.phases) + ",",
            self.publish_phase,
            "" if self.expect_len is None else self.expect_len,
            len(self.outputs),
            *(data for _, data in self.outputs),
            self.task_id,
        ]
        more_keys, more_args = commit_parts(
            self.entry.outbox, self.entry.writes, ack=self.entry.ack
        )
        return keys + more_keys, args + more_args
