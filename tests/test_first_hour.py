"""A new user's first hour, as the user meets it: the README's no-key instructions and
Python script run from the README's own text, the CLI run as a process (piped, and in a
pseudo-terminal for the live view), a deployment the client only names agents to, Ctrl-C,
one-line errors, tables, ``--json`` and ``loopline doctor``."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from contracts import ModelResponded
from contracts.messages import AIMessage, ToolCall
from loopline.cli.render import call_summary, describe
from loopline.demo import lookup
from loopline.testing.processes import free_port
from loopline.testing.scripted import Reply, ScriptedOpenAIServer, ScriptedToolCall
from tests.support import REPO_ROOT, loopline_up, run_in_terminal, unique_prefix

README = (REPO_ROOT / "README.md").read_text()
ANSWER = "Twenty plus twenty-two makes forty-two, as the add tool says."
SLOW_S = 60.0
"""How long the slow tool waits: far longer than any test waits for it."""

SCRIPTS: dict[str, list[Reply]] = {
    "sum": [
        Reply(
            tool_calls=(
                ScriptedToolCall(
                    "write_todos",
                    {
                        "todos": [
                            {"content": "add the numbers", "status": "in_progress"},
                            {"content": "say the sum", "status": "pending"},
                        ]
                    },
                ),
                ScriptedToolCall("add", {"a": 20, "b": 22}),
            )
        ),
        Reply(
            tool_calls=(
                ScriptedToolCall(
                    "write_todos",
                    {
                        "todos": [
                            {"content": "add the numbers", "status": "completed"},
                            {"content": "say the sum", "status": "completed"},
                        ]
                    },
                ),
            )
        ),
        Reply(content=ANSWER),
    ],
    "slow": [Reply(tool_calls=(ScriptedToolCall("slow", {"seconds": SLOW_S}),))],
    "broken": [Reply(tool_calls=(ScriptedToolCall("add", {"a": 1, "b": 2}),))],
}

TOOLS_SOURCE = '''
import time


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def slow(seconds: float) -> str:
    """Wait, then say so."""
    time.sleep(seconds)
    return f"waited {seconds} s"
'''


def code_blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", text, re.S)


def section(title: str) -> str:
    """A README section, from its heading to the next one of its level."""
    start = README.index(f"\n## {title}\n")
    end = README.find("\n## ", start + 1)
    return README[start : end if end > 0 else None]


def user_env(**extra: str) -> dict[str, str]:
    """A user's shell: no deployment, no endpoint, no key, this tree importable."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("REDIS_URL", "OPENAI_BASE_URL", "OPENAI_API_KEY", "LOOPLINE_PREFIX")
        and not k.startswith("LOOPLINE_ALLOW")
    }
    bin_dir = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join([bin_dir, env.get("PATH", "")])
    env["PYTHONPATH"] = str(REPO_ROOT)
    return {**env, **extra}


