"""The failures of a reference suite on loopline, sorted into root causes.

Each rule names a cause, where in loopline it lies, and how to recognise it: the first error
line of loopline's run (``benchmarks.parity_record``), the test's id, or the diagnostic run
with threads scoped to their checkpointer (``benchmarks.parity_swap``'s
``--parity-scoped-threads``): a test that passes there and fails as is fails because
loopline's threads outlive their checkpointer; a test that fails in both is sorted by the
scoped run's error, which the leak does not mask. A test counts once, under the first rule that
matches it; what no rule matches is listed under its own error line, for the next rule.
The rules were written from the runs in ``benchmarks/results/parity_*.md``: reading the
tracebacks (``~/.cache/loopline-parity/results/*.log``) is how a new one is added.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

SCOPED = "passes with threads scoped to their checkpointer"


@dataclass(frozen=True)
class Rule:
    title: str
    where: str
    error: str = ""  # a regex searched in the first error line(s)
    test: str = ""  # a regex searched in the test's id
    scoped: bool = False  # matches a test that the scoped-threads run passes


@dataclass
class Cause:
    title: str
    where: str
    tests: list[str] = field(default_factory=list)


RULES = (
    Rule(
        "Threads outlive their checkpointer: loopline keeps a thread by its id in Redis, "
        "so a test's fresh `InMemorySaver` (or none) continues earlier tests' threads "
        "(the transcript grows until an event exceeds `LOOPLINE_MAX_EVENT_BYTES`, a thread "
        "is 'busy with run', counts double)",
        "`loopline/agent.py` `Agent._run_config` / `loopline/conversation.py` `RunConfig.of` "
        "(the checkpointer is accepted, not used); `services/tasks/threads.py`",
        scoped=True,
    ),
    Rule(
        "Streaming v3 missing: `await agent.astream_events(..., version='v3')` / "
        "`astream(version='v3')` run objects and projections",
        "`loopline/agent.py` `Agent.astream_events` (an async generator, v1/v2 only), "
        "`loopline/stream_events.py`",
        error=r"async_generator can't be used in 'await'",
    ),
    Rule(
        "Sync `stream_events` missing (`Agent` has no `stream_events`)",
        "`loopline/agent.py` `Agent`",
        error=r"no attribute 'stream_events'",
    ),
    Rule(
        "`TodoListMiddleware` is not LangChain's `AgentMiddleware` (no `tools`, "
        "`state_schema`, `wrap_model_call`, `after_model`, ...)",
        "`services/middleware/todo.py` `TodoListMiddleware` (re-exported by "
        "`loopline/middleware.py`)",
        error=r"'TodoListMiddleware' object has no attribute",
    ),
    Rule(
        "`ContextEditingMiddleware` is not LangChain's `AgentMiddleware` (no "
        "`wrap_model_call`/`awrap_model_call`)",
        "`services/middleware/context_editing.py` `ContextEditingMiddleware`",
        error=r"'ContextEditingMiddleware' object has no attribute",
    ),
    Rule(
        "`wrap_model_call` `Command` that adds messages beside the reply is refused",
        "`services/model/wrapped.py` (the model stage's handling of "
        "`ExtendedModelResponse.command`)",
        error=r"not messages added beside the model's reply",
    ),
    Rule(
        "A `wrap_model_call` `Command`'s state update is not checked against the reply "
        "(LangGraph raises `InvalidUpdateError` on a conflicting `structured_response`) or "
        "drops the structured response",
        "`services/model/wrapped.py` (the command's update), `services/loop/handlers.py` "
        "(applying `ModelResponded.update`)",
        test=r"test_wrap_model_call_state_update\.py",
    ),
    Rule(
        "A chat model whose stream yields no chunk fails ('the model streamed no message'); "
        "LangChain falls back to `invoke`",
        "`services/model/streaming.py` (raises at line ~226)",
        error=r"the model streamed no message",
    ),
    Rule(
        "`response_format` given as a union of models is refused",
        "`loopline/agent.py` `_schema_ref` ('unions do not travel')",
        error=r"response_format schema .*\|",
    ),
    Rule(
        "State field not JSON-serializable: a middleware's `state_schema` key holding a "
        "pydantic model or object (ModelRouterMiddleware `model_route`, ShellToolMiddleware "
        "resources) is refused",
        "`services/spec/validation.py` (the JSON-only state rule)",
        error=r"is not JSON-serializable",
    ),
    Rule(
        "Callbacks get no run per middleware hook (`<Middleware>.before_model` traced as its "
        "own run in LangChain)",
        "`services/tasks/loop.py` (the loop's hooks run as traced nodes, "
        "`services/hooks.traced_node`, only when their node config carries the caller's "
        "callbacks: nothing holds those for the loop yet)",
        error=r"KeyError: '[\w.]+\.(before|after)_(model|agent)'",
    ),
    Rule(
        "Graph introspection missing (`get_graph`, `nodes`, `stream_channels`, "
        "`stream_transformers`, `builder`)",
        "`loopline/agent.py` `Agent` (not a compiled graph)",
        error=r"no attribute '(get_graph|nodes|stream_channels|stream_transformers|builder)'",
    ),
    Rule(
        "`create_agent` keyword refused (`transformers`, `debug`, `cache`, "
        "`interrupt_before`/`after`)",
        "`loopline/agent.py` `create_agent`",
        error=r"create_agent\(\) got an unexpected keyword argument",
    ),
    Rule(
        "`stream(..., subgraphs=True)` refused",
        "`loopline/agent.py` `Agent.stream`/`astream` (`unexpected arguments`)",
        error=r"unexpected arguments: subgraphs",
    ),
    Rule(
        "HITL edit to another tool: `request.runtime.tools` is empty in loopline's tool "
        "runtime ('Available tools: .')",
        "`services/tools/logic.py` (the `ToolRuntime` built for `wrap_tool_call`)",
        error=r"which is not an available tool\. Available tools: \.",
    ),
    Rule(
        "A blocking call in the caller's event loop: `create_agent` starts the embedded "
        "server synchronously (`mkdtemp`, process start) where LangChain's does no I/O",
        "`loopline/agent.py` `create_agent` → `resolve_url` → `loopline/embedded_server.py`",
        error=r"BlockingError",
    ),
    Rule(
        "A model's or tool's exception reaches the caller as `TaskFailedError`, not as its own "
        "class (LangChain re-raises the original exception)",
        "`loopline/errors.py` (only importable classes are rebuilt)",
        error=r"TaskFailedError: (model call|tool '\w+') failed at step \d+: (?!ModelResponded)",
    ),
    Rule(
        "HITL per-call review (LangChain 1.5: an interrupt per gated call, answers keyed by "
        "tool-call id) differs: loopline refuses the decisions ('does not fit this call') "
        "and does not refuse a call without an id",
        "`services/tools/calls.py` (decision check, line ~336), "
        "`services/middleware/builtins.py` `HumanInTheLoopMiddleware`",
        test=r"test_human_in_the_loop\.py::test_per_call_",
    ),
    Rule(
        "The result holds copies of the input messages (ids rewritten to `<task>:in:N`), "
        "not the caller's objects",
        "`loopline/agent.py` `_input_messages` / the loop's transcript",
        error=r"ToolMessage\(.*\) is ToolMessage\(",
    ),
    Rule(
        "Tool runtime differs: `ToolRuntime.config` has no `recursion_limit` (LangChain's "
        "agent defaults it to 9999) / `ToolRuntime.store` is the deployment's store when "
        "none is given (LangChain: `None`)",
        "`services/tools/logic.py` (`ToolRuntime(...)`)",
        test=r"test_injected_runtime_create_agent\.py",
    ),
    Rule(
        "The result holds keys LangChain's does not (`task_id`, `todos: []` without "
        "`TodoListMiddleware`)",
        "`loopline/agent.py` `Agent.aresult` (~line 420: `todos` and `task_id` always set)",
        error=r"'todos': \[\]",
    ),
    Rule(
        "HITL: a later call reusing an edited call's id does not run (loopline keys the "
        "edit by tool-call id across turns)",
        "`services/tools/calls.py`",
        test=r"test_reused_tool_call_id_does_not_replay",
    ),
    # -- deepagents' suite --------------------------------------------------------------
    Rule(
        "Sync `stream_events(version='v3')` missing (LangChain's `Runnable` refuses it)",
        "`loopline/agent.py` `Agent` (no `stream_events` of its own)",
        error=r"stream_events\(version='v\d'\) is only supported",
    ),
    Rule(
        "A `wrap_model_call` `Command` that removes or replaces the model's reply, or adds an "
        "AI message after it, is refused (LangChain's graph routes on the state's last AI "
        "message; loopline on the reply)",
        "`services/model/node_writes.py` `placed`",
        error=r"removed the model's reply|replaced the model's reply|adding an AI message",
    ),
    Rule(
        "`stream(..., subgraphs=True)`: a sub-agent's chunks and metadata (its namespace, "
        "`lc_agent_name`, the caller's tags) are not streamed as LangGraph streams a subgraph's",
        "`loopline/agent.py` `Agent.stream`/`astream`, `loopline/stream_modes.py` (a sub-agent "
        "runs as a task of its own; its stream does not join the parent's)",
        test=r"test_subagent_streaming_emits_messages_and_updates_from_subgraph|"
        r"test_compiled_subagent_(lc_agent_name_in_a?stream_metadata|name_overrides_inner)|"
        r"test_main_agent_streaming_metadata_includes_tags",
    ),
    Rule(
        "The caller's callbacks do not reach a sub-agent's runs (LangGraph's subgraph runs under "
        "the parent's callback manager)",
        "`loopline/agent.py` `inherited_config` (tags, metadata, recursion limit only)",
        error=r"subagent callback, got names",
    ),
    Rule(
        "A sub-agent's interrupt, or a tool's `Command(graph=Command.PARENT)` handoff, does not "
        "reach the parent graph (the sub-agent's model is called again instead)",
        "`services/tools/logic.py` (a tool's `Command` with goto/graph is refused), "
        "`services/lending.py` / `loopline/agent.py` (a sub-agent's interrupt ends its own task)",
        test=r"test_subagent_inherits_interrupt_on_from_parent_agent|"
        r"test_tool_command_parent_handoff_preserved",
    ),
    Rule(
        "`invoke` runs the chat model's async path: a model overriding only `_generate` "
        "(sync) is bypassed, its real `_agenerate` is called",
        "`services/model/handlers.py` (every model call is `ainvoke`, whatever the run's mode)",
        error=r"AnthropicConnectionError",
    ),
    Rule(
        "A state key written from the model stage larger than an event may be "
        "(`LOOPLINE_MAX_EVENT_BYTES`): deepagents' summarization offloads the history into "
        "`files`",
        "`services/model/handlers.py` (the update travels in `ModelResponded`)",
        error=r"exceeds the limit of \d+ bytes",
    ),
    Rule(
        "A checkpoint's `channel_values` hold a delta channel's value (LangGraph rebuilds "
        "`files` from the writes)",
        "`loopline/checkpoints.py` (the checkpoint written for a thread)",
        error=r"DeltaChannel and should not appear in channel_values",
    ),
    Rule(
        "A `KeyboardInterrupt` raised in a sub-agent (RubricMiddleware's grader) ends the task "
        "as a failure instead of propagating to the caller",
        "`services/tools/logic.py` / `services/hooks.py` (a BaseException in a node)",
        error=r"DID NOT RAISE <class 'KeyboardInterrupt'>",
    ),
    Rule(
        "A tool's config tags come sorted (LangChain's `merge_configs`), not in LangGraph's "
        "order",
        "`services/hooks.py` `node_config` / `loopline/agent.py` `merged_configs`",
        test=r"test_tool_runtime_config_includes_default_graph_metadata",
    ),
    Rule(
        "The chat model's `bind_tools` gets the tools' JSON schemas, not tool objects "
        "(without `wrap_model_call` middleware), so a model that reads `tool.name` sees none",
        "`services/model/chat.py` `_bind`",
        test=r"test_create_sub_agent_compiles_declarative_spec",
    ),
    Rule(
        "`ModelRefusalError` reaches the caller without its `raw_message` (the exception is "
        "rebuilt from its class and text after crossing the bus)",
        "`loopline/errors.py` (rebuilding a task's exception)",
        error=r"ModelRefusalError",
    ),
)


def error_of(
    nodeid: str, failures: Mapping[str, Mapping[str, Any]], scoped: Mapping[str, Mapping[str, Any]]
) -> str:
    """The error a test is sorted by: the scoped run's, where that run fails it too."""
    record = scoped.get(nodeid)
    if record is None or record.get("outcome") == "passed":
        record = failures[nodeid]
    return str(record.get("error") or record.get("outcome", ""))


