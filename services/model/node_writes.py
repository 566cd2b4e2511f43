"""What LangChain's model node leaves in the state's messages, when its
``wrap_model_call`` chain did more than add messages beside the reply.

The model node returns a list of commands (``langchain.agents.factory._build_commands``):
its own write (the reply, the structured output's answers; when a layer changed the
request's own message list in place, ``RemoveMessage(REMOVE_ALL_MESSAGES)`` and that list
first), then each layer's ``Command`` (inner layer first). LangGraph folds them into
``messages`` with ``add_messages``: a message with a known id replaces that one, a
``RemoveMessage`` deletes, ``REMOVE_ALL_MESSAGES`` starts over. deepagents' summarization
and large-message eviction work this way (a message replaced by id, beside the reply).

loopline keeps the transcript and the reply apart (the loop routes on the reply and joins
the tool results after it), so the fold's outcome is told as the messages before the
reply (``ModelResponded.rewrite``, when they changed) and those after it
(``after_reply``). LangChain routes on the last AI message of the state; loopline asks
that it is the model's reply, and refuses with the reason otherwise.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from contracts.events import KeptMessages, RemovedMessage, RewrittenMessage, WrittenMessage
from contracts.messages import AIMessage, Message, from_langchain, to_langchain

REPLY_MARK = "loopline-model-reply"
"""The id the fold knows a reply without one by (LangGraph would give it a random one)."""

ADDED_AI = (
    "a wrap_model_call Command adding an AI message: loopline routes on the model's "
    "reply, where LangChain's graph would route on the last AI message"
)


@dataclass(frozen=True)
class Placed:
    """The messages around the reply once the node's writes are applied. Both None: the
    writes only add messages after it (``ModelResponded.added`` takes them from the
    writes)."""

    rewrite: list[RewrittenMessage] | None = None
    """The messages before the reply, when they are not the transcript the node had (its
    unchanged messages by position: ``by_reference``)."""
    after: list[Message] | None = None
    """The messages after the reply (the structured output's answers aside)."""
    repaired: list[RewrittenMessage] | None = None
    """The request's list a layer changed in place (the node writes it back first), with
    the ids the fold gave its new messages."""


def written(value: Any) -> list[WrittenMessage]:
    """A command's ``messages`` update as the event carries it, in its order."""
    from langchain_core.messages import RemoveMessage, convert_to_messages

    given = value if isinstance(value, list | tuple) else [value]
    out: list[WrittenMessage] = []
    for message in convert_to_messages(list(given)):
        if isinstance(message, RemoveMessage):
            out.append(RemovedMessage(id=str(message.id)))
        else:
            out.append(from_langchain(message))
    return out


def _langchain(messages: Sequence[WrittenMessage]) -> list[Any]:
    from langchain_core.messages import RemoveMessage

    return [
        RemoveMessage(id=m.id) if isinstance(m, RemovedMessage) else to_langchain(m)
        for m in messages
    ]


def _appends(transcript: Sequence[Message], reply: Any, commands: Sequence[Any]) -> bool:
    """Whether the commands' messages are all new ones (no removal, no id the state has or
    an earlier write gave): ``add_messages`` then appends them in order."""
    taken = {m.id for m in transcript if m.id} | ({reply.id} if reply.id else set())
    for write in commands:
        for message in write:
            if isinstance(message, RemovedMessage) or (message.id and message.id in taken):
                return False
            if message.id:
                taken.add(message.id)
    return True


def placed(
    transcript: Sequence[Message],
    state: list[Any],
    reply: Any,
    own: list[Any],
    repaired: list[Any] | None,
    commands: Sequence[Sequence[WrittenMessage]],
) -> Placed:
    """``transcript``: the node's messages (``state``: as LangChain's, given to the
    chain); ``reply``: the model's reply, among ``own`` (the response's messages);
    ``repaired``: the request's list when a layer changed it in place; ``commands``: each
    command's ``messages`` write (``written``), in order."""
    from langchain_core.messages import AIMessage as LcAIMessage
    from langchain_core.messages import RemoveMessage
    from langgraph.graph.message import REMOVE_ALL_MESSAGES, add_messages

    if repaired is None and not any(commands):
        return Placed()  # the reply alone: the common case, no fold
    if repaired is None and _appends(transcript, reply, commands):
        if any(isinstance(m, AIMessage) for write in commands for m in write):
            raise NotImplementedError(ADDED_AI)
        return Placed()
    marked = reply if reply.id else reply.model_copy(update={"id": REPLY_MARK})
    first = [marked if m is reply else m for m in own]
    if repaired is not None:
        first = [RemoveMessage(id=REMOVE_ALL_MESSAGES), *repaired, *first]
    messages: Any = list(state)
    for write in [first, *(_langchain(w) for w in commands)]:
        messages = add_messages(messages, write)
    at = next((i for i, m in enumerate(messages) if m.id == marked.id), None)
    if at is None:
        raise NotImplementedError(
            "a wrap_model_call Command removed the model's reply from the state: loopline "
            "routes on the reply, where LangChain's graph would route on what is left"
        )
    if messages[at] is not marked and messages[at] != marked:  # written again, unchanged: kept
        raise NotImplementedError(
            "a wrap_model_call Command replaced the model's reply (a message with its id): "
            "loopline routes on the reply the model gave"
        )
    last_ai = max(i for i, m in enumerate(messages) if isinstance(m, LcAIMessage))
    if last_ai != at:
        raise NotImplementedError(ADDED_AI)
    answers = [m for m in own if m is not reply]  # the loop adds the structured answers
    after = [from_langchain(m) for m in messages[at + 1 :] if not any(m is a for a in answers)]
    before = [from_langchain(m) for m in messages[:at]]
    rewrite = None if before == list(transcript) else by_reference(before, transcript)
    if repaired is None:
        return Placed(rewrite, after)
    # add_messages gave the list's new messages their ids in place: the state's ones
    written_back = by_reference([from_langchain(m) for m in repaired], transcript)
    return Placed(rewrite, after, written_back)


def by_reference(
    before: Sequence[Message], transcript: Sequence[Message]
) -> list[RewrittenMessage]:
    """``before`` with each run of messages that stand unchanged in ``transcript`` named by
    position (``KeptMessages``), so the event carries only what changed."""
    at = {m.id: i for i, m in enumerate(transcript) if m.id}
    out: list[RewrittenMessage] = []
    for message in before:
        index = at.get(message.id) if message.id else None
        if index is None or transcript[index] != message:
            out.append(message)
            continue
        last = out[-1] if out else None
        if isinstance(last, KeptMessages) and last.start + last.count == index:
            out[-1] = KeptMessages(start=last.start, count=last.count + 1)
        else:
            out.append(KeptMessages(start=index, count=1))
    return out
