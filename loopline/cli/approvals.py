"""Commands for tasks waiting on a human: ``approvals`` lists them, ``decide`` answers one
(LangChain's decisions for a whole model turn, or one gated call in per-call mode)."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import TYPE_CHECKING, Any

from contracts.events import ApprovalRequested, TaskCompleted, TaskFailed, ToolInterrupted
from loopline.cli.common import UsageError, check_redis, deployment
from loopline.cli.render import describe, is_hitl

if TYPE_CHECKING:
    from loopline.client import Client


def cmd_approvals(args: argparse.Namespace) -> int:
    from loopline.client import Client

    url, prefix = deployment()

    async def main() -> int:
        await check_redis(url)
        async with Client(url, prefix) as client:
            waiting = await client.pending_approvals()
        for request in waiting:
            if args.json:
                print(json.dumps(request.model_dump(mode="json")))
            else:
                print(f"{request.task_id}  {describe(request)}")
        if not args.json:
            print(f"{len(waiting)} task(s) waiting for a decision", file=sys.stderr)
        return 0

    return asyncio.run(main())


def _parsed_decisions(args: argparse.Namespace) -> Any:
    try:
        return json.loads(args.decisions)
    except json.JSONDecodeError as exc:
        raise UsageError(f"--decisions is not JSON: {exc}") from exc


def _one_decision(args: argparse.Namespace) -> dict[str, object]:
    """The decision ``--approve``, ``--reject``, ``--respond`` or ``--edit`` says."""
    if args.approve:
        return {"type": "approve"}
    if args.reject is not None:
        return {"type": "reject", **({"message": args.reject} if args.reject else {})}
    if args.respond is not None:
        return {"type": "respond", "message": args.respond}
    if args.edit is not None:
        try:
            action = json.loads(args.edit)
        except json.JSONDecodeError as exc:
            raise UsageError(f"--edit is not JSON: {exc}") from exc
        return {"type": "edit", "edited_action": action}
    raise UsageError("say what to do: --approve, --reject, --respond, --edit or --decisions")


def _decisions(args: argparse.Namespace, count: int) -> list[dict[str, object]]:
    if args.decisions:
        parsed = _parsed_decisions(args)
        if not isinstance(parsed, list):
            raise UsageError("--decisions must be a JSON list, one decision per gated call")
        return parsed
    return [_one_decision(args)] * count


def _call_decisions(
    args: argparse.Namespace, open_calls: list[ApprovalRequested]
) -> dict[str, Any] | list[Any]:
    """Per-call mode: ``--decisions`` as ``{call id: decision}`` (or a list of decisions
    with ``tool_call_id``), else one decision for ``--call`` (needed when several wait)."""
    if args.decisions:
        parsed = _parsed_decisions(args)
        if not isinstance(parsed, dict | list):
            raise UsageError("--decisions must be {call id: decision} or a list of decisions")
        return parsed
    ids = [r.call_id for r in open_calls]
    target = args.call
    if target is None:
        if len(ids) != 1:
            raise UsageError(f"{len(ids)} calls wait: name one with --call ({', '.join(ids)})")
        target = ids[0]
    if target not in ids:
        raise UsageError(f"call {target} is not waiting for a decision ({', '.join(ids)})")
    one = _decisions(args, 1)[0]
    action = one.get("edited_action")
    if isinstance(action, dict) and "name" not in action:  # --edit with the args only
        name = open_calls[ids.index(target)].request.get("name")
        one = {"type": "edit", "edited_action": {"name": name, "args": action}}
    return {target: one}


def cmd_decide(args: argparse.Namespace) -> int:
    from loopline.client import Client

    url, prefix = deployment()

    async def main() -> int:
        await check_redis(url)
        async with Client(url, prefix) as client:
            request = await client.waiting(args.task_id)
            if request is None:
                raise UsageError(f"task {args.task_id} is not waiting for a decision")
            if not is_hitl(request.request):
                raise UsageError(
                    f"task {args.task_id} waits at {request.node or 'a hook'} for an answer "
                    f"to its own interrupt {request.interrupt_id}, not for a "
                    "HumanInTheLoopMiddleware decision: answer it with "
                    "invoke(Command(resume=...)) or Client.answer"
                )
            if request.per_call:
                return await _decide_calls(client, args)
            return await _decide_turn(client, args, request)

    return asyncio.run(main())


async def _decide_turn(client: Client, args: argparse.Namespace, request: ApprovalRequested) -> int:
    """Answer every gated call of one model turn, in order (LangChain's HITL)."""
    if args.call is not None:
        raise UsageError("--call is for per-call approvals (interrupt_mode='per_call')")
    count = len(request.request.get("action_requests", []))
    decisions = _decisions(args, count)
    if args.edit is not None and count == 1:
        action = decisions[0]["edited_action"]
        if isinstance(action, dict) and "name" not in action:
            name = request.request["action_requests"][0]["name"]
            decisions = [{"type": "edit", "edited_action": {"name": name, "args": action}}]
    after = await client.last_entry(args.task_id)
    await client.decide(args.task_id, decisions)
    _, outcome = await client.outcome(args.task_id, after=after)
    _print_outcome(outcome, args.json)
    return 0 if not isinstance(outcome, TaskFailed) else 1


async def _decide_calls(client: Client, args: argparse.Namespace) -> int:
    """Answer calls parked one by one (``interrupt_mode='per_call'``)."""
    open_calls = await client.waiting_calls(args.task_id)
    decisions = _call_decisions(args, open_calls)
    after = await client.last_entry(args.task_id)
    try:
        answered = await client.decide(args.task_id, decisions)
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    _, outcome = await client.outcome_of_decisions(args.task_id, answered, after=after)
    _print_outcome(outcome, args.json)
    return 1 if isinstance(outcome, TaskFailed | ToolInterrupted) else 0


def _print_outcome(
    outcome: TaskCompleted | TaskFailed | ApprovalRequested | ToolInterrupted, as_json: bool
) -> None:
    if as_json:
        print(json.dumps(outcome.model_dump(mode="json")))
        return
    print(describe(outcome))
    if isinstance(outcome, TaskCompleted):
        print(outcome.answer)