def classify(
    failures: Mapping[str, Mapping[str, Any]], scoped: Mapping[str, Mapping[str, Any]]
) -> list[Cause]:
    """``failures``: loopline's record of each test that passes on LangChain and fails on
    loopline; ``scoped``: the scoped-threads run's records (empty when not run)."""
    causes: dict[str, Cause] = {}
    for nodeid in sorted(failures):
        passes_scoped = scoped.get(nodeid, {}).get("outcome") == "passed"
        error = error_of(nodeid, failures, scoped)
        rule = next((r for r in RULES if _matches(r, nodeid, error, passes_scoped)), None)
        if rule is None:
            key = "Other: " + _normalised(error)
            cause = causes.setdefault(key, Cause(key, "unclassified: read the log"))
        else:
            cause = causes.setdefault(rule.title, Cause(rule.title, rule.where))
        cause.tests.append(nodeid)
    return sorted(causes.values(), key=lambda c: (c.title.startswith("Other"), -len(c.tests)))


def _matches(rule: Rule, nodeid: str, error: str, passes_scoped: bool) -> bool:
    if rule.scoped:
        return passes_scoped
    if rule.error and not re.search(rule.error, error):
        return False
    return not (rule.test and not re.search(rule.test, nodeid))


def _normalised(error: str) -> str:
    """The first line with ids and numbers blanked, so like errors group together."""
    line = error.splitlines()[0] if error else "(no error line)"
    line = re.sub(r"\b[0-9a-f]{32}\b", "<id>", line)
    return re.sub(r"\d+", "N", line)[:140]
