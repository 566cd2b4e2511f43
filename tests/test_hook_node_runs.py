"""A before/after hook run under callbacks is the chain run LangGraph makes of its node in
LangChain's agent graph: named ``<middleware>.<hook>``, its inputs and outputs as tracers
record them through the middleware's ``trace_policy`` (else the process's default,
``configure_trace_policy``), the real values for other handlers. The same middleware run
by LangChain's ``create_agent`` under a tracer, and by loopline's hook runner
(``services.hooks.run_state_hooks``) given the same handlers in its node config: the
same runs, inputs and outputs.

The caller's handlers reach the loop's hooks where the process holds them for the task
(the embedded default): ``test_the_callers_handlers_see_the_hooks_of_an_embedded_agent``
gives them to ``invoke`` of loopline's ``create_agent``, as to LangChain's."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from langchain.agents import create_agent as lc_create_agent
from langchain.agents.middleware import (
    AgentMiddleware,
    TracePolicy,
    configure_trace_policy,
    omit_payload,
)
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tracers import BaseTracer, Run

from loopline import create_agent
from services.hooks import HookSet, run_state_hooks
from services.settings import Settings
from tests.custom_models import InvokeOnlyModel
from tests.support import EMBEDDED_PREFIX

pytestmark = pytest.mark.fast


class Recorder(BaseTracer):
    """Each chain run's name, inputs and outputs (a tracer: trace policies apply)."""

    def __init__(self) -> None:
        super().__init__()
        self.runs: dict[str, dict[str, Any]] = {}

    def _persist_run(self, run: Run) -> None:
        pass

    def _on_chain_end(self, run: Run) -> None:
        self.runs.setdefault(run.name, {"inputs": run.inputs, "outputs": run.outputs})


class Notes(AgentMiddleware):
    """before_model: names how many messages it saw (its update is the node's output)."""

    def before_model(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        return {"messages": [HumanMessage(f"saw {len(state['messages'])}", id="note-1")]}


class Quiet(Notes):
    trace_policy = TracePolicy(process_inputs=omit_payload)


class QuietOutputs(Notes):
    trace_policy = TracePolicy(process_outputs=omit_payload)


@pytest.fixture(autouse=True)
def _no_global_policy() -> Iterator[None]:
    configure_trace_policy(None)
    yield
    configure_trace_policy(None)


def shape(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: shape(v) for k, v in value.items()}
    if isinstance(value, list):
        return [shape(v) for v in value]
    if hasattr(value, "content"):
        return (value.type, value.content)
    return value


def langchain_run(middleware: AgentMiddleware, make_agent: Any = lc_create_agent) -> Any:
    model = InvokeOnlyModel(script=[AIMessage("done")])
    agent = make_agent(model, [], middleware=[middleware])
    recorder = Recorder()
    agent.invoke({"messages": [HumanMessage("hi")]}, {"callbacks": [recorder]})
    return shape(recorder.runs[f"{middleware.name}.before_model"])


def loopline_run(middleware: AgentMiddleware) -> Any:
    recorder = Recorder()
    hooks = HookSet([(0, middleware)], run_config={"callbacks": [recorder]})
    messages = [HumanMessage("hi", id="in-0")]
    asyncio.run(run_state_hooks(hooks, "before_model", messages, {}))
    return shape(recorder.runs[f"{middleware.name}.before_model"])


@pytest.mark.parametrize("make", [Notes, Quiet, QuietOutputs], ids=lambda c: c.__name__)
def test_a_hook_node_run_as_langgraph_records_it(make: type[AgentMiddleware]) -> None:
    lc = langchain_run(make())
    assert loopline_run(make()) == lc


def test_the_global_default_applies_at_run_time() -> None:
    configure_trace_policy(TracePolicy(process_inputs=omit_payload))
    lc = langchain_run(Notes())
    assert lc["inputs"] == {}
    assert loopline_run(Notes()) == lc


def test_the_cases_show_what_they_claim() -> None:
    """Read from LangChain's side: the node's real state and update are recorded unless
    the policy omits them."""
    plain = langchain_run(Notes())
    assert plain["inputs"] == {"messages": [("human", "hi")]}
    assert plain["outputs"] == {"messages": [("human", "saw 1")]}
    assert langchain_run(Quiet())["inputs"] == {}
    assert langchain_run(QuietOutputs())["outputs"] == {}


@pytest.mark.parametrize("make", [Notes, Quiet], ids=lambda c: c.__name__)
def test_the_callers_handlers_see_the_hooks_of_an_embedded_agent(
    embedded: None, make: type[AgentMiddleware]
) -> None:
    def loopline_agent(model: Any, tools: Any, middleware: Any) -> Any:
        settings = Settings(prefix=EMBEDDED_PREFIX)
        return create_agent(model, tools, middleware=middleware, settings=settings)

    assert langchain_run(make(), loopline_agent) == langchain_run(make())
