"""The parameters every route takes, declared in one place, and the one function that
reads a body or a query string against them.

Each route's parameters are a pydantic model that forbids anything it does not declare:
a parameter of LangGraph's Agent Server API that loopline does not implement
(``interrupt_before``, ``checkpoint``, ``cancel(action="rollback")``, ...) is answered
422 with its name and why,
never accepted and ignored. A field is declared here only where the gateway acts on it;
a few are declared with only the values whose meaning loopline already has (a stream is
always resumable, a run always goes on when its client leaves).

A JSON ``null`` is the parameter left out (``langgraph_sdk`` drops them itself).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
)
from starlette.datastructures import QueryParams

from contracts.events import MultitaskStrategy
from loopline.api.wire import BadRequest
from loopline.graph import REFUSED_KEYWORDS

StreamMode = Literal[
    "values",
    "updates",
    "messages",
    "messages-tuple",
    "custom",
    "events",
    "debug",
    "checkpoints",
    "tasks",
]
"""The stream modes the gateway streams (``messages-tuple`` is LangGraph's name for the
``messages`` mode's ``(chunk, metadata)`` pairs; ``messages`` its older shape; the last
four are LangGraph's server's: ``loopline.api.run_modes``)."""

UNSUPPORTED = "not supported by this gateway (loopline refuses it rather than ignore it)"

RunStatus = Literal["pending", "running", "error", "success", "timeout", "interrupted"]


class Params(BaseModel):
    """A route's parameters: what is not declared is refused."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def _listed(value: Any) -> Any:
    """One value or a list of them (a query string repeats a key; a body may give a
    single string where LangGraph takes a list)."""
    if value is None:
        return value
    if isinstance(value, str):
        return [value] if value else []
    return value


# -- runs ----------------------------------------------------------------------------


class Command(Params):
    """``command``: loopline answers interrupts (``resume``); ``update`` and ``goto``
    are not implemented."""

    resume: Any


class RunConfigBody(Params):
    """A run's ``config``: what loopline takes from a ``RunnableConfig``. Other
    ``configurable`` keys (``checkpoint_id`` to run from an earlier state, values a graph
    reads from its config) never reach a loopline agent, so they are refused."""

    recursion_limit: int | None = Field(None, ge=1)
    tags: list[str] = Field(default_factory=list)
    run_name: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    configurable: dict[str, Any] = Field(default_factory=dict)

    @field_validator("configurable")
    @classmethod
    def _thread_only(cls, value: dict[str, Any]) -> dict[str, Any]:
        # thread_id: the run's thread is the path's, as LangGraph's server sets it
        others = sorted(set(value) - {"thread_id"})
        if others:
            raise ValueError(f"{', '.join(others)}: {UNSUPPORTED}")
        return value


class RunBody(Params):
    """``POST /threads/{id}/runs[/stream|/wait]``, ``POST /runs[/stream|/wait]``."""

    assistant_id: str = Field(min_length=1)
    input: Any = None
    command: Command | None = None
    config: RunConfigBody = Field(default_factory=RunConfigBody)
    context: dict[str, Any] | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    stream_mode: list[StreamMode] = Field(default_factory=lambda: list[StreamMode](["values"]))
    multitask_strategy: MultitaskStrategy = "reject"
    if_not_exists: Literal["reject", "create"] = "reject"
    webhook: str | None = Field(None, min_length=1)
    """Where the run is POSTed when it ends (``loopline.api.webhooks``)."""
    stream_subgraphs: bool = False
    """Accepted either way: a loopline agent's stream has no subgraph namespaces (what
    LangGraph streams for a graph without subgraphs)."""
    stream_resumable: bool = False
    """Accepted either way: every loopline stream can be resumed (``Last-Event-ID``)."""
    on_disconnect: Literal["continue"] | None = None
    """A run goes on when its client leaves; ``cancel`` is not implemented."""
    on_completion: Literal["delete", "keep"] | None = None
    """A stateless run's thread: ``delete`` (the default) leaves none behind, ``keep``
    keeps it as an ordinary thread."""
    after_seconds: float | None = Field(None, ge=0)
    """Start the run this many seconds later (pending meanwhile)."""
    interrupt_before: Any = None
    interrupt_after: Any = None
    """LangGraph's static breakpoints: refused with why (``loopline.graph``)."""
    durability: Literal["sync", "async"] | None = None
    """Every step is committed before the next starts, which both promise; ``exit``
    (checkpoint only at the end) is not implemented."""

    @field_validator("stream_mode", mode="before")
    @classmethod
    def _modes(cls, value: Any) -> Any:
        return _listed(value) or ["values"]

    @field_validator("interrupt_before", "interrupt_after")
    @classmethod
    def _no_breakpoints(cls, value: Any, info: ValidationInfo) -> Any:
        # the loop runs a task's steps without stopping between nodes, and a run
        # cannot start at the tools: what an interrupt_before=["tools"] run goes on from
        if value:
            raise ValueError(REFUSED_KEYWORDS[str(info.field_name)])
        return value


