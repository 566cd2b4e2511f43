"""Loop services and the gateway keep the registrations they read, and forget one as
soon as it changes (``services.deployed.Registrations``): a removed version never starts
a task, ``NAME`` follows each new version, and while a process may have missed an
announcement it reads Redis every time."""

from __future__ import annotations

from typing import Any

import pytest

from contracts import AgentSpec
from loopline.client import Client
from services.deployed import Registrations
from services.runtime import Runtime
from services.settings import Settings
from tests.support import unique_prefix, wait_for

pytestmark = pytest.mark.fast


def spec(prompt: str) -> AgentSpec:
    return AgentSpec.model_validate({"model": "gpt-4o-mini", "system_prompt": prompt})


def refuse_reads(rt: Runtime) -> None:
    async def no_read(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError(f"read Redis for a kept registration: {args}")

    rt.redis.hget = no_read  # type: ignore[method-assign]


async def test_a_kept_version_is_read_once_and_forgotten_when_removed(redis_url: str) -> None:
    rt = Runtime(redis_url, Settings(prefix=unique_prefix()))
    kept = Registrations(rt.redis, rt.names)
    async with Client(redis_url, rt.names.prefix) as operator:
        first = await operator.deploy(spec("one"), name="helper")
        second = await operator.deploy(spec("two"), name="helper")
        kept.start()
        try:
            await wait_for(lambda: kept.listening)
            assert (await kept.lookup("helper@1")) == first
            assert (await kept.lookup("helper@2")) == second
            latest = rt.redis.hget
            refuse_reads(rt)
            assert (await kept.lookup("helper@1")).spec.system_prompt == "one"  # type: ignore[union-attr]
            rt.redis.hget = latest  # type: ignore[method-assign]

            await operator.remove_agent("helper@1")  # one version
            await wait_for(lambda: "helper@1" not in kept._kept)
            assert await kept.lookup("helper@1") is None
            assert await kept.lookup("helper@2") == second  # the other is kept

            await operator.remove_agent("helper")  # every version
            await wait_for(lambda: not kept._kept)
            assert await kept.lookup("helper@2") is None
            # a name deployed again starts at version 1 again: the new one runs
            again = await operator.deploy(spec("three"), name="helper")
            assert again.version == 1 and await kept.lookup("helper@1") == again

            # NAME is kept too, and follows the next version as soon as it is deployed
            assert await kept.lookup("helper") == again
            refuse_reads(rt)
            assert await kept.lookup("helper") == again
            rt.redis.hget = latest  # type: ignore[method-assign]
            newer = await operator.deploy(spec("four"), name="helper")
            await wait_for(lambda: "helper" not in kept._kept)
            assert await kept.lookup("helper") == newer
            assert await kept.lookup("helper@1") == again  # an older version still resolves
        finally:
            await kept.stop()
            await rt.close()


async def test_while_not_listening_every_lookup_reads_redis(redis_url: str) -> None:
    rt = Runtime(redis_url, Settings(prefix=unique_prefix()))
    kept = Registrations(rt.redis, rt.names)  # never started: a change could be missed
    async with Client(redis_url, rt.names.prefix) as operator:
        deployed = await operator.deploy(spec("one"), name="helper")
        try:
            assert await kept.lookup("helper@1") == deployed
            await operator.remove_agent("helper@1")
            assert await kept.lookup("helper@1") is None
        finally:
            await rt.close()
