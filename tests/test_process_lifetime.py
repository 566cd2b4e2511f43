"""Nothing outlives the process that started it: ``loopline up`` on the embedded default, a
program calling ``create_agent(...).invoke`` on the embedded default, and the test harness
(a Redis server, a scripted model server and every service as processes), each killed with
SIGKILL: within 2 s no process it started is alive, its ports are free and its temporary
folders are gone. Two embedded ``loopline up`` each get their own server, and SIGTERM and
Ctrl-C still stop everything cleanly.

Every program runs with a temporary directory of its own (``TMPDIR``), so "its folders are
gone" means that directory is empty again."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import redis as syncredis

from contracts import HumanMessage, TaskCompleted
from contracts.streams import SERVICES, Names
from loopline import lifetime
from loopline.agentfile import agent_from_dict
from loopline.client import Client
from loopline.testing.scripted import Reply, ScriptedOpenAIServer
from tests.support import REPO_ROOT

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="reads the process table from /proc"
)

GONE_WITHIN_S = 2.0
EMBEDDED_URL = re.compile(r"embedded server: REDIS_URL=(redis://[\d.]+:(\d+))")


# -- the process table -------------------------------------------------------------------


def _stat(pid: int) -> tuple[int, str, int] | None:
    """(parent pid, state, start time) of a process, None once it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text.rsplit(")", 1)[1].split()
    return int(fields[1]), fields[0], int(fields[19])


def descendants(root: int) -> dict[int, int]:
    """Every process below ``root``, by pid, with its start time (a pid may be reused)."""
    parents: dict[int, list[int]] = {}
    starts: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (stat := _stat(int(entry.name))) is not None:
            parents.setdefault(stat[0], []).append(int(entry.name))
            starts[int(entry.name)] = stat[2]
    found: dict[int, int] = {}
    todo = list(parents.get(root, []))
    while todo:
        pid = todo.pop()
        found[pid] = starts[pid]
        todo += parents.get(pid, [])
    return found


def running(processes: dict[int, int]) -> list[int]:
    """Those of ``processes`` still running (a zombie waiting for init to reap it holds
    nothing: no port, no memory)."""
    alive = []
    for pid, started in processes.items():
        stat = _stat(pid)
        if stat is not None and stat[2] == started and stat[1] != "Z":
            alive.append(pid)
    return alive


def port_free(port: int) -> bool:
    """Nothing listens on ``port`` and a server can bind it (as Valkey and Redis do)."""
    with socket.socket() as probe:
        if probe.connect_ex(("127.0.0.1", port)) == 0:
            return False
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


# -- a program under test ----------------------------------------------------------------