class RunsQuery(Params):
    """``GET /threads/{id}/runs``."""

    limit: int = Field(10, ge=0)
    offset: int = Field(0, ge=0)
    status: RunStatus | None = None
    select: list[str] | None = None

    @field_validator("select", mode="before")
    @classmethod
    def _select(cls, value: Any) -> Any:
        return _listed(value)


class CancelQuery(Params):
    """``POST .../runs/{run_id}/cancel`` and ``POST /runs/cancel``: ``interrupt`` stops
    the run and keeps what it did; ``rollback`` stops it and removes it with its changes
    to the thread."""

    wait: bool = False
    action: Literal["interrupt", "rollback"] = "interrupt"


class CancelManyBody(Params):
    """``POST /runs/cancel``: the runs ``run_ids`` of ``thread_id``, or every thread's
    runs with ``status``."""

    thread_id: str | None = None
    run_ids: list[str] | None = None
    status: Literal["pending", "running", "all"] | None = None


class JoinQuery(Params):
    """``GET .../runs/{run_id}/join`` and ``.../stream``."""

    stream_mode: list[StreamMode] = Field(default_factory=list)
    cancel_on_disconnect: bool = False

    @field_validator("stream_mode", mode="before")
    @classmethod
    def _modes(cls, value: Any) -> Any:
        return [v for v in _listed(value) or [] if v]  # httpx sends an absent list as ""

    @field_validator("cancel_on_disconnect")
    @classmethod
    def _keeps_running(cls, value: bool) -> bool:
        if value:
            raise ValueError("a run goes on when its client leaves (true is not implemented)")
        return value


# -- threads -------------------------------------------------------------------------


class ThreadTTL(Params):
    """A thread's ``ttl`` as LangGraph's server takes it: minutes from now until the
    sweep deletes the thread (any number, as its schema has it: one not above zero is
    due at the next sweep); none: the deployment's default. Of the strategies only
    ``delete`` is implemented (``keep_latest`` prunes checkpoints, which loopline derives
    from the thread's log rather than keeps)."""

    strategy: Literal["delete", "keep_latest"] = "delete"
    ttl: float | None = Field(None, strict=True)

    @field_validator("strategy")
    @classmethod
    def _deletes(cls, value: str) -> str:
        if value != "delete":
            raise ValueError(f"{value!r} is not supported (supported: 'delete')")
        return value


class SuperstepUpdate(Params):
    """One node's write in a superstep of ``threads.create(supersteps=...)``; a
    ``command`` is not implemented (an update is values written as a node)."""

    values: dict[str, Any] | None = None
    as_node: str | None = None
    command: dict[str, Any] | None = None

    @field_validator("command")
    @classmethod
    def _no_command(cls, value: dict[str, Any] | None) -> None:
        if value is not None:
            raise ValueError("a superstep's command is not implemented: give values")
        return value


class Superstep(Params):
    updates: list[SuperstepUpdate] = Field(min_length=1, max_length=1)
    """One update per superstep: loopline writes one node's at a time."""


class ThreadCreate(Params):
    """``POST /threads``; ``supersteps`` are state updates applied in turn to the new
    thread, for the agent its ``metadata.graph_id`` names (LangGraph's
    ``bulk_update_state``)."""

    thread_id: str | None = Field(None, min_length=1, max_length=256)
    metadata: dict[str, Any] = Field(default_factory=dict)
    if_exists: Literal["raise", "do_nothing"] = "raise"
    ttl: ThreadTTL | None = None
    supersteps: list[Superstep] | None = None


ThreadStatus = Literal["idle", "busy", "interrupted", "error"]

ThreadSort = Literal["thread_id", "status", "created_at", "updated_at", "state_updated_at"]

