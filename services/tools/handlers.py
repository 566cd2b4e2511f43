"""Tools handler: check the call against the agent's tools, run it, report the result."""

from __future__ import annotations

from langchain_core.tools import BaseTool

from contracts.agent import AgentSpec
from contracts.events import AnyEvent, ToolCompleted, ToolRequested
from services import toolbox
from services.errors import BadEvent
from services.runtime import Handler, Runtime
from services.tools.logic import refused, run_tool


def handlers(rt: Runtime) -> dict[str, Handler]:
    by_agent: dict[str, dict[str, BaseTool]] = {}

    for module in rt.settings.tool_modules:  # import errors show at start, not mid-task
        __import__(module)

    def tools_of(agent_id: str, spec: AgentSpec) -> dict[str, BaseTool]:
        found = by_agent.get(agent_id)
        if found is None:
            found = {}
            for ref in spec.tools:
                made = toolbox.resolve(ref)
                found[made.name] = made
            by_agent[agent_id] = found
        return found

    async def on_tool_requested(event: AnyEvent) -> None:
        if not isinstance(event, ToolRequested):
            raise BadEvent(f"{event.type} does not belong on the tools stream")
        spec = await rt.agent(event.agent_id)
        tools = tools_of(event.agent_id, spec)
        tool = tools.get(event.call.name)
        if tool is None:
            message = refused(event.call, list(tools))
        else:
            message = await run_tool(tool, event.call)
        await rt.publish(
            rt.names.loop,
            ToolCompleted(
                task_id=event.task_id, step=event.step, agent_id=event.agent_id, message=message
            ),
        )

    return {rt.names.tools: on_tool_requested}
