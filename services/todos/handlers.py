"""Todos handler: a valid list replaces the task's list and is published; an invalid one
answers the model with an error and changes nothing."""

from __future__ import annotations

import json

from contracts.events import AnyEvent, TodosUpdated, ToolCompleted, ToolRequested, dump_event
from services.errors import BadEvent
from services.runtime import Handler, Runtime
from services.tasks.issued import Admission, IssuedCalls
from services.tasks.store import TaskStore
from services.todos.logic import as_dicts, parse_todos, status_counts, updated_message


def handlers(rt: Runtime) -> dict[str, Handler]:
    names = rt.names
    store = TaskStore(rt.redis, names, rt.register_script)
    issued = IssuedCalls(rt)

    async def on_write_todos(event: AnyEvent) -> None:
        if not isinstance(event, ToolRequested):
            raise BadEvent(f"{event.type} does not belong on the todo-calls stream")
        # Only a call its task's state issued changes its list (a forged one is refused).
        if await issued.admit(event) is Admission.LATE:
            return
        await rt.agent(event.agent_id)  # an unknown agent is a bad event, not a new list
        parsed = parse_todos(event.call)
        if isinstance(parsed, list):
            await rt.redis.set(names.task_todos(event.task_id), json.dumps(as_dicts(parsed)))
            update = TodosUpdated(
                task_id=event.task_id,
                step=event.step,
                todos=parsed,
                counts=status_counts(parsed),
            )
            key = f"todos:{event.step}:{event.call.id}"
            if await store.log_once(event.task_id, key, dump_event(update)):
                await rt.publish(names.todos, update)
            message = updated_message(event.call, parsed)
        else:
            message = parsed
        await rt.publish(
            names.work("loop", event.task_id),
            ToolCompleted(
                task_id=event.task_id, step=event.step, agent_id=event.agent_id, message=message
            ),
        )

    return dict.fromkeys(names.work_streams("todo_calls"), on_write_todos)
