"""Only the operator decides what runs: tasks name deployed agents, references resolve
only inside the import allow-list, and model endpoints and keys are the operator's.

The services run as processes on a real Redis with inline agents off (the default of a
deployment); the model is the scripted server over HTTP (the operator's endpoint), or the
in-consumer scripted model where the attack needs a model that calls any tool. Each
attack is tried twice where it can be: at registration (refused before anything is
stored) and by a registration written into the registry directly (past every client-side
check: the services refuse it again when the task starts).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from contracts import AgentSpec, HumanMessage, TaskFailed
from contracts.agent import DeployedAgent
from contracts.streams import DATA_FIELD
from loopline.client import Client, TaskFailedError
from loopline.testing.harness import services_on
from loopline.testing.processes import SOURCE_ROOT, ServiceProcesses
from loopline.testing.scripted import (
    Reply,
    ScriptedOpenAIServer,
    responder_by_prompt,
)
from services import deployed
from services.errors import ConfigurationError
from services.spec.validation import InvalidSpec
from tests.support import wait_for

OPERATOR_KEY = "sk-operator-0123456789abcdef"
NAMED_KEY = "sk-named-endpoint-fedcba9876543210"
SCRIPTS: dict[str, list[Reply]] = {}
GETOUTPUT_SCHEMA = {
    "type": "function",
    "function": {
        "name": "getoutput",
        "description": "Run a shell command.",
        "parameters": {
            "type": "object",
            "properties": {"cmd": {"type": "string"}},
            "required": ["cmd"],
        },
    },
}


@pytest.fixture(scope="module")
def marker(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A file an attack would create; it must never appear."""
    return tmp_path_factory.mktemp("attack") / "marker"


@pytest.fixture(scope="module")
def servers() -> Iterator[dict[str, ScriptedOpenAIServer]]:
    """The operator's default endpoint, a second endpoint the operator names for one
    model, and an attacker's recorder."""
    with (
        ScriptedOpenAIServer(responder=responder_by_prompt(SCRIPTS)) as default,
        ScriptedOpenAIServer(turns=[Reply(content="from the named endpoint")]) as named,
        ScriptedOpenAIServer(turns=[Reply(content="recorded")]) as recorder,
    ):
        yield {"default": default, "named": named, "recorder": recorder}


@pytest.fixture(scope="module")
def stack(redis_url: str, servers: dict[str, ScriptedOpenAIServer]) -> Iterator[ServiceProcesses]:
    models = {"named-model": {"base_url": servers["named"].url, "api_key_env": "NAMED_API_KEY"}}
    with services_on(
        redis_url,
        servers["default"],
        OPENAI_API_KEY=OPERATOR_KEY,
        NAMED_API_KEY=NAMED_KEY,
        LOOPLINE_MODELS=json.dumps(models),
        LOOPLINE_ALLOW_INLINE_AGENTS="false",
        LOOPLINE_ALLOW_FAKE_MODEL="true",
        LOOPLINE_ALLOWED_MODULES="tests",
        RECORD_REDIS_URL=redis_url,  # where the recording middleware writes: this Redis
    ) as procs:
        yield procs


@pytest.fixture
async def client(stack: ServiceProcesses) -> AsyncIterator[Client]:
    async with Client(stack.redis_url, stack.prefix) as found:
        yield found


def answering(text: str) -> str:
    """A fresh prompt the operator's endpoint answers with ``text``."""
    prompt = f"{text} {uuid.uuid4().hex}"
    SCRIPTS[prompt] = [Reply(content=text)]
    return prompt


async def ends_failed(client: Client, task_id: str) -> TaskFailed:
    with pytest.raises(TaskFailedError) as failed:
        await asyncio.wait_for(client.wait(task_id), 60)
    return failed.value.event


