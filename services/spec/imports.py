"""Resolving ``package.module:name`` references (``name`` may be dotted): the one way a
spec names code that another process imports. Failures say which part failed, so each
caller words its own error (a tool path, a middleware type, a function parameter)."""

from __future__ import annotations

import importlib
from typing import Any


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


def resolve(path: str) -> Any:
    module_name, _, attr = path.partition(":")
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise ModuleNotImportable(path, module_name, attr, str(exc)) from exc
    for part in attr.split("."):
        try:
            target = getattr(target, part)
        except AttributeError as exc:
            raise NameNotFound(path, module_name, attr, str(exc)) from exc
        if target is None:
            raise NameNotFound(path, module_name, attr, f"{module_name}:{attr} is None")
    return target
