"""Checking an agent spec before any task of it runs.

Each middleware's parameters are checked against its constructor (names, required ones,
types: ``services.spec.signature``), the edits inside ``ContextEditingMiddleware`` against
theirs, and what must travel or be stored as JSON (the parameters, the state fields a
middleware adds: ``services.spec.jsonable``) is checked to be JSON. A problem is one
``InvalidSpec`` line naming the middleware, the parameter, what was given and what is
expected, raised where the spec is made (``create_agent``, an agent file) and where a task
is submitted (the loop refuses the ``TaskSubmitted``), instead of a stage failing on it
later.

Checking builds nothing: classes are imported and read, never instantiated, so it is
cheap and has no side effects; a spec that passed once is not checked again.
"""

from __future__ import annotations

import inspect
import json
from typing import Any

from contracts.agent import AgentSpec, MiddlewareSpec, ResponseFormatSpec
from services.errors import ConfigurationError
from services.middleware.context_editing import ClearToolUsesEdit
from services.spec import (
    endpoints,
    imports,
    jsonable,
    local,
    schemas,
    signature,
    structured,
    toolbox,
)
from services.spec.channels import channels_of
from services.spec.middleware import BUILTIN, NATIVE, from_spec, refused_reason
from services.spec.params import CALLABLE_KEY


class InvalidSpec(ConfigurationError, ValueError):
    """A spec that cannot run; ``str()`` is one line."""


EDIT_TYPES: dict[str, type] = {"ClearToolUsesEdit": ClearToolUsesEdit}
"""The edits ``ContextEditingMiddleware`` takes, by the ``type`` an edit's spec names."""

DEFAULT_EDIT = "ClearToolUsesEdit"

ABSORBED_KWARGS: dict[str, dict[str, Any]] = {
    "SummarizationMiddleware": {"max_tokens_before_summary": int | None, "messages_to_keep": int},
}
"""Built-ins whose ``**kwargs`` take only these (deprecated) names, and drop any other
silently: named here so a misspelt parameter is refused instead of ignored."""

CHECKED_MAX = 4096
"""Specs remembered as checked, so a busy loop checks each distinct middleware once."""

_checked: set[str] = set()
_ENCODER = json.JSONEncoder(sort_keys=True)
"""Made once: ``json.dumps(..., sort_keys=True)`` builds an encoder on every call."""


def check_agent(spec: AgentSpec) -> None:
    """Raise ``InvalidSpec`` for the first part of the spec that cannot run: a model that
    names its own endpoint, a tool outside the import allow-list, a middleware whose
    parameters do not fit (or that names code outside the allow-list). Run where a task
    starts, never per step."""
    problem = endpoints.endpoint_problem(spec.model)
    if problem:
        raise InvalidSpec(problem)
    for ref in spec.tools:
        _check_allowed(ref, "tool path")
    for middleware in spec.middleware:
        check_middleware(middleware)
    if spec.response_format is not None:
        check_response_format(spec.response_format)
    check_schemas(spec)


def check_schemas(spec: AgentSpec) -> None:
    """``context_schema`` and ``state_schema`` must resolve (inside the allow-list) to
    classes, and the run's context must fit its schema."""
    for what in ("context_schema", "state_schema"):
        ref = getattr(spec, what)
        if ref is None:
            continue
        try:
            found = schemas.resolve(ref, what)
        except ConfigurationError as exc:
            raise InvalidSpec(str(exc)) from exc
        if not isinstance(found, type):
            raise InvalidSpec(f"{what} {ref!r} is not a class")
        if what == "state_schema":
            try:  # its keys' reducers, as LangGraph reads them where it builds the graph
                channels_of(found, ())
            except Exception as exc:  # a bad reducer signature, an unresolvable hint
                name = getattr(found, "__qualname__", ref)
                raise InvalidSpec(f"state_schema {name}: {exc}") from exc
    try:
        schemas.run_context(spec)
    except (TypeError, ValueError) as exc:
        shown = str(exc).splitlines()[0]
        raise InvalidSpec(f"context does not fit {spec.context_schema}: {shown}") from exc