async def forge_registration(client: Client, name: str, spec: dict[str, Any]) -> str:
    """A registration written straight into the registry, skipping ``check_deployable``
    (as a registry written by hand, or an allow-list narrowed since the deploy): what
    the services check again when a task starts."""
    agent = DeployedAgent(name=name, version=1, spec=AgentSpec.model_validate(spec))
    body = agent.model_dump_json(exclude={"version"})
    await client.redis.hset(client.names.deployed, mapping={f"{name}@1": body, name: 1})
    return name


async def run_named(client: Client, agent: str, prompt: str = "hi", **kwargs: Any) -> str:
    return await client.submit(agent, [HumanMessage(content=prompt)], **kwargs)


# -- the attacks -----------------------------------------------------------------------------


def popen_spec(marker: Path) -> dict[str, Any]:
    return {
        "model": "gpt-4o-mini",
        "middleware": [{"type": "subprocess:Popen", "args": ["touch", str(marker)]}],
    }


async def test_a_popen_middleware_is_refused_and_never_built(client: Client, marker: Path) -> None:
    with pytest.raises(InvalidSpec, match="module 'subprocess' is not allowed"):
        await client.deploy(AgentSpec.model_validate(popen_spec(marker)), name="popen")
    assert await client.redis.hget(client.names.deployed, "popen") is None

    name = await forge_registration(client, f"popen-{uuid.uuid4().hex[:6]}", popen_spec(marker))
    failed = await ends_failed(client, await run_named(client, name))
    assert "middleware 'subprocess:Popen'" in failed.reason
    assert "not allowed" in failed.reason
    await asyncio.sleep(0.5)  # whatever would have been built has had its chance
    assert not marker.exists()


def getoutput_spec(marker: Path) -> dict[str, Any]:
    """The in-consumer scripted model calls the stdlib's shell, given as a tool."""
    call = {"name": "getoutput", "args": {"cmd": f"touch {marker}"}}
    return {
        "model": {"name": "fake", "params": {"turns": [{"tool_calls": [call]}, {"content": "x"}]}},
        "tools": ["subprocess:getoutput"],
        "tool_schemas": [GETOUTPUT_SCHEMA],
    }


async def test_a_stdlib_tool_path_is_refused_with_the_fake_model(
    client: Client, marker: Path
) -> None:
    with pytest.raises(InvalidSpec, match="tool path 'subprocess:getoutput'"):
        await client.deploy(AgentSpec.model_validate(getoutput_spec(marker)), name="shell")

    name = await forge_registration(client, f"shell-{uuid.uuid4().hex[:6]}", getoutput_spec(marker))
    failed = await ends_failed(client, await run_named(client, name))
    assert "tool path 'subprocess:getoutput'" in failed.reason
    assert "not allowed" in failed.reason
    assert not marker.exists()


async def test_the_tools_service_refuses_a_stdlib_tool_itself(client: Client, marker: Path) -> None:
    """Past the loop: a spec written under an agent id and a ToolRequested put on the
    tools stream by hand. The tools service's own resolver refuses the path before
    importing it, and the call is dead-lettered with the reason."""
    spec = AgentSpec.model_validate(getoutput_spec(marker))
    await client.redis.set(client.names.agent(spec.agent_id), spec.model_dump_json())
    task_id = uuid.uuid4().hex
    call = {"id": "call_1", "name": "getoutput", "args": {"cmd": f"touch {marker}"}}
    forged = {
        "type": "ToolRequested",
        "task_id": task_id,
        "step": 1,
        "agent_id": spec.agent_id,
        "call": call,
    }
    await client.redis.xadd(client.names.tools, {DATA_FIELD: json.dumps(forged)})

    async def letter() -> str | None:
        found = [d for _, d in await client.dead_letters() if d.task_id == task_id]
        return found[0].error if found else None

    error = await wait_for(letter, timeout=30)
    assert "tool path 'subprocess:getoutput'" in error and "not allowed" in error
    assert not marker.exists()


def pii_spec() -> dict[str, Any]:
    return {
        "model": "gpt-4o-mini",
        "middleware": [
            {"type": "PIIMiddleware", "pii_type": "shell", "detector": {"callable": "os:system"}}
        ],
    }