ThreadField = Literal[
    "thread_id",
    "created_at",
    "updated_at",
    "state_updated_at",
    "metadata",
    "config",
    "status",
    "values",
    "interrupts",
]


class ThreadCount(Params):
    """``POST /threads/count``: the threads whose metadata and values contain these,
    in ``status``."""

    metadata: dict[str, Any] = Field(default_factory=dict)
    values: dict[str, Any] = Field(default_factory=dict)
    status: ThreadStatus | None = None


class ThreadSearch(ThreadCount):
    """``POST /threads/search`` (``extract`` is not implemented)."""

    ids: list[str] | None = None
    limit: int = Field(10, ge=1, le=1000)
    offset: int = Field(0, ge=0)
    sort_by: ThreadSort | None = None
    sort_order: Literal["asc", "desc"] | None = None
    select: list[ThreadField] | None = None


class ThreadPatch(Params):
    """``PATCH /threads/{id}``: metadata merged into the thread's; a ``ttl`` counts
    from now."""

    metadata: dict[str, Any] = Field(default_factory=dict)
    ttl: ThreadTTL | None = None


class ThreadPrune(Params):
    """``POST /threads/prune``: ``delete`` removes the threads; ``keep_latest`` (drop
    all but the latest checkpoint) is refused, as LangGraph's in-memory server refuses it."""

    thread_ids: list[str]
    strategy: Literal["delete", "keep_latest"] = "delete"


class StateQuery(Params):
    """``GET /threads/{id}/state``: a loopline thread has no subgraphs, so its state is
    the same with ``subgraphs`` or without."""

    subgraphs: bool = False


class StateUpdate(Params):
    """``POST /threads/{id}/state``: values applied through the state's reducers, between
    runs, as node ``as_node`` wrote them, from checkpoint ``checkpoint`` (or the
    deprecated ``checkpoint_id``; neither: the newest). ``task_id`` is not implemented
    (an update is a node's whole write)."""

    values: dict[str, Any] | None = None
    as_node: str | None = None
    checkpoint: dict[str, Any] | None = None
    checkpoint_id: str | None = None


class StateAtCheckpoint(Params):
    """``POST /threads/{id}/state/checkpoint``."""

    checkpoint: dict[str, Any]
    subgraphs: bool = False


class HistoryBody(Params):
    """``POST /threads/{id}/history``: the thread's checkpoints newest first, those
    whose metadata has every item of ``metadata``, older than ``before`` (a config:
    ``{"configurable": {"checkpoint_id": ...}}``), only ``checkpoint``'s when it names
    one, at most ``limit`` (``select`` is not implemented)."""

    limit: int = Field(10, ge=0)
    before: dict[str, Any] | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    checkpoint: dict[str, Any] | None = None

    @field_validator("before")
    @classmethod
    def _a_config(cls, before: dict[str, Any] | None) -> dict[str, Any] | None:
        if before is not None and not isinstance(before.get("configurable"), dict):
            raise ValueError('before takes a config: {"configurable": {"checkpoint_id": ...}}')
        return before


class NoParams(Params):
    """A route that takes no parameters."""


# -- assistants ----------------------------------------------------------------------

AssistantField = Literal[
    "assistant_id",
    "graph_id",
    "name",
    "description",
    "config",
    "context",
    "metadata",
    "version",
    "created_at",
    "updated_at",
]


class AssistantCount(Params):
    """``POST /assistants/count``: the assistants that match."""

    metadata: dict[str, Any] = Field(default_factory=dict)
    graph_id: str | None = None
    name: str | None = None


class AssistantSearch(AssistantCount):
    """``POST /assistants/search``."""

    limit: int = Field(10, ge=0)
    offset: int = Field(0, ge=0)
    sort_by: Literal["assistant_id", "graph_id", "name", "created_at", "updated_at"] | None = None
    sort_order: Literal["asc", "desc"] | None = None
    select: list[AssistantField] | None = None


class AssistantCreate(Params):
    """``POST /assistants``: a configuration of the deployed agent ``graph_id``. Its
    ``config`` is a run's (``RunConfigBody``: what loopline does not take is refused)."""

    graph_id: str = Field(min_length=1)
    assistant_id: str | None = Field(None, min_length=1, max_length=256)
    config: RunConfigBody = Field(default_factory=RunConfigBody)
    context: dict[str, Any] = Field(default_factory=dict)
    metadata: dict[str, Any] = Field(default_factory=dict)
    if_exists: Literal["raise", "do_nothing"] = "raise"
    name: str = "Untitled"
    description: str | None = None


