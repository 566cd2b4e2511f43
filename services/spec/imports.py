"""Resolving ``package.module:name`` references (``name`` may be dotted): the one way a
spec names code that another process imports. Failures say which part failed, so each
caller words its own error (a tool path, a middleware type, a function parameter).

Only modules inside the operator's allow-list resolve (``LOOPLINE_ALLOWED_MODULES``,
comma-separated module prefixes, added to loopline's own modules and LangChain's
middleware): a spec comes from whoever could write to the bus, and importing a module
already runs its code, so the path is checked before anything is imported. ``*`` allows
every module (the embedded default, where the process that names the code is the one
that runs it).
"""

from __future__ import annotations

import importlib
import os
from typing import Any

ALLOWED_ENV = "LOOPLINE_ALLOWED_MODULES"

DEFAULT_ALLOWED = (
    "loopline",
    "services.middleware",
    "langchain.agents.middleware",
)
"""Always allowed: loopline's own middleware and tools, and LangChain's middleware."""

ANY_MODULE = "*"

_trusted_process = False
"""Set by the embedded runtime when LOOPLINE_ALLOWED_MODULES is not set (``trust_all``)."""

_parsed: tuple[str, tuple[str, ...]] = ("", DEFAULT_ALLOWED)


class UnresolvedPath(Exception):
    """A reference that names nothing importable; ``str()`` is the underlying reason."""

    def __init__(self, path: str, module_name: str, attr: str, reason: str) -> None:
        super().__init__(reason)
        self.path = path
        self.module_name = module_name
        self.attr = attr


class ModuleNotImportable(UnresolvedPath):
    """Importing the module failed."""


class NameNotFound(UnresolvedPath):
    """The module imported, but has no such name (or the name is None)."""


class ModuleNotAllowed(UnresolvedPath):
    """The module is outside the allow-list: it was not imported."""


def trust_all() -> None:
    """Allow every module in this process unless the operator set an allow-list: the
    embedded default, where the program that names the code also runs it."""
    global _trusted_process
    _trusted_process = True


def allowed_prefixes() -> tuple[str, ...]:
    """The module prefixes references may name (read from the environment each time, so
    a test or an operator changing it is seen; parsed once per distinct value)."""
    global _parsed
    raw = os.environ.get(ALLOWED_ENV)
    if raw is None:
        return (ANY_MODULE,) if _trusted_process else DEFAULT_ALLOWED
    if raw != _parsed[0]:
        listed = tuple(p.strip() for p in raw.split(",") if p.strip())
        _parsed = (raw, DEFAULT_ALLOWED + listed)
    return _parsed[1]


def is_allowed(module_name: str) -> bool:
    """Whether a module lies inside an allowed prefix: the prefix itself or a submodule
    of it (``mypkg`` allows ``mypkg.tools``, not ``mypkg_evil``)."""
    for prefix in allowed_prefixes():
        if prefix == ANY_MODULE:
            return True
        if module_name == prefix or module_name.startswith(prefix + "."):
            return True
    return False


def check_allowed(path: str) -> None:
    """Raise ``ModuleNotAllowed`` for a reference outside the allow-list (nothing is
    imported)."""
    module_name, _, attr = path.partition(":")
    if not is_allowed(module_name):
        raise ModuleNotAllowed(
            path,
            module_name,
            attr,
            f"module {module_name!r} is not allowed: add it to {ALLOWED_ENV} "
            "(comma-separated module prefixes) where the agent is deployed and run",
        )


NOT_ON_PATH_HINT = (
    "the process that runs it must find the module: put the folder that holds it on "
    "PYTHONPATH where the services run (or install it there), and name it in "
    f"{ALLOWED_ENV}"
)


def _not_found(module_name: str, exc: ImportError) -> str:
    """The import error, with how to fix it when the module itself (or its package) was
    not found, rather than failing inside: the services run in their own environment."""
    missing = exc.name if isinstance(exc, ModuleNotFoundError) else None
    if not missing or not (module_name + ".").startswith(missing + "."):
        return str(exc)
    return f"{exc} ({NOT_ON_PATH_HINT})"


def resolve(path: str) -> Any:
    check_allowed(path)  # before importlib: importing a module runs its code
    module_name, _, attr = path.partition(":")
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise ModuleNotImportable(path, module_name, attr, _not_found(module_name, exc)) from exc
    for part in attr.split("."):
        try:
            target = getattr(target, part)
        except AttributeError as exc:
            raise NameNotFound(path, module_name, attr, str(exc)) from exc
        if target is None:
            raise NameNotFound(path, module_name, attr, f"{module_name}:{attr} is None")
    return target
