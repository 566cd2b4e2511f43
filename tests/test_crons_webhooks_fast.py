"""The parts of crons and webhooks that decide "once" and "never", on the session's
Redis in this process: a cron's tick claimed by one of many claimers racing for it, an
abandoned tick taken over once, schedules read as croniter reads them (the sixth field
is seconds), and the operator's webhook policy refusing what LangGraph's refuses with
LangGraph's reasons."""

from __future__ import annotations

import asyncio
import datetime
from typing import Any

import pytest
import redis.asyncio as aioredis

from contracts.streams import Names
from loopline.api.crons import Cron, CronStore, next_date, tick_run_id, to_ms
from loopline.api.webhooks import BadWebhookSettings, parse_policy
from loopline.api.wire import BadRequest
from tests.support import unique_prefix

pytestmark = pytest.mark.fast

UTC = datetime.UTC


@pytest.fixture
async def store(redis_url: str) -> Any:
    client = aioredis.Redis.from_url(redis_url)
    names = Names(unique_prefix())
    yield CronStore(client, names)
    await client.delete(names.api_crons, names.api_cron_schedule, names.api_cron_firing)
    await client.aclose()


def _cron(cron_id: str = "c1", schedule: str = "* * * * * */2") -> Cron:
    return Cron(
        cron_id=cron_id,
        assistant_id="agent",
        thread_id=None,
        schedule=schedule,
        payload={},
        metadata={},
    )


async def test_one_of_many_claimers_fires_a_tick(store: CronStore) -> None:
    cron = _cron()
    tick = to_ms(datetime.datetime(2026, 1, 1, 0, 0, 2, tzinfo=UTC))
    await store.save(cron, tick)
    following = tick + 2000
    now = tick + 10
    won = await asyncio.gather(*(store.claim("c1", tick, following, now) for _ in range(20)))
    assert won.count(True) == 1
    assert await store.next_ms(["c1"]) == [following]
    # the tick is marked firing until its run is recorded
    assert await store.abandoned(now, now, 10) == [("c1", tick)]
    # a late claimer of the old tick loses even after the run is recorded
    await store.fired("c1", tick)
    assert not await store.claim("c1", tick, following + 2000, now)


async def test_an_abandoned_tick_is_taken_over_once(store: CronStore) -> None:
    await store.save(_cron(), 1000)
    assert await store.claim("c1", 1000, 3000, now_ms=5000)
    # claimed at 5000 and never recorded: abandoned for anyone who counts from 5000 on
    assert await store.abandoned(older_than_ms=4999, now_ms=40_000, limit=10) == []
    taken = await asyncio.gather(*(store.abandoned(5000, 40_000, 10) for _ in range(5)))
    assert sorted(t for found in taken for t in found) == [("c1", 1000)]


async def test_a_deleted_cron_leaves_no_schedule(store: CronStore) -> None:
    await store.save(_cron(), 1000)
    assert await store.delete("c1")
    assert await store.next_ms(["c1"]) == [None]
    assert await store.due(10**13, 10) == []
    assert not await store.delete("c1")


def test_schedules_are_croniters_with_seconds_as_the_sixth_field() -> None:
    start = datetime.datetime(2026, 1, 1, 0, 0, 3, tzinfo=UTC)
    assert next_date("* * * * * */10", start, None) == start.replace(second=10)
    assert next_date("*/5 * * * *", start, None) == start.replace(minute=5, second=0)
    # 09:00 in New York is 14:00 UTC in winter
    assert next_date("0 9 * * *", start, "America/New_York").hour == 14
    # a tick's run id is the same whoever fires it, and differs per tick
    assert tick_run_id("c1", 1000) == tick_run_id("c1", 1000) != tick_run_id("c1", 2000)


def test_a_cron_past_its_end_has_no_next_tick() -> None:
    cron = _cron(schedule="* * * * *")
    cron.end_time = "2026-01-01T00:00:30+00:00"
    assert cron.next_ms_after(datetime.datetime(2026, 1, 1, 0, 0, 0, tzinfo=UTC)) is None
    cron.end_time = "2026-01-01T00:01:00+00:00"
    assert cron.next_ms_after(datetime.datetime(2026, 1, 1, 0, 0, 0, tzinfo=UTC)) is not None


async def _refusal(policy_json: str, url: str) -> str:
    with pytest.raises(BadRequest) as refused:
        await parse_policy(policy_json).check(url)
    return str(refused.value)


async def test_the_webhook_policy_refuses_as_langgraphs_does() -> None:
    allow = '{"url": {"allowed_domains": ["hooks.example.com", "*.corp.example"]}}'
    assert await _refusal(allow, "https://evil.example.net/x") == "Webhook domain not allowed"
    assert await _refusal(allow, "https://corp.example/x") == "Webhook domain not allowed"
    await parse_policy(allow).check("https://a.corp.example/x")  # wildcard subdomain
    https = '{"url": {"require_https": true}}'
    assert await _refusal(https, "http://93.184.216.34/x") == "Webhook must use https"
    ports = '{"url": {"allowed_ports": [443]}}'
    assert await _refusal(ports, "https://93.184.216.34:8443/x") == "Webhook port 8443 not allowed"
    # loopback is refused unless the operator allows it; link-local (metadata) always
    assert "loopback" in await _refusal("", "http://127.0.0.1:9/x")
    assert "loopback" in await _refusal("", "http://localhost:9/x")
    await parse_policy('{"url": {"disable_loopback": false}}').check("http://127.0.0.1:9/x")
    assert "link-local" in await _refusal("", "http://169.254.169.254/latest/meta-data")
    assert "too long" in await _refusal('{"url": {"max_url_length": 10}}', "https://a.example/")


