"""LangChain's built-in middleware, runnable on the bus.

Each class here IS LangChain's class (a subclass that also remembers its constructor
arguments), so names, parameters, defaults and semantics are LangChain's by construction;
the remembered arguments let the consumer that owns the hook rebuild the middleware in
another process. Existing agent code moves over by changing one import.
"""

from __future__ import annotations

import inspect
import re
from typing import Any

from langchain.agents import middleware as lc


class Remembers:
    """Mixin: keeps the keyword arguments the middleware was built with, which
    ``services.spec.middleware`` turns into the spec's params."""

    _loopline_params: dict[str, Any]


def builtin_name(cls: type) -> str:
    """The LangChain class name a built-in travels under."""
    for klass in cls.__mro__:
        if klass.__module__.startswith("langchain.agents.middleware"):
            return klass.__name__
    return cls.__name__


def _remembering(base: type, *, positional: tuple[str, ...] = ()) -> type:
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        params = dict(kwargs)
        if positional and args:
            params[positional[0]] = args[0]
            if len(positional) > 1:
                params[positional[1]] = list(args[1:])
        self._loopline_params = params
        base.__init__(self, *args, **kwargs)  # type: ignore[misc]

    return type(base.__name__, (Remembers, base), {"__init__": __init__, "__doc__": base.__doc__})


ModelCallLimitMiddleware: Any = _remembering(lc.ModelCallLimitMiddleware)
ToolCallLimitMiddleware: Any = _remembering(lc.ToolCallLimitMiddleware)
ModelRetryMiddleware: Any = _remembering(lc.ModelRetryMiddleware)
ToolRetryMiddleware: Any = _remembering(lc.ToolRetryMiddleware)


