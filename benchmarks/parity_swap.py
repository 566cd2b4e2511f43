"""A pytest plugin that runs a reference project's own agent tests against loopline.

``pytest -p benchmarks.parity_swap --parity-suite langchain|deepagents``: after collection,
every name bound to LangChain's ``create_agent`` (in the collected test modules, their
helper modules, and the packages the tests import it from inside functions) is rebound to
``loopline.create_agent``. For LangChain's suite, ``TodoListMiddleware``,
``ContextEditingMiddleware`` and ``ClearToolUsesEdit`` bound in the test modules become
loopline's native classes (``loopline.middleware``), which is what LangChain's tests of those
classes then measure. For deepagents', the two places deepagents imports ``create_agent``
(``deepagents.graph`` and ``deepagents.middleware.subagents``) are rebound.

LangChain's conftest guards every test with ``blockbuster`` (a blocking call inside a
running event loop fails the test). loopline runs its embedded services on event loops in
background threads, and its sync ``invoke``/``stream`` drive the async API on a private event
loop in the caller's thread (``loopline.syncrun``): blocking calls there are loopline's own
business, where LangChain's sync path runs no loop at all. With ``--parity-blockbuster
threads`` (the default) the guard lets through calls made in any thread but the main one and
calls made under ``loopline.syncrun``'s private loop; it stays on for everything else in the
test's own event loop (a blocking call loopline makes inside the caller's ``ainvoke`` still
fails, and is counted). ``keep`` leaves the guard untouched, ``off`` turns it off. The choice
is printed in the run's header.

Each test that builds a loopline agent says so in its report (``user_properties``:
``("loopline_agent", True)``), so a summary can count the tests that exercise an agent apart
from those that only unit-test a class.

``--parity-redis-url URL`` runs loopline's services in-process, as on the embedded default,
against that Redis instead of the embedded server (the tests' models and tools are objects
of the test process: deployed services could not run them). Give the run its own
``LOOPLINE_PREFIX`` on a shared server.

``--parity-scoped-threads`` is a diagnostic, not parity: LangGraph keeps a thread in the
checkpointer instance given to ``create_agent`` (no checkpointer, no thread memory), while
loopline keeps every thread by its id in Redis, so tests that reuse a thread id with a fresh
``InMemorySaver`` continue each other's threads on loopline. With the option, each agent's
thread ids are suffixed with its checkpointer's identity in the current test (a fresh suffix
per call without one), which separates those failures from the rest.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

# Where the reference side's ``create_agent`` is looked up by code the tests run.
_PACKAGE_BINDINGS = {
    "langchain": ("langchain.agents", "langchain.agents.factory"),
    "deepagents": ("deepagents.graph", "deepagents.middleware.subagents"),
}
# LangChain's classes whose tests measure loopline's native counterparts.
_NATIVE_CLASSES = ("TodoListMiddleware", "ContextEditingMiddleware", "ClearToolUsesEdit")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("parity", "run a reference suite against loopline")
    group.addoption("--parity-suite", choices=sorted(_PACKAGE_BINDINGS), default="langchain")
    group.addoption(
        "--parity-blockbuster",
        choices=("threads", "keep", "off"),
        default="threads",
        help="LangChain's blockbuster guard on loopline's side (default: threads)",
    )
    group.addoption(
        "--parity-redis-url",
        default=None,
        help="loopline's in-process services on this Redis (default: the embedded server)",
    )
    group.addoption(
        "--parity-scoped-threads",
        action="store_true",
        help="diagnostic: a thread id is scoped to its checkpointer instance, as in LangGraph",
    )


def pytest_sessionstart(session: pytest.Session) -> None:
    """The swap's settings in the output, also under ``-q`` (which drops the header)."""
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        for line in pytest_report_header(session.config):
            reporter.write_line(line)


def pytest_report_header(config: pytest.Config) -> list[str]:
    mode = config.getoption("--parity-blockbuster")
    suite = config.getoption("--parity-suite")
    lines = [
        f"parity swap: create_agent -> loopline.create_agent ({suite})",
        *(
            [f"parity swap: {', '.join(_NATIVE_CLASSES)} -> loopline.middleware's"]
            if suite == "langchain"
            else []
        ),
        f"parity swap: blockbuster {_BLOCKBUSTER_MODES[mode]}",
    ]
    url = config.getoption("--parity-redis-url")
    lines.append(f"parity swap: loopline in-process on {url or 'the embedded server'}")
    if config.getoption("--parity-scoped-threads"):
        lines.append("parity swap: DIAGNOSTIC thread ids scoped to their checkpointer instance")
    return lines


# The frames under which loopline's sync API runs its own event loop in the caller's thread.
_PRIVATE_LOOP_FRAMES = {"run_sync", "step"}

_BLOCKBUSTER_MODES = {
    "threads": "on in the test's event loop, off in other threads and loopline's sync loops",
    "keep": "as the reference suite sets it",
    "off": "off",
}