@dataclass
class Program:
    """A loopline program run as a user runs it, with its own temporary directory."""

    args: list[str]
    tmp: Path
    env: dict[str, str] = field(default_factory=dict)
    new_session: bool = False
    proc: lifetime.BoundProcess | None = None
    log: Path | None = None

    def start(self) -> Program:
        self.tmp.mkdir(parents=True, exist_ok=True)
        self.log = self.tmp.parent / f"{self.tmp.name}.log"
        base = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "OPENAI_BASE_URL")}
        env = {**base, "PYTHONPATH": str(REPO_ROOT), "TMPDIR": str(self.tmp), **self.env}
        with self.log.open("wb") as out:
            self.proc = lifetime.spawn(
                [sys.executable, *self.args],
                env=env,
                cwd=REPO_ROOT,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=self.new_session,
            )
        return self

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log else ""

    def wait_for_output(self, pattern: re.Pattern[str], timeout: float = 90) -> re.Match[str]:
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if found := pattern.search(self.output()):
                return found
            if self.proc.poll() is not None:
                pytest.fail(f"{self.args} exited ({self.proc.returncode}):\n{self.output()}")
            time.sleep(0.05)
        pytest.fail(f"{self.args} did not print {pattern.pattern!r}:\n{self.output()[-3000:]}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@contextmanager
def program(args: list[str], tmp: Path, **kw: object) -> Iterator[Program]:
    started = Program(args, tmp, **kw).start()  # type: ignore[arg-type]
    try:
        yield started
    finally:
        started.stop()


def assert_nothing_left(children: dict[int, int], ports: list[int], tmp: Path) -> None:
    """Within ``GONE_WITHIN_S``: no child running, every port free, the folder empty."""
    assert children, "the program started no process: nothing was checked"
    deadline = time.monotonic() + GONE_WITHIN_S
    while True:
        alive = running(children)
        busy = [port for port in ports if not port_free(port)]
        left = sorted(p.name for p in tmp.iterdir())
        if not (alive or busy or left):
            return
        if time.monotonic() > deadline:
            commands = {
                pid: Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")[:120]
                for pid in alive
                if Path(f"/proc/{pid}/cmdline").exists()
            }
            pytest.fail(f"left after {GONE_WITHIN_S} s: {commands}, ports {busy}, files {left}")
        time.sleep(0.02)


def services_announced(url: str, prefix: str = "loopline") -> bool:
    client = syncredis.Redis.from_url(url, socket_connect_timeout=1)
    try:
        return len(client.hvals(Names(prefix).consumers)) >= len(SERVICES)
    except syncredis.ConnectionError:
        return False
    finally:
        client.close()


def wait_until(predicate: object, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        if time.monotonic() > deadline:
            pytest.fail("condition not met in time")
        time.sleep(0.1)


def start_up(tmp: Path, **kw: object) -> tuple[Program, str, int]:
    """``loopline up`` with no REDIS_URL, once every service has announced itself."""
    up = Program(["-m", "loopline", "up"], tmp, **kw).start()  # type: ignore[arg-type]
    found = up.wait_for_output(EMBEDDED_URL)
    url, port = found.group(1), int(found.group(2))
    wait_until(lambda: services_announced(url) or up.proc.poll() is not None)  # type: ignore[union-attr]
    assert up.proc is not None and up.proc.poll() is None, up.output()
    return up, url, port


# -- SIGKILL -------------------------------------------------------------------------------


def test_a_killed_loopline_up_leaves_nothing(tmp_path: Path) -> None:
    up, _, port = start_up(tmp_path / "up")
    try:
        assert up.proc is not None
        children = descendants(up.proc.pid)
        assert any(b"valkey-server" in Path(f"/proc/{p}/cmdline").read_bytes() for p in children)
        up.proc.send_signal(signal.SIGKILL)
        up.proc.wait()
        assert_nothing_left(children, [port], up.tmp)
    finally:
        up.stop()


API_PROGRAM = r"""
import logging, time
from langchain_openai import ChatOpenAI
from loopline import create_agent
from loopline.testing.scripted import Reply, ScriptedOpenAIServer, ScriptedToolCall

logging.basicConfig(level=logging.WARNING)
logging.getLogger("loopline.embedded").setLevel(logging.DEBUG)  # says which server it started

def add(a: int, b: int) -> int:
    '''Add two integers.'''
    return a + b

turns = [Reply(tool_calls=(ScriptedToolCall("add", {"a": 2, "b": 3}),)), Reply(content="5")]
with ScriptedOpenAIServer(turns) as server:
    model = ChatOpenAI(model="gpt-4o-mini", base_url=server.url, api_key="k")
    out = create_agent(model, [add]).invoke({"messages": [{"role": "user", "content": "2+3"}]})
    print(f"answered {out['messages'][-1].content}", flush=True)
    time.sleep(600)
"""


def test_a_killed_program_on_the_embedded_default_leaves_nothing(tmp_path: Path) -> None:
    with program(["-c", API_PROGRAM], tmp_path / "api") as api:
        api.wait_for_output(re.compile(r"answered 5"))
        found = re.search(
            r"started the embedded Valkey server redis://[\d.]+:(\d+) \(pid (\d+)", api.output()
        )
        assert found, api.output()
        assert api.proc is not None
        children = descendants(api.proc.pid)
        assert int(found.group(2)) in children
        api.proc.send_signal(signal.SIGKILL)
        api.proc.wait()
        assert_nothing_left(children, [int(found.group(1))], api.tmp)


HARNESS_PROGRAM = r"""
import time
from loopline.testing.harness import unique_prefix
from loopline.testing.processes import ScriptedServerProcess, ServiceProcesses
from loopline.testing.redis_provider import RedisProvider

provider = RedisProvider().start()
with ScriptedServerProcess([{"content": "hello"}]) as model:
    env = {"OPENAI_BASE_URL": model.url, "OPENAI_API_KEY": "test"}
    with ServiceProcesses(provider.url, unique_prefix(), env=env) as procs:
        print(f"ready {provider.kind} {provider.url} {model.port}", flush=True)
        time.sleep(600)
"""


def test_a_killed_harness_leaves_nothing(tmp_path: Path) -> None:
    """The harness on its own Redis (the embedded server: no REDIS_URL, no Docker engine
    used), a scripted model server process and the five services."""
    env = {"DOCKER_HOST": "unix:///nonexistent"}  # never a container: nothing else to reap
    with program(["-c", HARNESS_PROGRAM], tmp_path / "harness", env=env) as harness:
        found = harness.wait_for_output(
            re.compile(r"ready embedded redis://[\d.]+:(\d+) (\d+)"), timeout=180
        )
        assert harness.proc is not None
        children = descendants(harness.proc.pid)
        assert len(children) >= len(SERVICES) + 3  # + the Redis, the model, the watchdog
        harness.proc.send_signal(signal.SIGKILL)
        harness.proc.wait()
        assert_nothing_left(children, [int(found.group(1)), int(found.group(2))], harness.tmp)


# -- two at once ---------------------------------------------------------------------------


async def test_two_embedded_ups_each_get_their_own_server(tmp_path: Path) -> None:
    with ScriptedOpenAIServer([Reply(content="ok")]) as model:
        env = {"OPENAI_BASE_URL": model.url, "OPENAI_API_KEY": "test"}
        ups: list[tuple[Program, str, int]] = []
        starting = [
            threading.Thread(target=lambda n=n: ups.append(start_up(tmp_path / n, env=env)))
            for n in ("first", "second")
        ]
        for thread in starting:
            thread.start()  # at the same moment: both may find the same port free
        for thread in starting:
            thread.join()
        try:
            assert len(ups) == 2, "a loopline up did not start"
            (killed, killed_url, killed_port), (kept, kept_url, _) = ups
            assert killed_url != kept_url
            assert killed.proc is not None and kept.proc is not None
            children = descendants(killed.proc.pid)
            killed.proc.send_signal(signal.SIGKILL)
            killed.proc.wait()
            assert_nothing_left(children, [killed_port], killed.tmp)

            spec = agent_from_dict({"model": "gpt-4o-mini", "tools": []})[0]
            async with Client(kept_url, "loopline") as client:
                task_id = await client.submit(spec, [HumanMessage(content="still there?")])
                done = await asyncio.wait_for(client.wait(task_id), timeout=60)
            assert isinstance(done, TaskCompleted) and done.answer == "ok"
            assert kept.proc.poll() is None, kept.output()
        finally:
            for up, _, _ in ups:
                up.stop()


# -- SIGTERM and Ctrl-C stop cleanly, as before ------------------------------------------


@pytest.mark.parametrize("how", ["SIGTERM", "Ctrl-C"])
def test_loopline_up_stops_cleanly(tmp_path: Path, how: str) -> None:
    up, _, port = start_up(tmp_path / "up", new_session=True)
    try:
        assert up.proc is not None
        children = descendants(up.proc.pid)
        if how == "SIGTERM":
            up.proc.send_signal(signal.SIGTERM)
        else:  # a terminal's Ctrl-C: SIGINT to the whole foreground process group
            os.killpg(up.proc.pid, signal.SIGINT)
        code = up.proc.wait(timeout=60)
        assert code in (0, 130), up.output()
        assert "Traceback" not in up.output()
        assert_nothing_left(children, [port], up.tmp)
    finally:
        up.stop()


# -- the kernel's part: a child outlives the thread that started it ----------------------


def test_a_child_started_from_a_worker_thread_outlives_the_thread() -> None:
    """PR_SET_PDEATHSIG follows the forking thread: a child forked by a worker thread that
    then ends would be killed with that thread, not with the process."""
    started: list[lifetime.BoundProcess] = []
    worker = threading.Thread(target=lambda: started.append(lifetime.spawn(["sleep", "30"])))
    worker.start()
    worker.join()
    (child,) = started
    try:
        time.sleep(0.3)
        assert child.poll() is None, "the child died with the thread that started it"
    finally:
        child.kill()
        child.wait()
