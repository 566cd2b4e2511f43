"""Tables for ``status``, ``stats`` and ``doctor``: drawn with ``rich`` in a terminal,
aligned plain text in a pipe or a file (what scripts that do not take ``--json`` read).
A table is a header row and data rows of strings."""

from __future__ import annotations

import sys
from typing import TextIO

from loopline.cli.live import is_terminal


def plain_table(rows: list[list[str]]) -> list[str]:
    """Columns padded to their widest cell, two spaces apart."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]


def show_table(rows: list[list[str]], title: str | None = None, out: TextIO | None = None) -> None:
    """Print a table (header first) with its title, if any."""
    out = out or sys.stdout
    if not is_terminal(out):
        if title:
            print(title, file=out)
        print("\n".join(plain_table(rows)), file=out)
        return
    from rich import box
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, header_style="bold")
    for heading in rows[0]:
        table.add_column(heading)
    for row in rows[1:]:
        table.add_row(*row)
    Console(file=out).print(table)


def stats_rows(stats: dict[str, dict[str, object]]) -> list[list[str]]:
    """``loopline stats``: one row of counts per agent."""
    columns = [
        ("tasks", "TASKS"),
        ("completed", "DONE"),
        ("failed", "FAILED"),
        ("waiting", "WAITING"),
        ("steps", "STEPS"),
        ("model_calls", "MODEL CALLS"),
        ("input_tokens", "TOKENS IN"),
        ("output_tokens", "TOKENS OUT"),
        ("tool_calls", "TOOL CALLS"),
        ("tool_errors", "TOOL ERRORS"),
    ]
    rows = [["AGENT", *(heading for _, heading in columns)]]
    for name, row in stats.items():
        rows.append([name, *(str(row.get(key, 0)) for key, _ in columns)])
    return rows


def latency_rows(stats: dict[str, dict[str, object]]) -> list[list[str]]:
    """``loopline stats``: each agent's stage latencies (ms)."""
    rows = [["AGENT", "STAGE", "COUNT", "P50 MS", "P90 MS", "P99 MS"]]
    for name, row in stats.items():
        latency = row.get("latency_ms")
        for stage, p in dict(latency if isinstance(latency, dict) else {}).items():
            rows.append([name, stage, str(p["count"]), str(p["p50"]), str(p["p90"]), str(p["p99"])])
    return rows