class AssistantPatch(Params):
    """``PATCH /assistants/{id}``: the next version; what is not given is kept
    (``metadata`` is merged)."""

    graph_id: str | None = Field(None, min_length=1)
    config: RunConfigBody | None = None
    context: dict[str, Any] | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    name: str | None = None
    description: str | None = None


class AssistantVersions(Params):
    """``POST /assistants/{id}/versions``: newest first; ``metadata`` pairs equal."""

    metadata: dict[str, Any] = Field(default_factory=dict)
    limit: int = Field(10, ge=1, le=1000)
    offset: int = Field(0, ge=0)


class AssistantLatest(Params):
    """``POST /assistants/{id}/latest``."""

    version: int = Field(ge=1)


class GraphQuery(Params):
    """``GET /assistants/{id}/graph``."""

    xray: bool | int = False


class SubgraphsQuery(Params):
    """``GET /assistants/{id}/subgraphs[/{namespace}]``."""

    recurse: bool = False


# -- store ---------------------------------------------------------------------------


class StoreParams(Params):
    """``refresh_ttl``: whether reading renews the TTL of what it returns; unset, the
    store's ``refresh_on_read`` (``LOOPLINE_STORE``) decides, as in LangGraph."""

    refresh_ttl: bool | None = None


class StorePut(Params):
    """``PUT /store/items``. ``ttl`` in minutes (unset: the store's ``default_ttl``);
    ``index``: false to leave the item out of the vector index, or the fields to embed
    instead of the configured ones (only with an index configured)."""

    namespace: list[str]
    key: str
    value: dict[str, Any]
    index: Literal[False] | list[str] | None = None
    ttl: float | None = Field(None, gt=0)


class StoreItemQuery(StoreParams):
    """``GET /store/items``: the namespace's labels joined by dots, and the key."""

    namespace: str = ""
    key: str


class StoreDelete(Params):
    """``DELETE /store/items``."""

    namespace: list[str]
    key: str


class StoreSearch(StoreParams):
    """``POST /store/items/search``: items under a namespace prefix whose value matches
    ``filter`` (LangGraph's operators), newest first, or ranked by similarity to
    ``query`` (only with an index configured)."""

    namespace_prefix: list[str] = Field(default_factory=list)
    filter: dict[str, Any] | None = None
    limit: int = Field(10, ge=0)
    offset: int = Field(0, ge=0)
    query: str | None = None


class StoreNamespaces(Params):
    """``POST /store/namespaces``."""

    prefix: list[str] | None = None
    suffix: list[str] | None = None
    max_depth: int | None = Field(None, ge=1)
    limit: int = Field(100, ge=0)
    offset: int = Field(0, ge=0)


# -- reading ---------------------------------------------------------------------------

P = TypeVar("P", bound=Params)


def parse(model: type[P], data: Any) -> P:
    """``data`` (a JSON body or a query string) as ``model``, or ``BadRequest`` naming
    each parameter that is wrong or not implemented."""
    if isinstance(data, QueryParams):
        data = _query_dict(data)
    if not isinstance(data, Mapping):
        raise BadRequest("the request body must be a JSON object")
    given = {k: v for k, v in data.items() if v is not None}
    try:
        return model.model_validate(given)
    except ValidationError as exc:
        raise BadRequest(reasons(exc)) from exc


def _query_dict(query: QueryParams) -> dict[str, Any]:
    """A key given once as its value, a repeated one as the list of its values."""
    found: dict[str, Any] = {}
    for key in query:
        values = query.getlist(key)
        found[key] = values[0] if len(values) == 1 else values
    return found


def reasons(exc: ValidationError) -> str:
    """Every refused parameter with why, in one line."""
    parts = []
    for error in exc.errors():
        where = ".".join(str(p) for p in error["loc"]) or "body"
        if error["type"] == "extra_forbidden":
            parts.append(f"{where}: {UNSUPPORTED}")
        elif error["type"] == "literal_error":
            given = error.get("input")
            expected = error.get("ctx", {}).get("expected", "")
            parts.append(f"{where}: {given!r} is not supported (supported: {expected})")
        else:
            parts.append(f"{where}: {error['msg']}")
    return "; ".join(parts)