def check_response_format(rf: ResponseFormatSpec) -> None:
    """The schema must resolve (inside the allow-list) and be one LangChain takes."""
    try:
        structured.strategy_of(rf)
    except (ConfigurationError, ValueError, TypeError) as exc:
        raise InvalidSpec(str(exc).splitlines()[0]) from exc


def check_deployable(spec: AgentSpec) -> None:
    """What a registration checks beyond ``check_agent``: the spec must run in other
    processes (nothing ``local:``), its model must be one this deployment may run, and
    every tool and middleware must import and build (inside the allow-list), and no
    middleware may be a built-in that cannot run deployed (named with the reason)."""
    for middleware in spec.middleware:
        refused = refused_reason(middleware.type)
        if refused is not None:
            raise InvalidSpec(refused)
    check_agent(spec)
    problem = endpoints.model_problem(spec.model)
    if problem:
        raise InvalidSpec(problem)
    local_refs = [r for r in spec.tools if local.is_local(r)]
    rf = spec.response_format
    if rf is not None and not isinstance(rf.schema_, dict):
        named = [rf.schema_] if isinstance(rf.schema_, str) else rf.schema_
        local_refs += [r for r in named if local.is_local(r)]
    if rf is not None and rf.ref is not None:
        local_refs.append(rf.ref)
    local_refs += [m.type for m in spec.middleware if local.is_local(m.type)]
    local_refs += [r for r in (spec.context_schema, spec.state_schema) if r and local.is_local(r)]
    local_refs += [r for m in spec.middleware for r in callable_refs(m.params) if local.is_local(r)]
    if spec.model.ref or local_refs:
        shown = spec.model.ref or local_refs[0]
        raise InvalidSpec(
            f"{shown} is an in-process object: a deployed agent names its model, tools "
            "and middleware by name or import path (package.module:name)"
        )
    for ref in spec.tools:
        try:
            toolbox.resolve(ref)
        except ConfigurationError as exc:
            raise InvalidSpec(str(exc)) from exc
    for middleware in spec.middleware:
        try:
            from_spec(middleware)  # what only building finds (LangChain's own checks)
        except (ConfigurationError, ValueError, TypeError) as exc:
            raise InvalidSpec(f"{_shown_name(middleware.type)}: {exc}") from exc


def callable_refs(value: Any) -> list[str]:
    """The ``{"callable": ref}`` function references inside middleware parameters."""
    if isinstance(value, dict):
        if set(value) == {CALLABLE_KEY} and isinstance(value[CALLABLE_KEY], str):
            return [value[CALLABLE_KEY]]
        return [r for v in value.values() for r in callable_refs(v)]
    if isinstance(value, list | tuple):
        return [r for v in value for r in callable_refs(v)]
    return []


def _check_allowed(ref: str, what: str) -> None:
    if local.is_local(ref):
        return  # in-process objects are this process's own
    try:
        imports.check_allowed(ref)
    except imports.ModuleNotAllowed as exc:
        raise InvalidSpec(f"{what} {ref!r}: {exc}") from exc


def check_middleware(spec: MiddlewareSpec) -> None:
    try:
        key = f"{spec.type}\0{_ENCODER.encode(spec.params)}"
    except (TypeError, ValueError) as exc:
        _refuse_unstorable(spec)
        raise InvalidSpec(f"{_shown_name(spec.type)}: parameters are not JSON: {exc}") from exc
    # The allow-list first, outside the cache: it is the operator's to change.
    if ":" in spec.type:  # a bare name is one of the built-ins
        _check_allowed(spec.type, "middleware")
    for ref in callable_refs(spec.params):
        _check_allowed(ref, f"{_shown_name(spec.type)}: function")
    if key in _checked:
        return
    _check(spec)
    if len(_checked) >= CHECKED_MAX:
        _checked.clear()
    _checked.add(key)


def _refuse_unstorable(spec: MiddlewareSpec) -> None:
    unstorable = jsonable.first_unstorable(spec.params, "")
    if unstorable is not None:
        path, value = unstorable
        raise InvalidSpec(
            f"{_shown_name(spec.type)}: parameter {path.lstrip('.')} is not "
            f"JSON-serializable ({type(value).__name__}): a spec travels as JSON"
        )


