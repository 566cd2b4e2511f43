"""TLS: a Redis 7 of the test's own serving TLS only, with a throwaway certificate
authority and server certificate made with ``openssl`` in the test's folder, and the ACL
users ``loopline acl`` prints. Every service runs as its own process, connecting with a
``rediss://`` URL as its own user (``ssl_ca_certs`` in the query string, as README
Security shows); the operator deploys an agent and a producer runs a task to its end over
TLS. Plain TCP on that port gets no answer, and a client that does not trust the CA cannot
connect."""

from __future__ import annotations

import asyncio
import shlex
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis as syncredis

from contracts import HumanMessage, TaskCompleted, ToolMessage
from contracts.streams import SERVICES
from loopline import acl
from loopline.agentfile import agent_from_dict
from loopline.client import Client
from loopline.testing.redis_server import RedisServer, TlsFiles
from loopline.testing.scripted import (
    Reply,
    ScriptedOpenAIServer,
    ScriptedToolCall,
    responder_by_prompt,
)
from tests.support import ServiceProcesses

RUN = uuid.uuid4().hex[:8]
PREFIX = f"tls{RUN}"
PASSWORDS = {role: f"pw-{role}-{RUN}" for role in acl.ROLES}
ADMIN_PASSWORD = f"admin-{RUN}"
PROMPT = "add over tls"
SCRIPTS = {
    PROMPT: [
        Reply(tool_calls=(ScriptedToolCall("add", {"a": 20, "b": 22}),)),
        Reply(content="20 + 22 = 42"),
    ]
}
AGENT = agent_from_dict({"model": "gpt-4o-mini", "tools": ["tests.tooling:add"]})[0]


@dataclass
class TlsBus:
    server: RedisServer
    tls: TlsFiles

    def url(self, user: str, password: str) -> str:
        return (
            f"rediss://{user}:{password}@127.0.0.1:{self.server.port}/0?ssl_ca_certs={self.tls.ca}"
        )

    def role_url(self, role: str) -> str:
        return self.url(acl.user_name(PREFIX, role), PASSWORDS[role])

    @property
    def admin_url(self) -> str:
        return self.url("admin", ADMIN_PASSWORD)


@pytest.fixture(scope="module")
def bus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsBus]:
    folder = tmp_path_factory.mktemp("tls-redis")
    tls = TlsFiles.make(folder)
    server = RedisServer(folder, persistent=False, tls=tls).start()
    setup = syncredis.Redis.from_url(server.url)  # the default user, once, over TLS
    try:
        for line in acl.setuser_lines(PREFIX, PASSWORDS):
            setup.execute_command(*shlex.split(line))
        setup.execute_command(
            "ACL", "SETUSER", "admin", "on", f">{ADMIN_PASSWORD}", "~*", "&*", "+@all"
        )
        setup.execute_command(*shlex.split(acl.locked_default(aclfile=False)))
    finally:
        setup.close()
    try:
        yield TlsBus(server, tls)
    finally:
        server.stop()


@pytest.fixture(scope="module")
def services(bus: TlsBus) -> Iterator[None]:
    with ScriptedOpenAIServer(responder=responder_by_prompt(SCRIPTS)) as scripted:
        env = {
            "OPENAI_BASE_URL": scripted.url,
            "OPENAI_API_KEY": "test",
            "LOOPLINE_ALLOW_INLINE_AGENTS": "false",
        }
        urls = {service: bus.role_url(service) for service in SERVICES}
        stack = ServiceProcesses(bus.admin_url, PREFIX, env=env, urls=urls)
        try:  # five Pythons starting at once take minutes on a busy two-core host
            stack.start(timeout=240)
            yield
        finally:
            stack.stop()


async def test_a_task_completes_with_every_service_on_rediss(bus: TlsBus, services: None) -> None:
    async with Client(bus.role_url("operator"), PREFIX) as operator:
        await operator.deploy(AGENT, name="adder")
    async with Client(bus.role_url("producer"), PREFIX) as producer:
        task_id = await producer.submit("adder", [HumanMessage(content=PROMPT)])
        done = await asyncio.wait_for(producer.wait(task_id), 60)
        messages = await producer.messages(task_id)
    assert isinstance(done, TaskCompleted) and done.answer == "20 + 22 = 42"
    results = [m for m in messages if isinstance(m, ToolMessage)]
    assert [r.text() for r in results] == ["42"]
    # every service reached the server over TLS as its own user: its consumers announced
    admin = syncredis.Redis.from_url(bus.admin_url, decode_responses=True)
    try:
        clients = admin.execute_command("CLIENT", "LIST")
    finally:
        admin.close()
    users = {part.split("=", 1)[1] for part in str(clients).split() if part.startswith("user=")}
    assert {acl.user_name(PREFIX, s) for s in SERVICES} <= users


def test_plain_tcp_and_an_untrusted_ca_get_nothing(bus: TlsBus, tmp_path: Path) -> None:
    plain = syncredis.Redis(port=bus.server.port, socket_timeout=2, socket_connect_timeout=2)
    with pytest.raises(syncredis.ConnectionError):
        plain.ping()
    plain.close()
    other = TlsFiles.make(tmp_path)  # a CA the server's certificate was not signed by
    untrusted = bus.role_url("producer").replace(str(bus.tls.ca), str(other.ca))
    client = syncredis.Redis.from_url(untrusted, socket_connect_timeout=2)
    with pytest.raises(syncredis.ConnectionError, match="CERTIFICATE_VERIFY_FAILED"):
        client.ping()
    client.close()
