"""Response schemas of the structured-output parity tests: module-level, so deployed
agents name them by import path (``tests.answers:Weather``)."""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel, Field
from typing_extensions import TypedDict


class Weather(BaseModel):
    """The weather in a city."""

    city: str
    celsius: int = Field(ge=-90, le=60)


@dataclass
class Forecast:
    """A forecast for a day."""

    day: str
    rain: bool


class Verdict(TypedDict):
    """A yes or no answer with its reason."""

    answer: bool
    reason: str


CONTACT_SCHEMA = {
    "title": "Contact",
    "description": "A person to reach.",
    "type": "object",
    "properties": {"name": {"type": "string"}, "email": {"type": "string"}},
    "required": ["name", "email"],
}