async def test_a_callable_parameter_outside_the_allow_list_is_refused(
    client: Client, servers: dict[str, ScriptedOpenAIServer]
) -> None:
    with pytest.raises(InvalidSpec, match="function 'os:system'"):
        await client.deploy(AgentSpec.model_validate(pii_spec()), name="pii")

    name = await forge_registration(client, f"pii-{uuid.uuid4().hex[:6]}", pii_spec())
    prompt = answering("never asked")
    failed = await ends_failed(client, await run_named(client, name, prompt))
    assert "function 'os:system'" in failed.reason and "not allowed" in failed.reason
    assert all(prompt not in json.dumps(r) for r in servers["default"].chat_requests())


@pytest.mark.parametrize(
    "model",
    [
        pytest.param({"name": "gpt-4o-mini", "base_url": "RECORDER"}, id="base_url"),
        pytest.param({"name": "gpt-4o-mini", "params": {"base_url": "RECORDER"}}, id="param"),
        pytest.param(
            {"name": "gpt-4o-mini", "params": {"openai_api_base": "RECORDER"}}, id="alias"
        ),
    ],
)
async def test_a_model_endpoint_in_the_agent_is_refused_and_never_gets_the_key(
    client: Client, servers: dict[str, ScriptedOpenAIServer], model: dict[str, Any]
) -> None:
    recorder = servers["recorder"]
    model = json.loads(json.dumps(model).replace("RECORDER", recorder.url))
    with pytest.raises(InvalidSpec, match="not allowed in an agent"):
        await client.deploy(AgentSpec.model_validate({"model": model}), name="exfil")

    name = await forge_registration(client, f"exfil-{uuid.uuid4().hex[:6]}", {"model": model})
    failed = await ends_failed(client, await run_named(client, name))
    assert "not allowed in an agent" in failed.reason
    assert recorder.authorizations == []  # never called, so never given the key
    assert OPERATOR_KEY not in failed.reason


async def test_the_operator_endpoints_get_their_keys(
    client: Client, servers: dict[str, ScriptedOpenAIServer]
) -> None:
    """The control for the test above: a deployed agent's model is called on the
    operator's endpoint with the operator's key, and a model the operator named in
    LOOPLINE_MODELS on its own endpoint with its own key."""
    default = await client.deploy(AgentSpec.model_validate({"model": "gpt-4o-mini"}), name="plain")
    prompt = answering("plain answer")
    done = await asyncio.wait_for(client.wait(await run_named(client, default.ref, prompt)), 60)
    assert done.answer == "plain answer"
    assert f"Bearer {OPERATOR_KEY}" in servers["default"].authorizations

    named = await client.deploy(AgentSpec.model_validate({"model": "named-model"}), name="named")
    done = await asyncio.wait_for(client.wait(await run_named(client, named.ref)), 60)
    assert done.answer == "from the named endpoint"
    assert servers["named"].authorizations == [f"Bearer {NAMED_KEY}"]


# -- deployed agents -----------------------------------------------------------------------------


def cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "loopline", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=SOURCE_ROOT,
    )


