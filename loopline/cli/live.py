"""How ``loopline run`` and ``watch task`` show a task while it runs.

In a terminal, a live view drawn with ``rich``: the steps with the tool calls each asked
for and how each ended, the context edits, the todo list as a checklist, and the model's
text streaming token by token from the task's chunk stream. When output is a pipe or a
file, one plain line per event (``render.describe``), which scripts and logs can read.

``TaskView`` is the state of the view, fed by the task's events and chunk batches, with
no I/O; ``LiveProgress`` draws it, ``PlainProgress`` prints lines, ``QuietProgress``
(``--json``) shows nothing.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TextIO

from contracts.chunks import ChunkBatch
from contracts.events import (
    AnyEvent,
    ApprovalRequested,
    ContextEdited,
    ModelResponded,
    StepStarted,
    TaskCompleted,
    TaskFailed,
    TaskSubmitted,
    TodosUpdated,
    ToolCompleted,
)
from loopline.cli.render import call_summary, clip, describe

if TYPE_CHECKING:
    from rich.console import RenderableType
    from rich.live import Live

STEPS_SHOWN = 8
"""Steps the live view draws; earlier ones are counted, so a long task fits a screen."""

CHECKBOXES = {
    "completed": ("☑", "green"),
    "in_progress": ("◐", "bold yellow"),
    "pending": ("☐", "dim"),
}


class Progress(Protocol):
    """What following a task feeds: its events and its streamed chunks."""

    def event(self, event: AnyEvent) -> None: ...

    def chunks(self, batch: ChunkBatch) -> None: ...


def is_terminal(stream: TextIO) -> bool:
    """A live view only where a person watches: a terminal that draws (not ``dumb``)."""
    return stream.isatty() and os.environ.get("TERM", "") != "dumb"


@dataclass
class StepView:
    """One step: what the model said and asked for, and how each call ended."""

    number: int
    text: str = ""
    """The model's text: streamed as it is generated, then the whole reply's."""
    calls: list[tuple[str, str]] = field(default_factory=list)
    """(tool call id, the call shortened for a line), in the reply's order."""
    results: dict[str, tuple[bool, str]] = field(default_factory=dict)
    """By tool call id: (ok, the result on one line)."""
    edits: list[str] = field(default_factory=list)
    replied: bool = False