class _PIIWithToolArgs(lc.PIIMiddleware):
    """LangChain's PIIMiddleware, plus the arguments of the model's tool calls: LangChain
    checks the reply's text but lets PII through in the arguments a tool receives."""

    def __init__(self, pii_type: Any, *, apply_to_tool_calls: bool = True, **kwargs: Any):
        super().__init__(pii_type, **kwargs)
        self.apply_to_tool_calls = apply_to_tool_calls

    def _redact(self, value: Any) -> tuple[Any, bool]:
        if isinstance(value, str):
            new, changed = self._process_content(value)
            return new, changed
        if isinstance(value, dict):
            pairs = {k: self._redact(v) for k, v in value.items()}
            return {k: v for k, (v, _) in pairs.items()}, any(c for _, c in pairs.values())
        if isinstance(value, list):
            items = [self._redact(v) for v in value]
            return [v for v, _ in items], any(c for _, c in items)
        return value, False

    def after_model(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        from langchain_core.messages import AIMessage

        update = super().after_model(state, runtime)
        if not (self.apply_to_tool_calls and self.apply_to_output):
            return update  # tool calls are the model's output: checked only with it
        messages = list((update or {}).get("messages") or state["messages"])
        index = next(
            (i for i in range(len(messages) - 1, -1, -1) if isinstance(messages[i], AIMessage)),
            None,
        )
        if index is None or not messages[index].tool_calls:
            return update
        calls, changed = [], False
        for call in messages[index].tool_calls:
            args, redacted = self._redact(call["args"])
            calls.append({**call, "args": args})
            changed = changed or redacted
        if not changed:
            return update
        messages[index] = messages[index].model_copy(update={"tool_calls": calls})
        return {"messages": messages}

    async def aafter_model(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        return self.after_model(state, runtime)


_PIIWithToolArgs.__name__ = _PIIWithToolArgs.__qualname__ = "PIIMiddleware"
PIIMiddleware: Any = _remembering(_PIIWithToolArgs, positional=("pii_type",))
LLMToolSelectorMiddleware: Any = _remembering(lc.LLMToolSelectorMiddleware)
HumanInTheLoopMiddleware: Any = _remembering(
    lc.HumanInTheLoopMiddleware, positional=("interrupt_on",)
)
ModelFallbackMiddleware: Any = _remembering(
    lc.ModelFallbackMiddleware, positional=("first_model", "additional_models")
)


def safe_cutoff_point(messages: list[Any], cutoff_index: int) -> int:
    """Move a summarization cut so no kept tool result loses its tool call.

    LangChain only looks at the message at the cut: when a tool batch only partly overlaps
    the cut (results of one AI message on both sides, or a result kept after other
    messages while its AI message is summarized), it leaves orphan tool results, which
    providers reject. Here every kept ``ToolMessage`` whose AI message lies before the cut
    pulls the cut back to that AI message, until none does (a fixed point; moving back only
    keeps more). Results with no AI message at all constrain nothing.
    """
    from langchain_core.messages import AIMessage, ToolMessage

    owner: dict[str, int] = {}
    for index, message in enumerate(messages):
        if isinstance(message, AIMessage):
            for call in message.tool_calls:
                call_id = call.get("id")
                if call_id:
                    owner[call_id] = index
    cut = min(max(cutoff_index, 0), len(messages))
    while True:
        earliest = min(
            (
                owner[m.tool_call_id]
                for m in messages[cut:]
                if isinstance(m, ToolMessage) and owner.get(m.tool_call_id, cut) < cut
            ),
            default=cut,
        )
        if earliest >= cut:
            return cut
        cut = earliest


class _SafeSummarization(lc.SummarizationMiddleware):
    @staticmethod
    def _find_safe_cutoff_point(messages: list[Any], cutoff_index: int) -> int:
        return safe_cutoff_point(messages, cutoff_index)


_SafeSummarization.__name__ = "SummarizationMiddleware"
_SafeSummarization.__qualname__ = "SummarizationMiddleware"
SummarizationMiddleware: Any = _remembering(_SafeSummarization)

BY_NAME: dict[str, Any] = {
    cls.__name__: cls
    for cls in (
        ModelCallLimitMiddleware,
        ToolCallLimitMiddleware,
        ModelRetryMiddleware,
        ToolRetryMiddleware,
        PIIMiddleware,
        LLMToolSelectorMiddleware,
        ModelFallbackMiddleware,
        HumanInTheLoopMiddleware,
        SummarizationMiddleware,
    )
}


def build_builtin(name: str, params: dict[str, Any]) -> Any:
    """The built-in ``name`` made from its params (functions as objects, not references)."""
    if name == "RateLimitMiddleware":
        from services.middleware.ratelimit import RateLimitMiddleware

        return RateLimitMiddleware(**params)
    cls = BY_NAME[name]
    if name == "ModelFallbackMiddleware":
        args = [params.get("first_model"), *params.get("additional_models", [])]
        rest = {k: v for k, v in params.items() if k not in ("first_model", "additional_models")}
        return cls(*args, **rest)
    if name == "SummarizationMiddleware":
        # JSON has no tuples: ("messages", 4) arrives as ["messages", 4].
        params = {k: _context_size(v) if k in ("trigger", "keep") else v for k, v in params.items()}
    if name == "HumanInTheLoopMiddleware":
        rest = {k: v for k, v in params.items() if k != "interrupt_on"}
        return cls(params["interrupt_on"], **rest)
    if name == "PIIMiddleware":
        rest = {k: v for k, v in params.items() if k != "pii_type"}
        return cls(params["pii_type"], **rest)
    return cls(**params)


def _context_size(value: Any) -> Any:
    if isinstance(value, list) and len(value) == 2 and isinstance(value[0], str):
        return (value[0], value[1])
    if isinstance(value, list):
        return [_context_size(v) for v in value]
    return value


REFUSED_DEPLOYED: dict[str, str] = {
    "ToolErrorMiddleware": (
        "its on_error / aon_error handlers are code held by the instance, and they decide "
        "which exceptions become messages; they do not travel to the tools service (run "
        "the agent embedded, or write a wrap_tool_call middleware class importable by path)"
    ),
    "LLMToolEmulator": (
        "it answers tool calls with a chat model object of its own, which does not travel "
        "to the tools service"
    ),
    "ModelRouterMiddleware": (
        "its classifier and model choices are model objects (with their own endpoints and "
        "config) that do not travel to the model service, which serves models by name"
    ),
    "AutoModeMiddleware": (
        "its classifier is a decision-model object that does not travel to the tools service"
    ),
    "ShellToolMiddleware": (
        "it keeps a live shell session in the agent state (not JSON, so the state cannot "
        "be stored with the task) and would run commands on the tools service's host"
    ),
    "FilesystemFileSearchMiddleware": (
        "its Glob and Grep tools read the file system of the process that runs them: "
        "deployed, the tools service's host, not the client's root_path"
    ),
    "ModelRefusalMiddleware": (
        "it reads the provider's standard refusal content blocks, which the model "
        "service's ChatOpenAI replies do not carry as such; it is not run on the bus"
    ),
    "ProviderToolSearchMiddleware": (
        "it injects a provider's server-side tool search tool and deferred tool schemas, "
        "which the model service's OpenAI-compatible endpoints do not offer"
    ),
}
"""LangChain 1.5 built-ins that cannot run deployed, and why: refused when an agent is
registered (``services.spec.validation``) and when ``create_agent`` converts them with
REDIS_URL set. Embedded (no REDIS_URL), LangChain's instance runs as it is."""

ATTRIBUTE_OF: dict[tuple[str, str], str] = {
    ("ToolRetryMiddleware", "tools"): "_tool_filter",
    ("ToolErrorMiddleware", "tools"): "_tool_filter",
}
"""Constructor parameters a LangChain built-in keeps under another attribute (its own
``tools`` attribute is the middleware's tool registry, always empty)."""


def constructor_args(instance: Any) -> dict[str, Any]:
    """The keyword arguments that build ``instance`` again, read back from the attributes
    it keeps them under (``ATTRIBUTE_OF``, ``models`` for a fallback's models) and checked:
    an instance built from them must hold exactly the same attributes, or the conversion
    would lose something (``ValueError`` names what differs)."""
    cls = type(instance)
    args: dict[str, Any] = {}
    for name, parameter in inspect.signature(cls.__init__).parameters.items():
        if name == "self" or parameter.kind is parameter.VAR_KEYWORD:
            continue
        value = _read_back(instance, builtin_name(cls), name)
        if parameter.kind is parameter.VAR_POSITIONAL:
            if value is not _MISSING and value:  # a fallback's additional models
                args[name] = value
            continue
        if value is _MISSING or value is parameter.default:
            continue
        if parameter.default is parameter.empty or not _same(value, parameter.default):
            args[name] = value
    if _derived_token_counter(args.get("token_counter")):
        del args["token_counter"]  # LangChain's default, specialised for its model
    if "detector" in args and isinstance(instance, lc.PIIMiddleware):
        detector = _given_detector(instance.pii_type, args.pop("detector"))
        if detector is not None:
            args["detector"] = detector
    _check_rebuilds(instance, args)
    return args


_MISSING = object()


def _read_back(instance: Any, class_name: str, name: str) -> Any:
    if class_name == "ModelFallbackMiddleware" and name == "first_model":
        return instance.models[0]
    if class_name == "ModelFallbackMiddleware" and name == "additional_models":
        return list(instance.models[1:])
    return getattr(instance, ATTRIBUTE_OF.get((class_name, name), name), _MISSING)


def _check_rebuilds(instance: Any, args: dict[str, Any]) -> None:
    cls = type(instance)
    if builtin_name(cls) == "ModelFallbackMiddleware":
        rebuilt = cls(args["first_model"], *args.get("additional_models", []))
    elif builtin_name(cls) in ("PIIMiddleware", "HumanInTheLoopMiddleware"):
        first = "pii_type" if builtin_name(cls) == "PIIMiddleware" else "interrupt_on"
        rest = {k: v for k, v in args.items() if k != first}
        rebuilt = cls(args[first], **rest)
    else:
        rebuilt = cls(**args)
    before, after = _comparable(instance), _comparable(rebuilt)
    differ = sorted(
        k for k in before.keys() | after.keys() if not _same(before.get(k), after.get(k))
    )
    if differ:
        raise ValueError(
            f"{cls.__name__}: its constructor arguments cannot be read back without loss "
            f"(attributes {', '.join(differ)} differ)"
        )


def _comparable(instance: Any) -> dict[str, Any]:
    """The instance's attributes, a PII detector as what it was given (LangChain wraps a
    function or a pattern in a closure of its own, new for every instance, and builds its
    redaction rule and stream transformers from the arguments)."""
    found = dict(vars(instance))
    if isinstance(instance, lc.PIIMiddleware) and "detector" in found:
        found["detector"] = _given_detector(instance.pii_type, found["detector"])
        for derived in ("_resolved_rule", "transformers"):  # made from the arguments above
            found.pop(derived, None)
    return found


def _same(a: Any, b: Any) -> bool:
    """Whether an attribute of the instance and of its rebuilt copy hold the same: equal,
    or made the same way per instance (a partial, a closure such as the detector
    LangChain's PIIMiddleware resolves a regex to, a dataclass or tuple holding them)."""
    import dataclasses
    import types
    from functools import partial

    if a is b:
        return True
    if type(a) is not type(b):
        return False
    if isinstance(a, partial):  # a default made per instance
        return (
            _same(a.func, b.func)
            and _same(a.args, b.args)
            and _same(sorted(a.keywords.items()), sorted(b.keywords.items()))
        )
    if isinstance(a, tuple | list):  # PII's tuple of partials
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, types.FunctionType):  # a closure made per instance
        cells = [c.cell_contents for c in a.__closure__ or ()]
        others = [c.cell_contents for c in b.__closure__ or ()]
        return a.__code__ is b.__code__ and _same(cells, others)
    if dataclasses.is_dataclass(a) and not isinstance(a, type):
        fields = [f.name for f in dataclasses.fields(a)]
        return all(_same(getattr(a, f), getattr(b, f)) for f in fields)
    try:
        return bool(a == b)
    except Exception:  # objects whose comparison fails count as different
        return False


def params_of(instance: Any) -> dict[str, Any]:
    """Constructor arguments of a LangChain middleware instance, read back from the
    attributes it keeps under the same names (what every built-in does)."""
    remembered = getattr(instance, "_loopline_params", None)
    if remembered is not None:
        return dict(remembered)
    params: dict[str, Any] = {}
    for name, parameter in inspect.signature(type(instance).__init__).parameters.items():
        if name == "self" or parameter.kind in (parameter.VAR_KEYWORD,):
            continue
        if hasattr(instance, name):
            value = getattr(instance, name)
            if value != parameter.default:
                params[name] = value
    if _derived_token_counter(params.get("token_counter")):
        del params["token_counter"]  # LangChain's default, specialised for its model
    if "detector" in params and isinstance(instance, lc.PIIMiddleware):
        detector = _given_detector(instance.pii_type, params.pop("detector"))
        if detector is not None:
            params["detector"] = detector
    return params


def _derived_token_counter(counter: Any) -> bool:
    """Whether a SummarizationMiddleware's ``token_counter`` is the one LangChain made
    from its default (``count_tokens_approximately`` tuned to the model): building the
    middleware again from the same model makes it again."""
    from functools import partial

    from langchain_core.messages.utils import count_tokens_approximately

    return isinstance(counter, partial) and counter.func is count_tokens_approximately


def _given_detector(pii_type: str, resolved: Any) -> Any:
    """The ``detector`` a LangChain PIIMiddleware was built with, from the function it
    resolved it to: None for the built-in one, the pattern of a regex, the user's own
    function (LangChain wraps it to normalize its matches)."""
    from langchain.agents.middleware._redaction import BUILTIN_DETECTORS

    if BUILTIN_DETECTORS.get(pii_type) is resolved:
        return None
    try:
        captured = inspect.getclosurevars(resolved).nonlocals
    except TypeError:
        return resolved
    if isinstance(captured.get("pattern"), re.Pattern):
        return captured["pattern"].pattern
    if callable(captured.get("raw_detector")):
        return captured["raw_detector"]
    return resolved
