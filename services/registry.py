"""Which handlers each service runs (imported lazily: a service loads only its own deps)."""

from __future__ import annotations

import importlib
from typing import cast

from contracts.streams import SERVICES
from services.runtime import ServiceFactory


def factory(service: str) -> ServiceFactory:
    if service not in SERVICES:
        raise ValueError(f"unknown service {service!r}; one of: {', '.join(SERVICES)}")
    module = importlib.import_module(f"services.{service}.handlers")
    return cast(ServiceFactory, module.handlers)
