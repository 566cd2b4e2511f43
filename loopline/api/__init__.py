"""The HTTP gateway: LangGraph's Agent Server API (assistants, threads, runs, SSE streams)
served on top of loopline's bus, so ``langgraph_sdk``, ``@langchain/langgraph-sdk`` and
the UIs built on them work against a loopline deployment unchanged.

The gateway is a producer and reader of the bus, like ``loopline.Client``: it submits
runs, decisions and cancels on a tenant's tasks stream and reads task logs, chunk streams
and thread keys. It holds no state of its own besides a small record per thread and run
(``PREFIX:api:*``), so any number of replicas serve behind one port.

Modules: ``settings`` (host, port, API keys -> tenants), ``wire`` (JSON shapes as
LangGraph's server writes them), ``records`` (the gateway's thread and run records),
``runs`` (starting, resuming, cancelling and waiting for runs), ``events`` (a run's
stream items with resumable positions), ``sse`` (the frames), ``state`` (thread state and
history), ``app`` (the routes), ``server`` (``loopline serve api``).
"""

from loopline.api.app import create_app

__all__ = ["create_app"]
