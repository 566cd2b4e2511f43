"""The embedded services start once per process, on the first agent's Redis and prefix:
an embedded agent on another prefix is refused with the reason, never left waiting for
consumers that do not come."""

from __future__ import annotations

import pytest

from loopline import create_agent
from loopline.testing.scripted import ScriptedOpenAIServer
from services.errors import ConfigurationError
from services.settings import Settings
from tests import tooling
from tests.error_cases import model_for

SCRIPTS = {"prefix": []}


def test_an_embedded_agent_on_another_prefix_is_refused(
    embedded: None, scripted: ScriptedOpenAIServer
) -> None:
    given = {"messages": [{"role": "user", "content": "prefix"}]}
    create_agent(model_for(scripted), [tooling.add]).invoke(given)  # the services run
    stray = create_agent(
        model_for(scripted), [tooling.add], settings=Settings(prefix="elsewhere")
    )
    with pytest.raises(ConfigurationError, match="prefix 'elsewhere' would wait for consumers"):
        stray.invoke(given)