def test_a_malformed_webhooks_setting_is_refused_with_an_example() -> None:
    with pytest.raises(BadWebhookSettings, match="allowed_domains"):
        parse_policy('{"url": {"allowed_domain": ["x"]}}')
    with pytest.raises(BadWebhookSettings):
        parse_policy("not json")


# -- the scheduler, on a tenant with a deployed agent (no service runs its tasks) -------


@pytest.fixture
async def tenant(redis_url: str) -> Any:
    from contracts import AgentSpec
    from loopline.api.tenant import Tenant
    from loopline.client import Client
    from services.settings import Settings

    prefix = unique_prefix()
    async with Client(redis_url, prefix) as operator:
        spec = AgentSpec.model_validate({"model": "gpt-4o-mini"})
        await operator.deploy(spec, name="agent")
    found = Tenant(redis_url, prefix, Settings(prefix=prefix))
    yield found
    await found.close()


async def _due_cron(tenant: Any, thread_id: str | None) -> Cron:
    cron = _cron()
    cron.thread_id = thread_id
    cron.payload = {"input": {"messages": [{"role": "user", "content": "hi"}]}}
    await CronStore(tenant.redis, tenant.names).save(cron, 1000)
    return cron


async def test_a_tick_whose_replica_died_after_the_claim_is_run_once(tenant: Any) -> None:
    from loopline.api.cron_scheduler import ABANDONED_AFTER_MS, CronScheduler

    cron = await _due_cron(tenant, None)
    store = CronStore(tenant.redis, tenant.names)
    now_ms = int(datetime.datetime.now(UTC).timestamp() * 1000)
    # a replica claimed tick 1000 long ago and died before starting its run
    assert await store.claim(cron.cron_id, 1000, now_ms + 60_000, now_ms - ABANDONED_AFTER_MS - 1)
    schedulers = [CronScheduler(tenant) for _ in range(3)]
    await asyncio.gather(*(s.recover() for s in schedulers))
    run = await tenant.records.run(tick_run_id(cron.cron_id, 1000))
    assert run is not None and run.assistant_id == "agent"
    assert run.kwargs["config"] == {}  # the payload's (none), as sent
    assert run.multitask_strategy == "enqueue"  # LangGraph's default for a cron's runs
    assert await store.abandoned(now_ms, now_ms, 10) == []  # nothing left to recover
    # a replica that started the run and died before clearing the mark: not run again
    submitted = await tenant.redis.xlen(tenant.names.tasks)
    assert submitted == 1  # the recovered tick's run
    firing = {f"{cron.cron_id}/1000": now_ms - ABANDONED_AFTER_MS - 1}
    await tenant.redis.zadd(tenant.names.api_cron_firing, firing)
    await asyncio.gather(*(s.recover() for s in schedulers))
    assert await tenant.redis.xlen(tenant.names.tasks) == submitted
    assert await store.abandoned(now_ms, now_ms, 10) == []


async def test_a_cron_whose_thread_is_gone_is_removed_when_it_fires(tenant: Any) -> None:
    from loopline.api.cron_scheduler import CronScheduler

    cron = await _due_cron(tenant, "no-such-thread")
    assert await CronScheduler(tenant).fire_due() == 1
    store = CronStore(tenant.redis, tenant.names)
    assert await store.get(cron.cron_id) is None
    assert await tenant.records.run(tick_run_id(cron.cron_id, 1000)) is None


def test_header_templates_and_allowed_fields_as_langgraph_reads_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LG_WEBHOOK_TOKEN", "s3cret")
    monkeypatch.setenv("OTHER_TOKEN", "never")
    templated = '{"headers": {"Authorization": "Bearer ${{ env.LG_WEBHOOK_TOKEN }}"}}'
    assert parse_policy(templated).headers == {"Authorization": "Bearer s3cret"}
    # only variables under the prefix, and only ones that are set
    with pytest.raises(BadWebhookSettings, match="must start with the configured env_prefix"):
        parse_policy('{"headers": {"X": "${{ env.OTHER_TOKEN }}"}}')
    with pytest.raises(BadWebhookSettings, match="missing required environment variable"):
        parse_policy('{"headers": {"X": "${{ env.LG_WEBHOOK_UNSET }}"}}')
    mine = '{"env_prefix": "OTHER_", "headers": {"X": "${{ env.OTHER_TOKEN }}"}}'
    assert parse_policy(mine).headers == {"X": "never"}
    # the body keeps only the allowed fields
    fields = parse_policy('{"allowed_fields": ["run_id", "status"]}')
    assert fields.body({"run_id": "r", "status": "success", "values": {}}) == {
        "run_id": "r",
        "status": "success",
    }
    with pytest.raises(BadWebhookSettings, match="invalid field 'secrets'"):
        parse_policy('{"allowed_fields": ["secrets"]}')