async def test_deploy_list_show_rm_and_versions(
    client: Client,
    stack: ServiceProcesses,
    tmp_path: Path,
    servers: dict[str, ScriptedOpenAIServer],
) -> None:
    env = {**os.environ, "REDIS_URL": stack.redis_url, "LOOPLINE_PREFIX": stack.prefix}
    name = f"helper-{uuid.uuid4().hex[:6]}"
    agent_file = tmp_path / "agent.yaml"
    agent_file.write_text("model: gpt-4o-mini\nsystem_prompt: first prompt\n")
    first = cli("deploy", str(agent_file), "--name", name, env=env)
    assert (first.returncode, first.stdout.strip()) == (0, f"deployed {name}@1"), first.stderr
    again = cli("deploy", str(agent_file), "--name", name, env=env)
    assert again.stdout.strip() == f"unchanged {name}@1"
    agent_file.write_text("model: gpt-4o-mini\nsystem_prompt: second prompt\n")
    second = cli("deploy", str(agent_file), "--name", name, env=env)
    assert second.stdout.strip() == f"deployed {name}@2"

    listed = json.loads(cli("agents", "list", "--json", env=env).stdout)
    assert {"agent": f"{name}@2", "model": "gpt-4o-mini"}.items() <= next(
        row for row in listed if row["agent"].startswith(f"{name}@")
    ).items()
    every = json.loads(cli("agents", "list", "--all", "--json", env=env).stdout)
    assert [r["agent"] for r in every if r["agent"].startswith(f"{name}@")] == [
        f"{name}@1",
        f"{name}@2",
    ]
    shown = json.loads(cli("agents", "show", f"{name}@1", "--json", env=env).stdout)
    assert shown["spec"]["system_prompt"] == "first prompt" and shown["version"] == 1

    # NAME runs the latest version, NAME@VERSION that version
    versions = (
        (name, "second prompt"),
        (f"{name}@1", "first prompt"),
        (f"{name}@2", "second prompt"),
    )
    for ref, expected in versions:
        prompt = answering("ok")
        await asyncio.wait_for(client.wait(await run_named(client, ref, prompt)), 60)
        (request,) = [r for r in servers["default"].chat_requests() if prompt in json.dumps(r)]
        assert request["messages"][0] == {"role": "system", "content": expected}

    removed = cli("agents", "rm", f"{name}@2", env=env)
    assert removed.stdout.strip() == f"removed {name}@2"
    # the loop kept @2 from its task above, and forgot it with the removal
    refused = await ends_failed(client, await run_named(client, f"{name}@2"))
    assert f"no deployed agent {name + '@2'!r}" in refused.reason
    assert (await client.get_agent(name)).version == 1  # the latest is the one left
    assert cli("agents", "rm", name, env=env).stdout.strip() == f"removed {name}@1"
    gone = cli("agents", "show", name, env=env)
    assert gone.returncode == 2
    assert (
        gone.stderr.strip()
        == f"loopline: error: no deployed agent {name!r} (see `loopline agents list`)"
    )
    failed = await ends_failed(client, await run_named(client, name))
    assert f"no deployed agent {name!r}" in failed.reason


async def test_an_inline_spec_is_refused_with_the_reason(
    client: Client, servers: dict[str, ScriptedOpenAIServer]
) -> None:
    prompt = answering("never asked")
    spec = AgentSpec.model_validate({"model": "gpt-4o-mini"})
    failed = await ends_failed(client, await client.submit(spec, [HumanMessage(content=prompt)]))
    assert "inline agent specs are not run here" in failed.reason
    assert "LOOPLINE_ALLOW_INLINE_AGENTS" in failed.reason
    assert all(prompt not in json.dumps(r) for r in servers["default"].chat_requests())


async def test_overrides_only_of_what_the_registration_allows(
    client: Client, servers: dict[str, ScriptedOpenAIServer]
) -> None:
    spec = AgentSpec.model_validate({"model": "gpt-4o-mini", "system_prompt": "operator's"})
    agent = await client.deploy(spec, name="narrow", overridable=["system_prompt"])
    assert agent.overridable == ["system_prompt"]

    prompt = answering("overridden")
    task_id = await run_named(client, agent.ref, prompt, overrides={"system_prompt": "per run"})
    assert (await asyncio.wait_for(client.wait(task_id), 60)).answer == "overridden"
    (request,) = [r for r in servers["default"].chat_requests() if prompt in json.dumps(r)]
    assert request["messages"][0] == {"role": "system", "content": "per run"}

    refused = {
        "context": ({"overrides": {"context": {"user": "x"}}}, "does not allow overriding context"),
        "max_steps": ({"max_steps": 3}, "does not allow overriding max_steps"),
        "tools": ({"overrides": {"tools": ["os:system"]}}, "unknown override tools"),
    }
    for fields, expected in refused.values():
        failed = await ends_failed(client, await run_named(client, agent.ref, **fields))
        assert expected in failed.reason, failed.reason
        assert "(allowed: system_prompt)" in failed.reason or "unknown" in expected


