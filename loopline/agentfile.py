"""Agent files: YAML or JSON with the fields of ``create_agent``.

model: gpt-4o-mini
tools: [mypkg.tools:search]
system_prompt: You are helpful.
middleware:
  - type: TodoListMiddleware
  - type: ContextEditingMiddleware
    edits: [{type: ClearToolUsesEdit, trigger: 2000, keep: 1}]
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from contracts.agent import AGENT_NAME, AgentSpec
from services.errors import ConfigurationError
from services.spec import toolbox
from services.spec.middleware import from_spec
from services.spec.validation import callable_refs, check_agent, check_middleware

_FIELDS = {
    "model",
    "tools",
    "system_prompt",
    "middleware",
    "name",
    "max_steps",
    "tool_timeout_s",
    "tool_timeouts",
    "response_format",
}


def load_agent_file(path: str | Path, *, import_code: bool = True) -> tuple[AgentSpec, int | None]:
    """The spec and the file's ``max_steps``; every problem is one ConfigurationError.
    An agent without a ``name`` field is named after its file (``adder.yaml``: adder).
    ``import_code=False`` reads the file as data only (see ``agent_from_dict``)."""
    path = Path(path)
    data = read_agent_file(path)
    if isinstance(data, dict) and "name" not in data:
        data = {**data, "name": name_of_file(path)}
    return agent_from_dict(data, source=str(path), import_code=import_code)


def read_agent_file(path: Path) -> Any:
    """The file's YAML or JSON, parsed; unreadable or malformed is one ConfigurationError."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigurationError(f"cannot read agent file {path}: {exc.strerror}") from exc
    try:
        return json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except json.JSONDecodeError as exc:
        raise ConfigurationError(f"agent file {path} is not valid JSON: {exc}") from exc
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or "syntax error"
        raise ConfigurationError(
            f"agent file {path} is not valid YAML/JSON: {problem}{where}"
        ) from exc


def name_of_file(path: Path) -> str:
    """An agent's name from its file's name: what a registration may be called (letters,
    digits, ``_``, ``.``, ``-``), else the default ``agent``."""
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", path.stem).strip("-._")[:128]
    return name if AGENT_NAME.match(name) else "agent"


def agent_from_dict(
    data: Any, *, source: str = "agent", import_code: bool = True
) -> tuple[AgentSpec, int | None]:
    """The spec of an agent file's fields and its ``max_steps``. With ``import_code``
    (where this process runs the agent: the embedded default, ``loopline deploy``) its
    tools are imported for their schemas and its middleware checked and built here;
    without (a client of a deployment) it is read as data only, and the services that
    run it import and check what they need when its task starts."""
    if not isinstance(data, dict):
        raise ConfigurationError(f"{source}: expected a mapping with a 'model' field")
    unknown = set(data) - _FIELDS
    if unknown:
        raise ConfigurationError(
            f"{source}: unknown field(s) {', '.join(sorted(unknown))}; "
            f"known: {', '.join(sorted(_FIELDS))}"
        )
    if "model" not in data:
        raise ConfigurationError(f"{source}: the 'model' field is required")
    tools = list(data.get("tools") or [])
    fields = {k: v for k, v in data.items() if k != "max_steps"}
    try:
        if not import_code:
            spec = AgentSpec.model_validate({**fields, "tools": [str(t) for t in tools]})
            check_builtin_middleware(spec)
        else:
            schemas = [toolbox.tool_schema(toolbox.resolve(str(ref))) for ref in tools]
            spec = AgentSpec.model_validate({**fields, "tools": tools, "tool_schemas": schemas})
            check_agent(spec)  # parameters against constructors, types included
            for mw in spec.middleware:
                from_spec(mw)  # what only building finds (LangChain's own checks) fails here
    except (ValidationError, ValueError, TypeError) as exc:
        raise ConfigurationError(f"{source}: {exc}".splitlines()[0]) from exc
    max_steps = data.get("max_steps")
    return spec, int(max_steps) if max_steps is not None else None


def check_builtin_middleware(spec: AgentSpec) -> None:
    """What a client can check without the user's code: the parameters of loopline's and
    LangChain's built-in middleware (their classes are everywhere loopline is). Middleware
    named by import path, and parameters naming functions, are the services' to check."""
    for mw in spec.middleware:
        if ":" not in mw.type and not callable_refs(mw.params):
            check_middleware(mw)