class _Swap:
    """The rebindings made, so the session can undo them."""

    def __init__(self) -> None:
        self.undo: list[tuple[ModuleType | type, str, Any]] = []

    def rebind(self, module: ModuleType | type, name: str, value: Any) -> None:
        self.undo.append((module, name, getattr(module, name)))
        setattr(module, name, value)

    def restore(self) -> None:
        for module, name, value in reversed(self.undo):
            setattr(module, name, value)
        self.undo.clear()


_swap = _Swap()


# The test running now, for the create_agent wrapper to mark.
_current: list[pytest.Item] = []


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    _current.append(item)
    try:
        return (yield)
    finally:
        _current.pop()


def _marking(create_agent: Callable[..., Any]) -> Callable[..., Any]:
    """loopline's ``create_agent``, noting in the current test's report that it built one."""

    @functools.wraps(create_agent)
    def create_agent_marked(*args: Any, **kwargs: Any) -> Any:
        if _current and ("loopline_agent", True) not in _current[-1].user_properties:
            _current[-1].user_properties.append(("loopline_agent", True))
        return create_agent(*args, **kwargs)

    return create_agent_marked


def pytest_collection_finish(session: pytest.Session) -> None:
    """Rebind after every test module is imported, before any test runs."""
    import loopline

    suite = session.config.getoption("--parity-suite")
    packages = [importlib.import_module(name) for name in _PACKAGE_BINDINGS[suite]]
    reference = packages[0].create_agent
    swapped = _marking(loopline.create_agent)
    for package in packages:
        _swap.rebind(package, "create_agent", swapped)
    if session.config.getoption("--parity-scoped-threads"):
        _scope_threads()
    if url := session.config.getoption("--parity-redis-url"):
        _in_process_on(url)
    # By identity, whatever name a module bound them to.
    replacements = {id(reference): swapped}
    if suite == "langchain":
        replacements.update(_native_classes())
    for module in _test_modules(Path(str(session.config.rootpath))):
        for name, value in list(vars(module).items()):
            if id(value) in replacements:
                _swap.rebind(module, name, replacements[id(value)])


def pytest_sessionfinish(session: pytest.Session) -> None:
    _swap.restore()


def _in_process_on(url: str) -> None:
    """``create_agent`` resolves to ``url`` with the embedded default's in-process services."""
    import loopline.agent
    from loopline.embedded import trust_this_process

    def resolve_url(redis_url: str | None = None) -> tuple[str, bool]:
        trust_this_process()
        return url, True

    _swap.rebind(loopline.agent, "resolve_url", resolve_url)


def _scope_threads() -> None:
    """The diagnostic of ``--parity-scoped-threads`` (see the docstring)."""
    from loopline.agent import Agent

    run_config = Agent._run_config

    def scoped(self: Agent, config: Any) -> Any:
        run = run_config(self, config)
        if run.thread_id is None:
            return run
        test = _current[-1].nodeid if _current else ""
        if self.checkpointer is None:
            scope = uuid.uuid4().hex  # LangGraph keeps no thread without a checkpointer
        else:
            scope = f"{uuid.uuid5(uuid.NAMESPACE_URL, test).hex[:8]}-{id(self.checkpointer):x}"
        return dataclasses.replace(run, thread_id=f"{run.thread_id}~{scope}")

    _swap.rebind(Agent, "_run_config", scoped)


def _native_classes() -> dict[int, type]:
    """id(LangChain's class) -> loopline's class of the same name."""
    import langchain.agents.middleware as reference

    import loopline.middleware

    return {
        id(getattr(reference, name)): getattr(loopline.middleware, name)
        for name in _NATIVE_CLASSES
    }


def _test_modules(root: Path) -> Iterator[ModuleType]:
    """The imported modules whose files lie under the suite's root (tests and helpers)."""
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None)
        if path and Path(path).is_relative_to(root):
            yield module


@pytest.fixture(autouse=True)
def _parity_blockbuster(request: pytest.FixtureRequest) -> Iterator[None]:
    """Narrow LangChain's blockbuster guard to the test's own thread (see the docstring)."""
    mode = request.config.getoption("--parity-blockbuster")
    if mode == "keep" or "blockbuster" not in request.fixturenames:
        yield
        return
    bb = request.getfixturevalue("blockbuster")
    for function in bb.functions.values():
        function.deactivate()
        if mode == "threads":
            function.can_block_predicate = _outside_main_thread(function.can_block_predicate)
            function.can_block_in("loopline/syncrun.py", _PRIVATE_LOOP_FRAMES)
            function.activate()
    yield


def _outside_main_thread(predicate: Any) -> Any:
    def can_block(*args: Any, **kwargs: Any) -> bool:
        if threading.current_thread() is not threading.main_thread():
            return True
        return bool(predicate(*args, **kwargs))

    return can_block