@dataclass
class TaskView:
    """What the live view shows of one task, from its events and chunks."""

    task_id: str
    agent: str = ""
    steps: dict[int, StepView] = field(default_factory=dict)
    todos: list[tuple[str, str]] = field(default_factory=list)
    """(status, content) of the latest todo list."""
    final: AnyEvent | None = None
    started: float = field(default_factory=time.monotonic)

    def step(self, number: int) -> StepView:
        return self.steps.setdefault(number, StepView(number))

    def event(self, event: AnyEvent) -> None:
        if isinstance(event, TaskSubmitted):
            self.agent = event.agent_name
        elif isinstance(event, StepStarted):
            self.step(event.step)
        elif isinstance(event, ModelResponded):
            step = self.step(event.step)
            step.text = event.message.text()
            step.calls = [(c.id, call_summary(c.name, c.args)) for c in event.message.tool_calls]
            step.replied = True
        elif isinstance(event, ToolCompleted):
            ok = event.message.status != "error"
            result = (ok, clip(event.message.text(), 70))
            self.step(event.step).results[event.message.tool_call_id] = result
        elif isinstance(event, TodosUpdated):
            self.todos = [(t.status, t.content) for t in event.todos]
        elif isinstance(event, ContextEdited):
            self.step(event.step).edits.append(
                f"context edit: cleared {len(event.cleared_tool_call_ids)} tool result(s), "
                f"{event.tokens_before} → {event.tokens_after} tokens"
            )
        elif isinstance(event, TaskCompleted | TaskFailed | ApprovalRequested):
            self.final = event

    def chunks(self, batch: ChunkBatch) -> None:
        """Streamed pieces of a step's reply: its text grows as they arrive; a retried
        call (``reset``) starts the text again."""
        step = self.step(batch.step)
        if step.replied:
            return  # the whole reply is there already
        if batch.reset:
            step.text = ""
        step.text += "".join(chunk_text(c) for c in batch.chunks)

    # -- drawing ------------------------------------------------------------------------

    def render(self) -> RenderableType:
        from rich.console import Group
        from rich.text import Text

        parts: list[RenderableType] = [
            Text.assemble(
                ("task ", "dim"), (self.task_id, "bold"), ("  agent ", "dim"), (self.agent, "cyan")
            )
        ]
        numbers = sorted(self.steps)
        if len(numbers) > STEPS_SHOWN:
            parts.append(Text(f"({len(numbers) - STEPS_SHOWN} earlier steps)", style="dim"))
        for number in numbers[-STEPS_SHOWN:]:
            parts.extend(self._step_lines(self.steps[number]))
        if self.todos:
            parts.append(Text("todos", style="bold"))
            for status, content in self.todos:
                box, style = CHECKBOXES.get(status, ("?", ""))
                parts.append(Text(f"  {box} {content}", style=style))
        parts.append(self._status())
        return Group(*parts)

    def _step_lines(self, step: StepView) -> list[RenderableType]:
        from rich.text import Text

        lines: list[RenderableType] = []
        head = Text.assemble((f"step {step.number} ", "bold blue"))
        if step.calls:
            head.append(", ".join(summary for _, summary in step.calls))
        elif step.text and self._is_answer(step):
            head.append("answer", style="bold")
        elif not step.replied:
            head.append("calling the model…", style="dim")
        lines.append(head)
        if step.text and (step.calls or not self._is_answer(step)):
            lines.append(Text(f"  {clip(step.text, 200)}", style="italic"))
        elif step.text:
            lines.append(Text(step.text))  # the answer, whole, as it streams
        for call_id, summary in step.calls:
            found = step.results.get(call_id)
            name = summary.partition("(")[0]
            if found is None:
                lines.append(Text(f"  … {name} running", style="dim"))
            else:
                ok, text = found
                mark, style = ("✓", "green") if ok else ("✗", "red")
                line = Text.assemble((f"  {mark} {name}", style), (f" → {text}", ""))
                line.no_wrap, line.overflow = True, "ellipsis"
                lines.append(line)
        lines.extend(Text(f"  ✂ {edit}", style="yellow") for edit in step.edits)
        return lines

    def _is_answer(self, step: StepView) -> bool:
        """The last step's text, with no calls: the answer (streaming, or given)."""
        return not step.calls and step.number == max(self.steps)

    def _status(self) -> RenderableType:
        from rich.text import Text

        elapsed = f"{time.monotonic() - self.started:.1f} s"
        final = self.final
        if isinstance(final, TaskCompleted):
            return Text(f"done after {final.steps} step(s), {elapsed}", style="bold green")
        if isinstance(final, TaskFailed):
            return Text(f"FAILED at step {final.step}: {final.reason}", style="bold red")
        if isinstance(final, ApprovalRequested):
            return Text(
                f"waiting for a human: loopline decide {self.task_id} --approve",
                style="bold yellow",
            )
        current = max(self.steps) if self.steps else 0
        return Text(f"running, step {current}, {elapsed}", style="dim")


def chunk_text(chunk: dict[str, Any]) -> str:
    """The text of one streamed ``AIMessageChunk`` (as dumped on the chunk stream)."""
    content = chunk.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(b.get("text", ""))
            for b in content
            if isinstance(b, dict) and b.get("type") == "text"
        )
    return ""


class LiveProgress:
    """The live view on a terminal, redrawn on every event and chunk batch."""

    def __init__(self, task_id: str, stream: TextIO | None = None) -> None:
        from rich.console import Console

        self.view = TaskView(task_id)
        self.console = Console(file=stream or sys.stdout)
        self._live: Live | None = None

    def __enter__(self) -> LiveProgress:
        from rich.live import Live

        self._live = Live(
            self.view.render(),
            console=self.console,
            auto_refresh=False,
            redirect_stdout=False,
            redirect_stderr=False,
            vertical_overflow="visible",
        )
        self._live.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.update(self.view.render(), refresh=True)
            self._live.stop()

    def event(self, event: AnyEvent) -> None:
        self.view.event(event)
        self.redraw()

    def chunks(self, batch: ChunkBatch) -> None:
        self.view.chunks(batch)
        self.redraw()

    def redraw(self) -> None:
        if self._live is not None:
            self._live.update(self.view.render(), refresh=True)


class PlainProgress:
    """One line per event, for pipes and files (on ``stream``, stderr by default)."""

    def __init__(self, stream: TextIO | None = None, prefix_task: bool = False) -> None:
        self.stream = stream or sys.stderr
        self.prefix_task = prefix_task

    def event(self, event: AnyEvent) -> None:
        line = describe(event)
        if line:
            tag = f"[{event.task_id[:8]}] " if self.prefix_task else ""
            print(f"{tag}{line}", file=self.stream, flush=True)

    def chunks(self, batch: ChunkBatch) -> None:
        """Plain output shows whole replies only."""


class QuietProgress:
    """``--json``: nothing while it runs; the result says it all."""

    def event(self, event: AnyEvent) -> None:
        """Nothing to show."""

    def chunks(self, batch: ChunkBatch) -> None:
        """Nothing to show."""
