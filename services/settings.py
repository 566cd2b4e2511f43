"""Settings shared by every service, read from the environment.

``REDIS_URL`` has no prefix (it is what every Redis tool reads); the rest use ``LOOPLINE_``.
"""

from __future__ import annotations

from pydantic import AliasChoices, Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from contracts.streams import partitions_from_env
from services.store_config import StoreConfig


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="LOOPLINE_", extra="ignore", populate_by_name=True)

    redis_url: str | None = Field(
        default=None, validation_alias=AliasChoices("REDIS_URL", "LOOPLINE_REDIS_URL")
    )
    prefix: str = "loopline"
    partitions: int = Field(default_factory=partitions_from_env, ge=0, le=1024)
    """How many partitions each work stream is split into (``contracts.streams.Names``);
    0, the default, splits none. Every process of a deployment reads the same number: the
    services refuse to start on another than the one the deployment recorded."""
    redis_wait_s: float = Field(default=60.0, ge=0)
    """How long ``loopline serve`` / ``up`` wait for Redis to answer at start (with
    backoff), so the start order of a deployment's containers does not matter."""
    max_steps: int = Field(default=50, ge=1)
    """Model calls a task may make before it fails (a task can lower it)."""

    task_deadline_s: float | None = Field(default=None, gt=0)
    """Default per-task deadline in seconds (None: no deadline unless the task sets one)."""

    retention_s: int = Field(default=7 * 24 * 3600, ge=60)
    """How long a finished task's keys (state, transcript, log) are kept."""

    thread_ttl_s: int | None = Field(default=None, ge=1)
    """Threads expire only when this is set (LangGraph's threads last until deleted): a
    thread with no run going is deleted this many seconds after its last run ended, its
    transcript, state and log of runs with it (a new run on its id starts empty). The
    runs' own records (``retention_s``) are not the thread: ``get_state`` outlives them.
    An in-process saver's thread (``InMemorySaver``) is the exception: the saver holds
    its record, so Redis's working copy of it goes once idle for ``retention_s``."""

    thread_sweep_s: float = Field(default=300.0, gt=0)
    """How often the gateway looks for threads past the TTL a client gave them
    (``threads.create(ttl=...)``, ``threads.update(ttl=...)``) and deletes them: LangGraph's
    ``sweep_interval_minutes`` (its default, about 5 minutes), in seconds."""

    store: StoreConfig | None = None
    """The deployment store's TTL and vector index (``LOOPLINE_STORE``, JSON shaped as
    ``langgraph.json``'s ``store``; ``services.store_config``). None: items are kept until
    deleted unless a ``put`` gives a ``ttl``, and ``search`` takes no ``query``."""

    read_batch: int = Field(default=64, ge=1)
    """Entries fetched per XREADGROUP: bounded so one consumer never hoards the backlog."""

    poll_ms: int = Field(default=100, ge=1)
    """How long one XREADGROUP blocks: the latency of noticing shutdown, not of work."""

    concurrency_loop: int = Field(default=16, ge=1)
    concurrency_context: int = Field(default=8, ge=1)
    concurrency_model: int = Field(default=256, ge=1)
    concurrency_tools: int = Field(default=64, ge=1)
    concurrency_todos: int = Field(default=8, ge=1)

    allow_inline_agents: bool = False
    """Run tasks that carry their own agent spec (``TaskSubmitted.agent`` a spec, not a
    deployed agent's name). Off, whoever can submit a task runs only the operator's
    deployed agents; the embedded default turns it on (one process is operator and
    producer there)."""

    inline_loop: bool = True
    """The model and tools services apply the loop's transition for agents whose loop stage
    has no hooks (two stream hops fewer per step); off: every result goes through the loop
    service (``services.tasks.handover``)."""

    gc_threshold: int = Field(default=50_000, ge=0)
    """Allocations between young-generation collections in ``loopline serve`` processes
    (0: Python's default, 700); see ``services.app.tune_gc``."""

    transcript_cache_tasks: int = Field(default=4096, ge=1)
    """Tasks whose transcript a process keeps in memory (the history is append-only, so a
    cached prefix is valid forever and each step reads only the new messages); at least
    twice the largest service concurrency (``transcript_cache_size``)."""

    stream_batch_ms: float = Field(default=2.0, ge=0)
    """At most one entry of a task's chunk stream per this many milliseconds: a chunk
    after a quiet window goes out at once, a burst waits for the window's end (0: one
    entry per chunk). Models stream a token every few milliseconds or slower, so the
    default relays each as it comes and batches only bursts."""
    stream_maxlen: int = Field(default=10_000, ge=100)
    """Entries a task's chunk stream keeps (``XADD MAXLEN ~``)."""
    stream_ttl_s: int = Field(default=300, ge=10)
    """Seconds a task's chunk stream lives after its last chunk."""

    claim_idle_ms: int = Field(default=15_000, ge=100)
    """An entry pending this long is taken over by another consumer. Live handlers renew
    their claim (a heartbeat), so this bounds recovery time, not handler duration."""

    max_deliveries: int = Field(default=5, ge=1)
    """Deliveries before an entry goes to the dead-letter stream with its last error."""

    max_event_bytes: int = Field(default=1_048_576, ge=1024)
    """Largest event accepted or published; larger ones get a clear error."""

    graceful_timeout_s: float = Field(default=30.0, ge=0)
    """On SIGTERM, how long in-flight handlers may run before the process exits."""

    tool_timeout_s: float = Field(default=300.0, gt=0)
    """How long a tool call may run before it fails with a timeout (an agent can set its
    own, per tool too: ``tool_timeout_s``, ``tool_timeouts``)."""

    tool_stuck_max: int = Field(default=64, ge=1)
    """Sync tool threads that may still run past their call's end (a timeout, a task that
    ended) before the tools process hands its work over and exits to be restarted."""

    trim_interval_s: float = Field(default=60.0, gt=0)
    """How often each service trims its input streams below what every group has
    acknowledged (``services.trimming``)."""

    public_maxlen: int = Field(default=100_000, ge=1)
    """Entries a public stream (todos, edits, approvals, dead letters) keeps at most."""

    public_max_age_s: float = Field(default=7 * 24 * 3600, gt=0)
    """How long a public stream keeps an entry."""

    tool_modules: list[str] = Field(default_factory=list)
    """Modules the tools service imports at start, so import errors show at once."""

    def concurrency(self, service: str) -> int:
        return int(getattr(self, f"concurrency_{service}"))

    @property
    def transcript_cache_size(self) -> int:
        """How many tasks' transcripts a process keeps: ``transcript_cache_tasks``, and
        never fewer than twice the calls a service may hold in flight. A cache smaller
        than the tasks cycling through a process misses on every step (least recently
        used goes first, and each task comes back after all the others): 10,000 tasks in
        flight against 4,096 entries read and converted each whole transcript again at
        every model call."""
        busiest = max(self.concurrency(name) for name in ("loop", "model", "tools"))
        return max(self.transcript_cache_tasks, 2 * busiest)