def loopline(*args: str, env: dict[str, str], cwd: Path | None = None, timeout: float = 120) -> Any:
    return subprocess.run(
        [sys.executable, "-m", "loopline", *args],
        env=env,
        cwd=cwd or REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def visible(output: str) -> str:
    """What a terminal shows of ``output``: its escape sequences (colours, cursor moves)
    taken out."""
    return ANSI.sub("", output).replace("\r", "")


def one_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr
    return lines[0]


# -- a deployment whose services import a tool package the client does not have ------------


@pytest.fixture(scope="module")
def tools_dir(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A folder holding a tool package with a unique name, and that name."""
    folder = tmp_path_factory.mktemp("usertools")
    package = f"mytools_{uuid.uuid4().hex[:8]}"
    (folder / package).mkdir()
    (folder / package / "__init__.py").write_text(TOOLS_SOURCE)
    return folder, package


@pytest.fixture(scope="module")
def deployment(
    redis_url: str, scripted: ScriptedOpenAIServer, tools_dir: tuple[Path, str]
) -> Iterator[dict[str, str]]:
    """``loopline up`` whose services find the tool package (its folder on their path,
    its name allowed) and call the scripted server; the environment of a client of it,
    which has neither the package nor a model endpoint."""
    folder, package = tools_dir
    prefix = unique_prefix()
    services_env = {
        **os.environ,
        "REDIS_URL": redis_url,
        "LOOPLINE_PREFIX": prefix,
        "OPENAI_BASE_URL": scripted.url,
        "OPENAI_API_KEY": "test",
        "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), str(folder)]),
        "LOOPLINE_ALLOWED_MODULES": f"tests,{package}",
        "LOOPLINE_ALLOW_INLINE_AGENTS": "false",
    }
    with loopline_up(services_env, prefix):
        yield user_env(REDIS_URL=redis_url, LOOPLINE_PREFIX=prefix)


@pytest.fixture(scope="module")
def agent_files(tmp_path_factory: pytest.TempPathFactory, tools_dir: tuple[Path, str]) -> Path:
    """A user's folder with agent files naming the package's tools (no package here)."""
    _, package = tools_dir
    folder = tmp_path_factory.mktemp("client")
    (folder / "adder.yaml").write_text(
        f"model: gpt-4o-mini\ntools: [{package}:add]\nmiddleware:\n  - type: TodoListMiddleware\n"
    )
    (folder / "waiter.yaml").write_text(f"model: gpt-4o-mini\ntools: [{package}:slow]\n")
    (folder / "unlisted.yaml").write_text("model: gpt-4o-mini\ntools: [no_such_pkg.tools:add]\n")
    (folder / "broken.yaml").write_text(f"model: gpt-4o-mini\ntools: [{package}.absent:add]\n")
    return folder


# -- 1. trying it without a key -----------------------------------------------------------


@pytest.mark.fast
def test_every_readme_python_block_is_valid_as_pasted() -> None:
    """No bare ``async for`` at top level: each block compiles as a script."""
    blocks = code_blocks(README, "python")
    assert len(blocks) >= 5
    for block in blocks:
        compile(block, "README.md", "exec")  # a SyntaxError names the block's line


def test_readme_try_it_without_a_key_runs_as_written(tmp_path: Path) -> None:
    """The section's files and commands, from the README's text: the scripted server
    in one terminal, ``loopline run`` and the Python API script in another."""
    text = section("Try it without a key")
    script, agent = code_blocks(text, "json")[0], code_blocks(text, "yaml")[0]
    tool = code_blocks(text, "python")[0]
    server_cmd, client_cmds = code_blocks(text, "bash")
    (tmp_path / "script.json").write_text(script)
    (tmp_path / "mytools.py").write_text(tool)
    (tmp_path / "adder.yaml").write_text(agent)
    (tmp_path / "adder.py").write_text(code_blocks(section("Python API"), "python")[0])
    port = str(free_port())  # the README's port may be taken on a shared machine
    env = user_env()
    server = subprocess.Popen(
        ["bash", "-c", "exec " + server_cmd.strip().replace("8000", port)],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        assert "listening" in server.stdout.readline()
        done = subprocess.run(
            ["bash", "-e", "-c", client_cmds.replace("8000", port)],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        server.terminate()
        server.wait(timeout=10)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert out.count("20 + 22 = 42") >= 2  # `loopline run`, then the script's invoke
    assert "submitted (agent adder)" in done.stderr  # named after its file
    assert "add(a=20, b=22)" in done.stderr
    assert "[{'content': 'add the numbers', 'status': 'completed'}]" in out  # result["todos"]
    assert "StepStarted" in out and "TaskCompleted" in out  # astream_task_events
    assert "{'pending': 0, 'in_progress': 1, 'completed': 0}" in out  # subscribe


def test_the_python_example_without_a_key_ends_in_one_clear_line(tmp_path: Path) -> None:
    (tmp_path / "adder.py").write_text(code_blocks(section("Python API"), "python")[0])
    done = subprocess.run(
        [sys.executable, "adder.py"],
        env=user_env(),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1
    line = one_line(done.stderr)
    assert line.startswith("loopline: error: no model endpoint configured for 'openai:gpt-4o-mini'")
    assert "python -m loopline.testing.scripted" in line and "OPENAI_BASE_URL" in line
    # and the traceback is there for who asks
    traced = subprocess.run(
        [sys.executable, "adder.py"],
        env=user_env(LOOPLINE_TRACEBACK="1"),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "Traceback" in traced.stderr and "NoModelEndpoint" in traced.stderr


def test_help_says_how_to_run_without_a_key() -> None:
    env = user_env()
    run_help = loopline("run", "--help", env=env).stdout
    assert "without an API key" in run_help
    assert "python -m loopline.testing.scripted --script script.json" in run_help
    assert "OPENAI_BASE_URL=http://127.0.0.1:8000/v1" in run_help
    assert "--cancel-on-interrupt" in run_help
    server_help = subprocess.run(
        [sys.executable, "-m", "loopline.testing.scripted", "--help"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    assert '"tool_calls": [{"name": "add"' in server_help
    assert "holds n assistant messages gets turn n" in server_help


# -- 2. the client only names the agent -----------------------------------------------------


def test_run_and_submit_need_neither_an_endpoint_nor_the_tools_on_the_client(
    deployment: dict[str, str], agent_files: Path, tools_dir: tuple[Path, str]
) -> None:
    _, package = tools_dir
    env = deployment
    importable = subprocess.run(
        [sys.executable, "-c", f"import {package}"], env=env, cwd=agent_files, capture_output=True
    )
    assert importable.returncode != 0  # the client cannot import the tool at all
    done = loopline(
        "run", "sum 20 and 22", "--agent", "adder.yaml", "--json", env=env, cwd=agent_files
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["answer"] == ANSWER
    assert [m["content"] for m in out["messages"] if m["type"] == "tool"][1] == "42"

    submitted = loopline(
        "submit", "sum again", "--agent", "adder.yaml", "--json", env=env, cwd=agent_files
    )
    assert submitted.returncode == 0, submitted.stderr
    task_id = json.loads(submitted.stdout)["task_id"]
    log = loopline("watch", "task", task_id, "--json", env=env)
    assert json.loads(log.stdout.splitlines()[-1])["answer"] == ANSWER
    agents = json.loads(loopline("agents", "list", "--json", env=env).stdout)
    assert "adder" in {a["agent"].partition("@")[0] for a in agents}  # named after its file


def test_what_the_services_cannot_run_fails_the_task_with_the_reason(
    deployment: dict[str, str], agent_files: Path, tools_dir: tuple[Path, str]
) -> None:
    """The client registers the file as read; the services that run it say why not:
    the loop, where the task starts, for a module outside their allow-list; the model
    service, which imports the tools for their schemas, for one that does not import."""
    _, package = tools_dir
    for agent, prompt, step, named in (
        ("unlisted.yaml", "broken", 0, ("module 'no_such_pkg.tools' is not allowed",)),
        # a module the services cannot find: the error says where it must be
        ("broken.yaml", "broken", 1, (f"{package}.absent", "PYTHONPATH", "LOOPLINE_ALLOWED")),
    ):
        done = loopline("run", prompt, "--agent", agent, "--plain", env=deployment, cwd=agent_files)
        assert done.returncode == 1
        assert "Traceback" not in done.stderr
        failed = done.stderr.strip().splitlines()[-1]
        assert failed.startswith(f"FAILED at step {step}:"), done.stderr
        assert all(part in failed for part in named), failed


# -- 3. errors -------------------------------------------------------------------------------


def test_a_redis_url_that_is_not_one_is_one_line() -> None:
    done = loopline("status", env=user_env(REDIS_URL="notaurl"))
    assert done.returncode == 2
    line = one_line(done.stderr)
    assert line.startswith("loopline: error: REDIS_URL 'notaurl' is not a Redis URL")


def _interrupt_when_waiting(proc: subprocess.Popen[str], timeout: float = 120) -> str:
    """Wait for the run to ask for the slow tool, then Ctrl-C it; its stderr."""
    assert proc.stderr is not None
    seen = []
    deadline = time.monotonic() + timeout
    for line in proc.stderr:
        seen.append(line)
        if "model asked for slow(" in line:
            break
        assert time.monotonic() < deadline, "".join(seen)
    else:
        raise AssertionError("the run ended before asking for the tool: " + "".join(seen))
    time.sleep(1.0)  # the tool is running
    proc.send_signal(signal.SIGINT)
    rest = proc.stderr.read()
    proc.wait(timeout=60)
    return "".join(seen) + rest


def _task_id(stderr: str) -> str:
    found = re.search(r"task ([0-9a-f]{32}) submitted", stderr)
    assert found, stderr
    return found.group(1)


def _start_run(env: dict[str, str], cwd: Path, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "loopline", "run", "slow one", *extra],
        env=env,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_ctrl_c_against_a_deployment_says_the_task_runs_on(
    deployment: dict[str, str], agent_files: Path
) -> None:
    proc = _start_run(deployment, agent_files, "--agent", "waiter.yaml", "--plain")
    stderr = _interrupt_when_waiting(proc)
    task_id = _task_id(stderr)
    assert proc.returncode == 130
    assert "Traceback" not in stderr
    last = stderr.strip().splitlines()[-1]
    assert f"task {task_id} runs on in the deployment" in last
    assert f"`loopline cancel {task_id}`" in last
    so_far = loopline("watch", "task", task_id, "--no-follow", "--json", env=deployment)
    types = [json.loads(line)["type"] for line in so_far.stdout.splitlines()]
    assert "ModelResponded" in types and not {"TaskCompleted", "TaskFailed"} & set(types)
    cancelled = loopline("cancel", task_id, "--json", env=deployment)
    assert cancelled.returncode == 0, cancelled.stderr
    assert json.loads(cancelled.stdout)["type"] == "TaskFailed"


def test_ctrl_c_with_cancel_on_interrupt_cancels_the_task(
    deployment: dict[str, str], agent_files: Path
) -> None:
    proc = _start_run(
        deployment, agent_files, "--agent", "waiter.yaml", "--plain", "--cancel-on-interrupt"
    )
    stderr = _interrupt_when_waiting(proc)
    task_id = _task_id(stderr)
    assert proc.returncode == 130 and "Traceback" not in stderr
    assert stderr.strip().splitlines()[-1] == f"interrupted: cancelled task {task_id}"
    log = loopline("watch", "task", task_id, "--json", env=deployment, timeout=60)
    last = json.loads(log.stdout.splitlines()[-1])
    assert last["type"] == "TaskFailed" and "cancelled" in last["reason"]


def test_ctrl_c_embedded_exits_cleanly(
    scripted: ScriptedOpenAIServer, tools_dir: tuple[Path, str]
) -> None:
    """No REDIS_URL: the task runs in this process, and goes with it, quietly. The
    tool package is in the current folder, as a user's would be."""
    folder, package = tools_dir
    (folder / "waiter.yaml").write_text(f"model: gpt-4o-mini\ntools: [{package}:slow]\n")
    env = user_env(OPENAI_BASE_URL=scripted.url)
    proc = _start_run(env, folder, "--agent", "waiter.yaml", "--plain")
    stderr = _interrupt_when_waiting(proc)
    assert proc.returncode == 130
    assert "interrupted: the task stopped with this process (embedded)" in stderr
    for noise in ("Traceback", "RuntimeError", "cannot schedule new futures", "destroyed"):
        assert noise not in stderr, stderr


def test_a_langchain_fake_chat_model_runs_embedded() -> None:
    script = textwrap.dedent(
        """
        from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
        from langchain_core.messages import AIMessage
        from loopline import create_agent

        def add(a: int, b: int) -> int:
            '''Add two integers.'''
            return a + b

        call = {"name": "add", "args": {"a": 20, "b": 22}, "id": "c1"}
        replies = iter([AIMessage(content="", tool_calls=[call]), AIMessage(content="42")])
        agent = create_agent(GenericFakeChatModel(messages=replies), tools=[add])
        result = agent.invoke({"messages": "what is 20 + 22?"})
        print([(m.type, m.content) for m in result["messages"]])
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], env=user_env(), capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == str(
        [("human", "what is 20 + 22?"), ("ai", ""), ("tool", "42"), ("ai", "42")]
    )


# -- 4. output ------------------------------------------------------------------------------


@pytest.mark.fast
def test_progress_lines_shorten_arguments_by_structure() -> None:
    todos = {
        "todos": [
            {"content": "add the numbers", "status": "in_progress"},
            {"content": "check the sum", "status": "pending"},
            {"content": "say it", "status": "completed"},
        ]
    }
    reply = ModelResponded(
        task_id="t",
        step=1,
        agent_id="a",
        message=AIMessage(
            content="",
            tool_calls=[
                ToolCall(id="1", name="write_todos", args=todos),
                ToolCall(id="2", name="search", args={"query": "x" * 200, "k": 3}),
            ],
        ),
    )
    line = describe(reply)
    assert line == (
        "step 1: model asked for write_todos(3 todos: 1 done, 1 in progress, 1 pending), "
        f'search(query="{"x" * 37}…", k=3)'
    )
    assert call_summary(
        "f", {"rows": list(range(100)), "opts": {str(i): i for i in range(30)}}
    ) == ("f(rows=[100 items], opts={30 keys})")
    many = {f"arg{i}": "v" * 30 for i in range(10)}
    shown = call_summary("f", many)
    assert shown.endswith(", +8 more)") and shown.count('"') == 4  # whole values only


def test_watch_says_no_events_on_an_empty_stream(deployment: dict[str, str]) -> None:
    env = {**deployment, "LOOPLINE_PREFIX": unique_prefix()}  # nothing ever ran here
    for what in ("edits", "todos"):
        done = loopline("watch", what, "--from-start", "--no-follow", env=env)
        assert done.returncode == 0
        assert done.stdout == ""
        assert one_line(done.stderr) == f"no events in the {what} stream"


def test_the_default_script_asks_the_demo_tool_only_for_topics_it_has_notes_for() -> None:
    """What compose's scripted server replays (no ``--script``), over HTTP."""
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "loopline.testing.scripted", "--port", str(port)],
        env=user_env(),
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None and "listening" in server.stdout.readline()
        messages: list[dict[str, Any]] = [{"role": "user", "content": "research"}]
        asked: list[str] = []
        for _ in range(10):
            body = json.dumps({"model": "m", "messages": messages}).encode()
            request = urllib.request.Request(
                f"http://127.0.0.1:{port}/v1/chat/completions",
                data=body,
                headers={"Content-Type": "application/json"},
            )
            with urllib.request.urlopen(request, timeout=30) as response:
                message = json.load(response)["choices"][0]["message"]
            calls = message.get("tool_calls") or []
            if not calls:
                break
            messages.append(message)
            for call in calls:
                if call["function"]["name"] == "lookup":
                    asked.append(json.loads(call["function"]["arguments"])["query"])
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": "ok"})
    finally:
        server.terminate()
        server.wait(timeout=10)
    assert len(asked) >= 3
    assert all("No notes" not in lookup(query) for query in asked), asked


# -- 5. the live view, tables, --json, doctor --------------------------------------------------


def _streamed_prefixes(output: str, text: str) -> set[int]:
    """How much of ``text`` each frame drawn showed: the lengths of the prefixes of
    ``text`` found in the output, each followed by something else."""
    found = set()
    for match in re.finditer(re.escape(text[:8]), output):
        n = 8
        while n < len(text) and output[match.start() + n : match.start() + n + 1] == text[n]:
            n += 1
        found.add(n)
    return found


def test_run_is_a_live_view_in_a_terminal_and_plain_lines_in_a_pipe(
    deployment: dict[str, str], agent_files: Path, scripted: ScriptedOpenAIServer
) -> None:
    scripted.chunk_delay = 0.08  # the answer arrives piece by piece
    try:
        shown = run_in_terminal(
            [sys.executable, "-m", "loopline", "run", "sum 20 and 22", "--agent", "adder.yaml"],
            env=deployment,
            cwd=agent_files,
        )
    finally:
        scripted.chunk_delay = 0.0
    assert shown.returncode == 0, shown.output
    assert "\x1b[" in shown.output  # drawn, not printed
    out = visible(shown.output)
    assert "write_todos(2 todos: 1 in progress, 1 pending), add(a=20, b=22)" in out
    assert "✓ add → 42" in out
    assert "☑ add the numbers" in out and "☑ say the sum" in out  # the checklist, at the end
    assert "◐ add the numbers" in out and "☐ say the sum" in out  # and as it was
    assert "done after 3 step(s)" in out
    partial = _streamed_prefixes(out, ANSWER)
    assert len(ANSWER) in partial and min(partial) < len(ANSWER) - 8, partial  # token by token

    piped = loopline(
        "run", "sum 20 and 22", "--agent", "adder.yaml", env=deployment, cwd=agent_files
    )
    assert piped.returncode == 0, piped.stderr
    assert "\x1b[" not in piped.stdout + piped.stderr
    assert piped.stdout.strip() == ANSWER
    lines = piped.stderr.splitlines()
    assert re.fullmatch(r"task [0-9a-f]{32} submitted \(agent adder\)", lines[0])
    assert "step 1: todos [~] add the numbers  [ ] say the sum" in lines


def test_watch_task_is_a_live_view_in_a_terminal(
    deployment: dict[str, str], agent_files: Path
) -> None:
    submitted = loopline(
        "submit", "sum 1", "--agent", "adder.yaml", env=deployment, cwd=agent_files
    )
    task_id = submitted.stdout.strip()
    shown = run_in_terminal(
        [sys.executable, "-m", "loopline", "watch", "task", task_id], env=deployment
    )
    assert shown.returncode == 0, shown.output
    out = visible(shown.output)
    assert f"task {task_id}  agent adder" in out
    assert "☑ say the sum" in out and ANSWER in out
    plain = loopline("watch", "task", task_id, "--no-follow", env=deployment)
    assert "\x1b[" not in plain.stdout and plain.stdout.splitlines()[-1] == "done after 3 step(s)"


def test_status_and_stats_are_tables(deployment: dict[str, str], agent_files: Path) -> None:
    assert (
        loopline("run", "sum", "--agent", "adder.yaml", env=deployment, cwd=agent_files).returncode
        == 0
    )
    stats = loopline("stats", env=deployment)
    header, *rows = stats.stdout.split("\n\n")[0].splitlines()[1:]
    assert header.split() == [
        "AGENT", "TASKS", "DONE", "FAILED", "WAITING", "STEPS", "MODEL", "CALLS", "TOKENS",
        "IN", "TOKENS", "OUT", "TOOL", "CALLS", "TOOL", "ERRORS",
    ]  # fmt: skip
    adder = next(r.split() for r in rows if r.startswith("adder "))
    as_json = json.loads(loopline("stats", "--json", env=deployment).stdout)["adder"]
    assert adder[1:4] == [str(as_json["tasks"]), str(as_json["completed"]), str(as_json["failed"])]
    drawn = run_in_terminal([sys.executable, "-m", "loopline", "stats"], env=deployment)
    assert "─" * 10 in visible(drawn.output) and "TOOL ERRORS" in drawn.output  # rich's
    status = run_in_terminal([sys.executable, "-m", "loopline", "status"], env=deployment)
    assert status.returncode == 0, status.output
    shown = visible(status.output)
    assert "─" * 10 in shown and "CONSUMERS" in shown and "PENDING" in shown
    report = json.loads(loopline("status", "--json", "--no-tasks", env=deployment).stdout)
    assert report["services"]["model"]["live"] >= 1


def test_doctor_says_what_to_fix(
    deployment: dict[str, str], agent_files: Path, tools_dir: tuple[Path, str],
    scripted: ScriptedOpenAIServer,
) -> None:  # fmt: skip
    loopline("run", "sum", "--agent", "adder.yaml", env=deployment, cwd=agent_files)
    folder, package = tools_dir
    # where the services run: their path, allow-list and endpoint
    as_services = {
        **deployment,
        "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), str(folder)]),
        "LOOPLINE_ALLOWED_MODULES": f"tests,{package}",
        "OPENAI_BASE_URL": scripted.url,
    }
    done = loopline("doctor", "--json", env=as_services)
    checks = {c["name"]: c for c in json.loads(done.stdout)["checks"]}
    assert checks["redis version"]["level"] == "ok"
    assert checks["memory policy"]["level"] == "ok"  # the session's Redis: noeviction
    assert checks["persistence"]["level"] in ("ok", "warn")
    assert all(checks[f"service {s}"]["level"] == "ok" for s in ("loop", "model", "tools"))
    adder = next(c for name, c in checks.items() if name.startswith("agent adder@"))
    assert adder["level"] == "ok" and f"{package}:add" in adder["detail"]
    assert checks["model gpt-4o-mini"]["level"] == "ok"
    assert "answers" in checks["model gpt-4o-mini"]["detail"]

    # where the tools are missing and the endpoint is down: failed, with the fix
    dead = f"http://127.0.0.1:{free_port()}/v1"
    done = loopline("doctor", env={**deployment, "OPENAI_BASE_URL": dead})
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    text = done.stdout
    assert re.search(r"agent adder@\d+\s+FAIL .*" + package, text), text
    assert "list it in LOOPLINE_ALLOWED_MODULES" in text
    assert re.search(r"model gpt-4o-mini\s+FAIL .*does not answer", text), text

    # a deployment with no service running: each one named, with the command
    empty = loopline("doctor", "--json", env={**deployment, "LOOPLINE_PREFIX": unique_prefix()})
    assert empty.returncode == 1
    report = json.loads(empty.stdout)
    fixes = {c["name"]: c["fix"] for c in report["checks"] if c["level"] == "fail"}
    assert fixes["service tools"] == "start it: `loopline serve tools` (or `loopline up` for all)"


def test_json_where_a_script_reads(deployment: dict[str, str], tmp_path: Path) -> None:
    """Registering, removing, and the dead letters, as a script reads them."""
    (tmp_path / "scratch.yaml").write_text("model: gpt-4o-mini\n")
    deployed = loopline("deploy", "scratch.yaml", "--json", env=deployment, cwd=tmp_path)
    assert deployed.returncode == 0, deployed.stderr
    ref = json.loads(deployed.stdout)["agent"]
    assert ref.startswith("scratch@")  # named after its file
    removed = loopline("agents", "rm", "scratch", "--json", env=deployment)
    assert json.loads(removed.stdout) == {"removed": [ref]}
    letters = loopline("dlq", "list", "--json", env=deployment)
    assert letters.returncode == 0
    assert all("error" in json.loads(line) for line in letters.stdout.splitlines())


def test_the_demo_in_a_terminal_is_the_live_view() -> None:
    """The quick start's second word, as a newcomer sees it."""
    from loopline.demo import DEMO_TURNS

    answer = DEMO_TURNS[-1].content
    shown = run_in_terminal(  # wide enough that the answer is one line
        [sys.executable, "-m", "loopline", "demo"], env=user_env(), columns=300
    )
    assert shown.returncode == 0, shown.output
    out = visible(shown.output)
    assert "the model is SCRIPTED" in out
    assert 'lookup(query="consumer groups")' in out and "✂ context edit: cleared" in out
    assert "☑ Research consumer groups and recovery" in out and "☑ Write the summary" in out
    partial = _streamed_prefixes(out, answer)
    assert len(answer) in partial and min(partial) < len(answer) - 8, partial