async def test_a_producer_without_the_registry_right_gets_one_line(
    stack: ServiceProcesses, client: Client, redis_client: aioredis.Redis, tmp_path: Path
) -> None:
    """A Redis user that may submit tasks and read the registry, not write it: deploying
    fails with one line naming the registry, from Python and from the command line; a
    task naming the operator's deployed agent runs."""
    user, password = f"producer-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    prefix = stack.prefix
    await redis_client.execute_command(
        "ACL", "SETUSER", user, "on", f">{password}", "resetkeys", f"%R~{prefix}:*",
        f"%W~{prefix}:tasks", "+@all",
    )  # fmt: skip
    try:
        url = stack.redis_url.replace("redis://", f"redis://{user}:{password}@", 1)
        async with Client(url, prefix) as producer:
            spec = AgentSpec.model_validate({"model": "gpt-4o-mini"})
            with pytest.raises(deployed.RegistryDenied) as denied:
                await producer.deploy(spec, name="sneaky")
        message = str(denied.value)
        assert "\n" not in message
        assert message.startswith("cannot register agent 'sneaky': this Redis user has no ")
        assert f"{prefix}:deployed" in message
        agent_file = tmp_path / "agent.yaml"
        agent_file.write_text("model: gpt-4o-mini\n")
        env = {**os.environ, "REDIS_URL": url, "LOOPLINE_PREFIX": prefix}
        done = cli("deploy", str(agent_file), env=env)
        assert done.returncode == 2
        (line,) = done.stderr.strip().splitlines()
        assert line.startswith("loopline: error: cannot register agent 'agent': this Redis user")
        assert password not in line

        operators = await client.deploy(AgentSpec.model_validate({"model": "gpt-4o-mini"}))
        prompt = answering("the producer's answer")
        ran = cli("run", prompt, "--deployed", operators.name, "--json", env=env)
        assert ran.returncode == 0, ran.stderr
        assert json.loads(ran.stdout)["answer"] == "the producer's answer"
    finally:
        await redis_client.execute_command("ACL", "DELUSER", user)


# -- what each process allows ------------------------------------------------------------------


@pytest.mark.fast
def test_the_fake_model_runs_only_where_allowed(monkeypatch: pytest.MonkeyPatch) -> None:
    from services.model.chat import build_chat_model

    spec = AgentSpec.model_validate({"model": {"name": "fake", "params": {"turns": []}}})
    monkeypatch.setenv("LOOPLINE_ALLOW_FAKE_MODEL", "false")
    with pytest.raises(ConfigurationError, match="LOOPLINE_ALLOW_FAKE_MODEL=true"):
        build_chat_model(spec.model)
    with pytest.raises(InvalidSpec, match="LOOPLINE_ALLOW_FAKE_MODEL=true"):
        deployed.registration(spec)
    monkeypatch.setenv("LOOPLINE_ALLOW_FAKE_MODEL", "true")
    assert type(build_chat_model(spec.model)).__name__ == "ScriptedChatModel"


@pytest.mark.fast
def test_the_allow_list_is_checked_before_importing(monkeypatch: pytest.MonkeyPatch) -> None:
    """A module outside the allow-list is never imported: importing it would already run
    its code."""
    from services.spec import imports

    monkeypatch.setenv("LOOPLINE_ALLOWED_MODULES", "tests.tooling")
    sys.modules.pop("tests.compose_tools", None)
    with pytest.raises(imports.ModuleNotAllowed):
        imports.resolve("tests.compose_tools:where")
    assert "tests.compose_tools" not in sys.modules
    assert imports.resolve("tests.tooling:add").__name__ == "add"  # a listed prefix resolves
    with pytest.raises(imports.ModuleNotAllowed):
        imports.resolve("tests.tooling_evil:add")  # a prefix is a module, not a string start