def _shown_name(type_name: str) -> str:
    """How errors name a middleware: by its class (or instance) name, as the user wrote it
    in code (``StopAfter`` for ``mypkg.hooks:StopAfter``, the class of a ``local:`` one)."""
    if local.is_local(type_name):
        return type_name.removeprefix(local.LOCAL_PREFIX).split(":")[0]
    return type_name.rpartition(":")[2].rpartition(".")[2]


def _check(spec: MiddlewareSpec) -> None:
    name = _shown_name(spec.type)
    target = _target(spec)
    if inspect.isclass(target):
        found = _parameter_problems(spec, target)
    elif target is not None and spec.params:
        found = [f"names an instance, which takes no parameters (given: {', '.join(spec.params)})"]
    else:
        found = []
    if found:
        raise InvalidSpec(f"{name}: " + "; ".join(found))
    if spec.type not in NATIVE and target is not None:
        _check_state(name, target)


def _target(spec: MiddlewareSpec) -> Any:
    """The class (or instance) a spec names; None for an in-process object of another
    process, which this process cannot check (building it there fails on its own)."""
    if local.is_local(spec.type):
        return local.lookup(spec.type)
    if ":" not in spec.type:
        if spec.type not in BUILTIN:
            raise InvalidSpec(
                f"unknown middleware type {spec.type!r}; supported: "
                f"{', '.join(sorted(BUILTIN))} or an import path package.module:Name"
            )
        return BUILTIN[spec.type]
    try:
        return imports.resolve(spec.type)
    except imports.NameNotFound as exc:
        raise InvalidSpec(f"middleware {spec.type!r}: no {exc.attr} in {exc.module_name}") from exc
    except Exception as exc:  # not importable, or a module that fails as it imports
        raise InvalidSpec(f"middleware {spec.type!r}: {exc}") from exc


def _parameter_problems(spec: MiddlewareSpec, cls: type) -> list[str]:
    builtin = ":" not in spec.type
    sig = signature.constructor_signature(cls, var_positional_by_name=builtin)
    absorbed = ABSORBED_KWARGS.get(spec.type) if builtin else None
    if absorbed is not None:
        for extra, annotation in absorbed.items():
            sig.params.setdefault(extra, signature.Param(extra, annotation, required=False))
        sig.open = False
    given = dict(spec.params)
    if spec.type == "ContextEditingMiddleware":
        return signature.problems(sig, {k: v for k, v in given.items() if k != "edits"}) + (
            _edit_problems(given.get("edits"))
        )
    return signature.problems(sig, given)


def _edit_problems(edits: Any) -> list[str]:
    """Each edit of a ``ContextEditingMiddleware`` against its own constructor; the
    problems name the edit (``ClearToolUsesEdit: trigger must be int, ...``)."""
    if edits is None:
        return []
    if not isinstance(edits, list):
        return [f"edits must be a list of edits, got {signature.describe_value(edits)}"]
    found: list[str] = []
    for index, edit in enumerate(edits):
        if not isinstance(edit, dict):
            found.append(f"edits[{index}] must be an edit, got {signature.describe_value(edit)}")
            continue
        kind = edit.get("type", DEFAULT_EDIT)
        cls = EDIT_TYPES.get(kind) if isinstance(kind, str) else None
        if cls is None:
            found.append(f"unknown edit type {kind!r}; supported: {', '.join(EDIT_TYPES)}")
            continue
        params = {k: v for k, v in edit.items() if k != "type"}
        problems = signature.problems(signature.constructor_signature(cls), params)
        found.extend(f"{kind}: {problem}" for problem in problems)
    return found


def _check_state(name: str, target: Any) -> None:
    unstorable = jsonable.unstorable_state_field(getattr(target, "state_schema", None))
    if unstorable is not None:
        field, type_name = unstorable
        raise InvalidSpec(
            f"{name}: state field {field} cannot be stored ({type_name}): a task's state "
            "is stored between its stages as LangGraph's checkpoint serializer carries it"
        )
