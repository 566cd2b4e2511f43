"""Fixtures every test file shares, and the fast tier's guard (``tests.tiers``)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Generator, Iterator
from typing import Any

import pytest
import redis.asyncio as aioredis

from contracts.streams import SERVICES
from loopline.testing.scripted import ScriptedOpenAIServer, responder_by_prompt
from services.app import ensure_groups
from services.editing.counting import install_offline_tiktoken_cache
from services.redisconn import async_client
from services.runtime import Runtime
from services.settings import Settings
from tests.docker_engine import require_compose
from tests.support import (
    EMBEDDED_PREFIX,
    REPO_ROOT,
    MakeRuntime,
    RedisProvider,
    ServiceProcesses,
    loopline_up,
    services_on,
    twin_servers,
    unique_prefix,
)
from tests.tiers import FAST, GUARD, subprocess_allowed, warm_up

# The tests are operator and producer of what they run: their own tools may be imported,
# tasks may carry specs, the scripted model runs; in this process and in every service
# process a test starts (they inherit the environment). The security tests start their
# services with these turned off.
os.environ.setdefault("LOOPLINE_ALLOWED_MODULES", "tests,benchmarks")
os.environ.setdefault("LOOPLINE_ALLOW_INLINE_AGENTS", "true")
os.environ.setdefault("LOOPLINE_ALLOW_FAKE_MODEL", "true")


def pytest_sessionstart(session: pytest.Session) -> None:
    warm_up()


def _guarded(item: pytest.Item) -> Generator[None, object, object]:
    """Run one phase of a test; a fast one fails if it started a process, even when
    the code under test caught the refusal."""
    if item.get_closest_marker(FAST) is None:
        return (yield)
    with GUARD.arm() as violations:
        outcome = yield
    if violations:
        pytest.fail(
            f"{item.nodeid} is marked {FAST!r} but started a process: {', '.join(violations)}",
            pytrace=False,
        )
    return outcome


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, object, object]:
    return (yield from _guarded(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, object, object]:
    return (yield from _guarded(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Generator[None, object, object]:
    return (yield from _guarded(item))


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """The session's Redis (``REDIS_URL``, a container, or the embedded server), shared
    by both tiers: the one process a fast test may cause to start."""
    with subprocess_allowed():
        provider = RedisProvider().start()
    yield provider.url
    with subprocess_allowed():
        provider.stop()


@pytest.fixture(scope="session")
def compose_cmd() -> list[str]:
    """The compose command of a Docker engine that answers. The tests never start an
    engine: without one they skip, or fail when ``LOOPLINE_TEST_DOCKER=1`` asks for them
    (``tests/docker_engine.py``)."""
    return require_compose()


@pytest.fixture(scope="session")
def offline_tiktoken(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Let ``encoding_for_model("gpt-4")`` (ours and ChatOpenAI's, in this process and in
    the services given ``TIKTOKEN_CACHE_DIR``) load without internet: the bundled file,
    cached where tiktoken looks; the folder."""
    directory = str(tmp_path_factory.mktemp("tiktoken-cache"))
    install_offline_tiktoken_cache(directory)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TIKTOKEN_CACHE_DIR", directory)
        yield directory


@pytest.fixture
def embedded(redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """An embedded agent runs every service in this process, on the session's Redis (not
    a server of its own); with ``tests.support.EMBEDDED_PREFIX`` (the in-process services
    start once per process)."""
    import loopline.embedded

    monkeypatch.delenv("REDIS_URL", raising=False)
    monkeypatch.setattr(loopline.embedded, "embedded_url", lambda: redis_url)
    # an agent made with the default settings takes the prefix the services run on
    monkeypatch.setenv("LOOPLINE_PREFIX", EMBEDDED_PREFIX)


@pytest.fixture
def prefix() -> str:
    """Each test's own stream and key prefix: tests never see each other's data."""
    return unique_prefix()


@pytest.fixture
async def redis_client(redis_url: str) -> AsyncIterator[aioredis.Redis]:
    client = async_client(redis_url)
    yield client
    await client.aclose()


@pytest.fixture
async def make_runtime(redis_url: str, prefix: str) -> AsyncIterator[MakeRuntime]:
    """``await make_runtime(**settings)``: a service runtime in this process on the test's
    prefix, with every service's consumer groups made (as a deployment starts them;
    ``groups=False``: nothing made); closed after the test. Several share the prefix, as
    replicas do."""
    made: list[Runtime] = []

    async def make(*, groups: bool = True, **settings: Any) -> Runtime:
        runtime = Runtime(redis_url, Settings(prefix=prefix, **settings))
        made.append(runtime)
        if groups:
            await ensure_groups(runtime.redis, runtime.names, SERVICES)
        return runtime

    yield make
    for runtime in made:
        await runtime.close()


@pytest.fixture
async def rt(make_runtime: MakeRuntime) -> Runtime:
    """A service runtime with the default settings (``make_runtime``)."""
    return await make_runtime()


# -- the system tier's scripted model and services ----------------------------------------


def _module_scripts(request: pytest.FixtureRequest) -> dict[str, Any]:
    scripts = getattr(request.module, "SCRIPTS", None)
    if scripts is None:
        raise pytest.UsageError(f"{request.module.__name__} needs SCRIPTS (prompt -> turns)")
    return scripts  # the module's own dict, not a copy: a test may add to it


@pytest.fixture(scope="module")
def scripted(request: pytest.FixtureRequest) -> Iterator[ScriptedOpenAIServer]:
    """One scripted OpenAI-compatible server answering by the module's ``SCRIPTS``
    (picked by the prompt; a test may add scripts before it runs)."""
    with ScriptedOpenAIServer(responder=responder_by_prompt(_module_scripts(request))) as server:
        yield server


@pytest.fixture(scope="module")
def servers(
    request: pytest.FixtureRequest,
) -> Iterator[tuple[ScriptedOpenAIServer, ScriptedOpenAIServer]]:
    """Twin scripted servers answering by the module's ``RESPONDER`` (a request body ->
    ``Reply`` function) or else its ``SCRIPTS``: LangChain's run calls the first,
    loopline's services the second, so each side's requests can be compared."""
    responder = getattr(request.module, "RESPONDER", None)
    if responder is None:
        with twin_servers(_module_scripts(request)) as pair:
            yield pair
        return
    with (
        ScriptedOpenAIServer(responder=responder) as lc_server,
        ScriptedOpenAIServer(responder=responder) as ll_server,
    ):
        yield lc_server, ll_server


@pytest.fixture(scope="module")
def stack(
    redis_url: str, servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer]
) -> Iterator[ServiceProcesses]:
    """Every service as its own process under a fresh prefix, the model service calling
    the second twin server; the test middleware record to the session's Redis."""
    with services_on(redis_url, servers[1], RECORD_REDIS_URL=redis_url) as procs:
        yield procs


@pytest.fixture(scope="module")
def up(redis_url: str, scripted: ScriptedOpenAIServer) -> Iterator[dict[str, str]]:
    """``loopline up`` under a fresh prefix, the model service calling ``scripted``; the
    environment it runs with (a client of it may take what it needs)."""
    env = {
        **os.environ,
        "REDIS_URL": redis_url,
        "LOOPLINE_PREFIX": unique_prefix(),
        "OPENAI_BASE_URL": scripted.url,
        "OPENAI_API_KEY": "test",
        "PYTHONPATH": str(REPO_ROOT),
    }
    with loopline_up(env, env["LOOPLINE_PREFIX"]):
        yield env