async def test_a_context_override_reaches_the_middleware(
    client: Client, redis_client: aioredis.Redis
) -> None:
    """The run's ``context`` is LangGraph's ``runtime.context`` for the agent's hooks:
    each task its own, the registration unchanged."""
    key = f"{client.names.prefix}:seen-context"
    recorder = {"type": "tests.middlewares:ContextRecorder", "key": key}
    spec = AgentSpec.model_validate({"model": "gpt-4o-mini", "middleware": [recorder]})
    agent = await client.deploy(spec, name="contextual")
    for context in ({"user": "ada"}, None):
        overrides = {"context": context} if context else {}
        prompt = answering("ok")
        task_id = await run_named(client, agent.ref, prompt, overrides=overrides)
        await asyncio.wait_for(client.wait(task_id), 60)
    seen = [json.loads(raw) for raw in await redis_client.lrange(key, 0, -1)]
    assert seen == [{"user": "ada"}, None]
    assert (await client.get_agent(agent.ref)).spec.context is None


def test_create_agent_names_the_module_outside_the_allow_list(
    monkeypatch: pytest.MonkeyPatch, redis_url: str
) -> None:
    """With REDIS_URL, a tool function of a module the allow-list does not name is
    refused where the agent is made, with the setting that would allow it."""
    from loopline import create_agent
    from tests.tooling import add

    monkeypatch.setenv("LOOPLINE_ALLOWED_MODULES", "benchmarks")
    not_allowed = re.escape("module 'tests.tooling' is not allowed: add it to LOOPLINE_ALLOWED")
    with pytest.raises(TypeError, match=not_allowed):
        create_agent("gpt-4o-mini", [add], redis_url=redis_url)
    with pytest.raises(ConfigurationError, match=re.escape("tool path 'tests.tooling:add': ")):
        create_agent("gpt-4o-mini", ["tests.tooling:add"], redis_url=redis_url)


@pytest.mark.fast
def test_named_endpoints_from_a_toml_file(tmp_path: Path) -> None:
    """LOOPLINE_MODELS as a TOML file: a model's own endpoint and key (by variable name),
    found by its name with or without ``openai:``; other models use the default one."""
    from contracts.agent import ModelSpec
    from services.spec import endpoints

    models = tmp_path / "models.toml"
    models.write_text(
        '[local-llama]\nbase_url = "http://vllm:8000/v1"\napi_key_env = "VLLM_API_KEY"\n'
        'model = "meta-llama/Llama-3.1-8B"\n'
    )
    env = {
        "LOOPLINE_MODELS": str(models),
        "VLLM_API_KEY": "sk-vllm-key",
        "OPENAI_BASE_URL": "http://default/v1",
    }
    for name in ("local-llama", "openai:local-llama"):
        found = endpoints.endpoint_for(ModelSpec(name=name), env)
        assert found == endpoints.Endpoint(
            "meta-llama/Llama-3.1-8B", "http://vllm:8000/v1", "sk-vllm-key"
        )
        assert "sk-vllm-key" not in repr(found)
    other = endpoints.endpoint_for(ModelSpec(name="gpt-4o-mini"), env)
    assert other == endpoints.Endpoint("gpt-4o-mini", "http://default/v1", None)
    no_default = {k: v for k, v in env.items() if k != "OPENAI_BASE_URL"}
    assert endpoints.endpoint_for(ModelSpec(name="gpt-4o-mini"), no_default) is None

    with pytest.raises(ConfigurationError, match="variable VLLM_API_KEY is not set"):
        endpoints.configured_models({"LOOPLINE_MODELS": str(models)})
    with pytest.raises(ConfigurationError, match="must be a mapping of api_key_env, base_url"):
        endpoints.configured_models({"LOOPLINE_MODELS": '{"m": {"api_key": "sk-literal"}}'})
