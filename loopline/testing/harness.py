"""Pieces that tests and benchmarks combine: a unique key prefix per run, the twin
scripted servers of the parity tests, and every service on a scripted model."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from loopline.testing.processes import ServiceProcesses
from loopline.testing.scripted import ScriptedOpenAIServer, responder_by_prompt


def unique_prefix() -> str:
    """A stream and key prefix of its own: runs on one Redis never see each other."""
    return f"t{uuid.uuid4().hex[:10]}"


@contextmanager
def twin_servers(
    scripts: dict[str, Any],
) -> Iterator[tuple[ScriptedOpenAIServer, ScriptedOpenAIServer]]:
    """Two scripted servers answering by the same scripts (picked by the prompt): the
    first for LangChain's run, the second for loopline's services, so each side's
    requests are recorded apart and can be compared. The scripts are shared, not copied:
    a test may add its own before it runs."""
    with (
        ScriptedOpenAIServer(responder=responder_by_prompt(scripts)) as lc_server,
        ScriptedOpenAIServer(responder=responder_by_prompt(scripts)) as ll_server,
    ):
        yield lc_server, ll_server


@contextmanager
def services_on(
    redis_url: str, server: ScriptedOpenAIServer, **env: str
) -> Iterator[ServiceProcesses]:
    """Every service as its own process under a fresh prefix, the model service calling
    ``server``; ``env``: more environment for the services."""
    full = {"OPENAI_BASE_URL": server.url, "OPENAI_API_KEY": "test", **env}
    with ServiceProcesses(redis_url, unique_prefix(), env=full) as procs:
        yield procs
