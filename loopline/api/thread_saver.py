"""A tenant's threads recorded in the deployment's PostgreSQL, in LangGraph's format.

With ``LOOPLINE_CHECKPOINT_POSTGRES_URL`` set, the gateway keeps a LangGraph
``AsyncPostgresSaver`` (``langgraph-checkpoint-postgres``) on that database as the record
of the deployment's threads; Redis holds their working copies. Each run of a thread is
written there once it ends, a checkpoint per superstep (``loopline.checkpoints.write_run``,
by ``loopline.api.saver_recorder``), so LangGraph reads and continues the thread; a thread
whose working copy left Redis is taken back in from it on its next run or read
(``restore``).

A tenant's threads are the saver's threads ``<prefix>:<thread id>`` (a prefix has no
``:``), so tenants sharing one database never see each other's threads. The graph the
checkpoints are written for is LangChain's ``create_agent`` graph of the same shape as the
deployed agent: its middleware as this process loads them (the gateway imports them as
every service does), its tools as stand-ins of the same names.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from contracts.agent import AgentSpec
from loopline.api.graph import as_langchain_middleware, stand_in_tools
from loopline.checkpoints import take_in, write_run
from loopline.client import Client
from loopline.graph import GraphArguments, reference_graph
from loopline.history import ThreadHistory, record_update
from loopline.saver_steps import SaverStepsError, saver_config
from services.hooks import hooks_for


def _middleware(spec: AgentSpec, loaded: dict[int, Any]) -> list[Any]:
    """The agent's middleware as objects of the graph: each as this process loaded it
    for the hooks, and one the services run natively (``TodoListMiddleware``,
    ``ContextEditingMiddleware``: no hook object) as LangChain's class of its name."""
    return [
        loaded[i] if i in loaded else as_langchain_middleware(m)
        for i, m in enumerate(spec.middleware)
    ]


class ThreadSaver:
    """One tenant's record of its threads: LangGraph's ``AsyncPostgresSaver`` on the
    deployment's PostgreSQL, opened on first use (its tables made if missing)."""

    def __init__(self, client: Client, url: str) -> None:
        self.client = client
        self.url = url
        self._saver: Any = None
        self._pool: Any = None
        self._lock = asyncio.Lock()
        self._graphs: dict[str, Any] = {}

    def saved_id(self, thread_id: str) -> str:
        """The thread's id in the saver."""
        return f"{self.client.names.prefix}:{thread_id}"

    async def saver(self) -> Any:
        async with self._lock:
            if self._saver is None:
                from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
                from psycopg.rows import dict_row
                from psycopg_pool import AsyncConnectionPool

                # the connection settings AsyncPostgresSaver.from_conn_string uses
                kwargs = {"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row}
                pool: Any = AsyncConnectionPool(self.url, open=False, kwargs=kwargs)
                try:
                    await pool.open(wait=True, timeout=10)
                    saver = AsyncPostgresSaver(pool)
                    await saver.setup()  # its tables, made or migrated
                except BaseException:
                    await pool.close()  # the next use tries again with a new pool
                    raise
                self._pool, self._saver = pool, saver
        return self._saver

    async def close(self) -> None:
        if self._pool is not None:
            await self._pool.close()
            self._pool = self._saver = None

    def graph_of(self, spec: AgentSpec) -> Any:
        """LangChain's compiled graph of the deployed agent's shape (built once per
        agent id)."""
        if spec.agent_id not in self._graphs:
            try:
                hooks = hooks_for(spec.agent_id, spec)
                arguments = GraphArguments(
                    tools=stand_in_tools(spec),
                    middleware=_middleware(spec, dict(hooks.instances)),
                    state_schema=hooks.state_schema,
                )
                self._graphs[spec.agent_id] = reference_graph(arguments)
            except Exception as exc:  # middleware that is not LangChain's kind, say
                raise SaverStepsError(
                    f"agent {spec.name or spec.agent_id}: LangChain's graph of its shape "
                    f"cannot be built ({type(exc).__name__}: {exc})"
                ) from exc
        return self._graphs[spec.agent_id]

    async def record_run(self, thread_id: str, task_id: str, spec: AgentSpec) -> str | None:
        """The thread's run ``task_id`` (ended) written to the saver, a checkpoint per
        superstep; the id of the newest written (None: nothing was)."""
        history = ThreadHistory(self.client.threads(), spec)
        return await write_run(
            await self.saver(),
            self.graph_of(spec),
            history,
            thread_id,
            task_id,
            saved_as=self.saved_id(thread_id),
        )

    async def delete(self, thread_id: str) -> bool:
        """The thread's checkpoints removed from the saver; whether it had any."""
        saver, config = await self.saver(), saver_config(self.saved_id(thread_id))
        if await saver.aget_tuple(config) is None:
            return False
        await saver.adelete_thread(self.saved_id(thread_id))
        return True

    async def restore(self, thread_id: str) -> bool:
        """The thread's working copy, when Redis has none, taken back in from the saver's
        newest checkpoint of it (its messages, todos and state keys; a checkpoint in the
        thread's history); whether it was."""
        reader = self.client.threads()
        if await reader.info(thread_id) is not None:
            return False
        saver, key, names = await self.saver(), reader.space.key(thread_id), self.client.names
        given = await take_in(self.client.redis, names, key, saver, self.saved_id(thread_id))
        if given is None:
            return False
        await record_update(reader, thread_id, given, None, None, replace=True)
        await self.client.redis.zadd(names.threads, {key: time.time()})
        return True
