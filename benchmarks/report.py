"""The figures of one run as a Markdown table (``results/README.md``) and a PNG chart
(``results/benchmarks.png``, only when matplotlib is importable)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

RESULTS_DIR = Path(__file__).parent / "results"


def _f(value: Any, digits: int = 2) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    if isinstance(value, int | float) and abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def _met(ok: bool | None) -> str:
    return "n/a" if ok is None else ("**met**" if ok else "**not met**")


def _step_rows(step: dict[str, Any], http: dict[str, Any] | None) -> list[list[str]]:
    """Step latency against LangChain and against the raw-hop floor; the HTTP row sits
    among them because it only means something next to the in-process figure."""
    ll, lc, floor = step["loopline"], step["langchain"], step["floor"]
    ratio = ll["p50_ms"] / lc["p50_ms"]
    rows = [
        [
            "step latency p50",
            f"{_f(ll['p50_ms'])} ms",
            f"LangChain `create_agent` in-process: {_f(lc['p50_ms'])} ms",
            f"{ratio:.2f}×",
            "≤ 1.5×",
            _met(ratio <= 1.5),
        ]
    ]
    leased = step.get("loopline_leased")
    if leased:
        rows.append(
            [
                "step latency p50, a tool not declared idempotent",
                f"{_f(leased['p50_ms'])} ms",
                f"LangChain: {_f(lc['p50_ms'])} ms",
                f"{leased['p50_ms'] / lc['p50_ms']:.2f}×",
                "—",
                "—",
            ]
        )
    if http:
        rows.append(
            [
                "step latency p50, end to end over HTTP (`ChatOpenAI` both sides)",
                f"{_f(http['loopline']['p50_ms'])} ms",
                f"LangChain `create_agent` in-process: {_f(http['langchain']['p50_ms'])} ms",
                f"{http['loopline']['p50_ms'] / http['langchain']['p50_ms']:.2f}×",
                "—",
                "—",
            ]
        )
    rows.append(
        [
            "step latency p99",
            f"{_f(ll['p99_ms'])} ms",
            f"LangChain: {_f(lc['p99_ms'])} ms",
            f"{ll['p99_ms'] / lc['p99_ms']:.2f}×",
            "< 15 ms",
            _met(ll["p99_ms"] < 15),
        ]
    )
    rows.append(
        [
            "step latency p50 vs the floor",
            f"{_f(ll['p50_ms'])} ms",
            f"{floor['hops_per_step']} raw Redis hops: {_f(floor['p50_ms'])} ms",
            f"{ll['p50_ms'] / floor['p50_ms']:.2f}×",
            "—",
            "—",
        ]
    )
    return rows


def _throughput_rows(thr: dict[str, Any]) -> list[list[str]]:
    ratio = thr["loopline_steps_s"] / thr["langchain_steps_s"]
    return [
        [
            f"throughput, {thr['tasks']} tasks × {thr['steps']} steps",
            f"{_f(thr['loopline_steps_s'], 0)} steps/s",
            f"LangChain `asyncio.gather`: {_f(thr['langchain_steps_s'], 0)} steps/s",
            f"{ratio:.2f}×",
            "≥ 1.0×",
            _met(ratio >= 1.0),
        ],
        *_cpu_rows(thr),
    ]


def _cpu_rows(thr: dict[str, Any]) -> list[list[str]]:
    """CPU per step of the services against LangChain's and against the floor."""
    if "loopline_cpu_ms_per_step" not in thr:
        return []
    ours = sum(thr["loopline_cpu_ms_per_step"].values())
    theirs, floor = thr["langchain_cpu_ms_per_step"], thr["floor_cpu_ms_per_step"]
    return [
        [
            "CPU per step, the services (Redis not counted)",
            f"{_f(ours, 3)} ms",
            f"LangChain in-process: {_f(theirs, 3)} ms",
            f"{ours / theirs:.2f}×",
            "≤ 0.2×",
            _met(ours / theirs <= 0.2),
        ],
        [
            "CPU per step vs the floor",
            f"{_f(ours, 3)} ms",
            f"LangChain's own code for the step's model and tool call: {_f(floor, 3)} ms",
            f"{ours / floor:.2f}×",
            "≤ 2×",
            _met(ours / floor <= 2),
        ],
    ]


def _flat_rows(flat: dict[str, Any]) -> list[list[str]]:
    """The last measured step against the first: bytes always, latency when both steps
    were timed, latency less the model call when the model service timed its calls."""
    first, last = flat["rows"][0], flat["rows"][-1]
    k = last["step"]
    ev = last["event_bytes"] / first["event_bytes"]
    rows = [
        [
            f"event bytes, step {k} vs step 1",
            f"{last['event_bytes']:,} B",
            f"step 1: {first['event_bytes']:,} B; LangChain state at step {k}: "
            f"{last['langchain_state_bytes']:,} B",
            f"{ev:.2f}×",
            "≤ 1.2×",
            _met(ev <= 1.2),
        ]
    ]
    if first["loopline_step_ms"] and last["loopline_step_ms"]:
        rows.append(_flat_latency_row(first, last, k))
        if first.get("service_model_call_ms") and last.get("service_model_call_ms"):
            rows.append(_flat_own_latency_row(first, last, k))
    return rows


def _flat_latency_row(first: dict[str, Any], last: dict[str, Any], k: int) -> list[str]:
    lat = last["loopline_step_ms"] / first["loopline_step_ms"]
    return [
        f"per-step latency, step {k} vs step 1",
        f"{_f(last['loopline_step_ms'])} ms",
        f"step 1: {_f(first['loopline_step_ms'])} ms; LangChain "
        f"{_f(first['langchain_step_ms'])} → {_f(last['langchain_step_ms'])} ms",
        f"{lat:.2f}×",
        "≤ 1.2×",
        _met(lat <= 1.2),
    ]


def _flat_own_latency_row(first: dict[str, Any], last: dict[str, Any], k: int) -> list[str]:
    """The step less its model call: what loopline itself adds, apart from the call that
    grows with the conversation in any system."""
    own_first = first["loopline_step_ms"] - first["service_model_call_ms"]
    own_last = last["loopline_step_ms"] - last["service_model_call_ms"]
    return [
        f"per-step latency less the model call, step {k} vs step 1",
        f"{_f(own_last)} ms",
        f"step 1: {_f(own_first)} ms; the model call (`model_ms` of "
        f"`ModelResponded`): {_f(first['service_model_call_ms'])} → "
        f"{_f(last['service_model_call_ms'])} ms",
        f"{own_last / own_first:.2f}×",
        "—",
        "—",
    ]


def _concurrency_row(conc: dict[str, Any]) -> list[str]:
    """One size of the concurrency run; a run that did not finish fails its target."""
    if "loopline_s" not in conc:  # not every task completed: no time to show
        return [
            f"{conc['n']:,} concurrent tasks × {conc['steps']} steps, 1 s model",
            _not_timed(conc),
            f"ideal {conc['ideal_s']:.1f} s",
            "—",
            "≤ 1.3×",
            f"**not met** ({conc.get('error', '')})",
        ]
    ratio = conc["loopline_s"] / conc["ideal_s"]
    base = f"ideal {conc['ideal_s']:.1f} s"
    replicas = conc.get("replicas", 1)
    if conc.get("langchain_s"):
        base += f"; LangChain in-process {conc['langchain_s']:.1f} s"
    return [
        f"{conc['n']:,} concurrent tasks × {conc['steps']} steps, 1 s model"
        + (f", {replicas} replicas of each service" if replicas > 1 else ""),
        f"{conc['loopline_s']:.1f} s",
        base,
        f"{ratio:.2f}×",
        "≤ 1.3×",
        _met(ratio <= 1.3),
    ]


def _not_timed(conc: dict[str, Any]) -> str:
    """What a measurement whose tasks did not all complete shows in place of its time."""
    if conc.get("completed") is None:
        return "did not finish"
    return f"no time: {conc['completed']:,} of {conc['n']:,} completed, {conc['failed']:,} failed"


def _context_editing_rows(ce: dict[str, Any]) -> list[list[str]]:
    return [
        [
            "context editing, 1,000 tool results (steady state)",
            f"{ce['loopline_s'] * 1000:.2f} ms",
            f"LangChain `ClearToolUsesEdit`: {ce['langchain_s']:.2f} s",
            f"{ce['speedup']:,.0f}× faster",
            "—",
            "—",
        ]
    ]


def _recovery_rows(rec: dict[str, Any]) -> list[list[str]]:
    return [
        [
            "recovery after SIGKILL",
            rec["summary"],
            "see `recovery.md`",
            "—",
            "see `recovery.md`",
            "—",
        ]
    ]


def summary_rows(fig: dict[str, Any]) -> list[list[str]]:
    """One row per headline figure, in the order of the sections below the table; a
    measurement that was not run has no row."""
    rows: list[list[str]] = []
    step = fig.get("step")
    if step:
        rows += _step_rows(step, fig.get("step_http"))
    thr = fig.get("throughput")
    if thr:
        rows += _throughput_rows(thr)
    flat = fig.get("flat")
    if flat:
        rows += _flat_rows(flat)
    rows += [_concurrency_row(conc) for conc in fig.get("concurrency", [])]
    ce = fig.get("context_editing")
    if ce:
        rows += _context_editing_rows(ce)
    rec = fig.get("recovery")
    if rec and rec.get("summary"):
        rows += _recovery_rows(rec)
    return rows


def _header(fig: dict[str, Any]) -> list[str]:
    """Title, where and how the run was made, and the summary table."""
    env = fig.get("environment", {})
    out = [
        "# loopline benchmarks",
        "",
        f"`python -m benchmarks` on {env.get('when', '?')}: {env.get('machine', '')}. "
        f"Redis: {env.get('redis', '?')}. "
        + (f"Python GC: {env['gc']}. " if env.get("gc") else "")
        + "Every ratio compares figures measured in this "
        "same run; the machine is shared and noisy, so absolute numbers move between runs.",
        "",
        "Workload: the services as separate OS processes (one replica each, default "
        "settings), the scripted `fake` chat model inside the model consumer (zero latency "
        "unless stated), one no-op tool call per step. LangChain: `langchain.agents."
        "create_agent` in-process with the same scripted model class and the same tools.",
        "",
        "| measurement | loopline | baseline (same run) | ratio | target | |",
        "|---|---:|---|---:|---|---|",
    ]
    out += ["| " + " | ".join(r) + " |" for r in summary_rows(fig)]
    return out


_LATENCY_TABLE_HEAD = [
    "| | p50 (ms) | p99 (ms) | mean (ms) | samples |",
    "|---|---:|---:|---:|---:|",
]


def _latency_line(label: str, s: dict[str, Any]) -> str:
    return f"| {label} | {_f(s['p50_ms'])} | {_f(s['p99_ms'])} | {_f(s['mean_ms'])} | {s['n']} |"


def _step_section(step: dict[str, Any], http: dict[str, Any] | None) -> list[str]:
    """Section 1: in-process step latency, then over HTTP when it was measured, then the
    Redis commands a step costs."""
    out = [
        "",
        "## 1. Step latency",
        "",
        f"{step['tasks_per_side']} tasks of {step['steps_per_task']} model calls per "
        "side, run one at a time, interleaved in rounds with the raw hop so each side "
        "sees the same machine. A step is model call → tool → next model call: for "
        "loopline the gap between consecutive `StepStarted` events of the task's log "
        "(`at`, set by the loop), for LangChain the gap between consecutive model calls. "
        "A raw hop is XADD → XREADGROUP → XACK between two processes (`redis.asyncio`, "
        "~300-byte payload); the floor is the sum of "
        f"{step['floor']['hops_per_step']} consecutive hops (the stream hops of one "
        "step of this hook-free agent: model → tools → model; the model and tools "
        "services apply the loop's transitions themselves, see "
        "`services/tasks/handover.py`). The no-op tool is declared idempotent (it is): "
        "the tools service runs such a tool without taking a lease first. One task per "
        "round calls the same no-op left undeclared, which costs the lease's round "
        "trip.",
        "",
        *_LATENCY_TABLE_HEAD,
    ]
    for key, label in (
        ("loopline", "loopline step"),
        ("loopline_leased", "loopline step, a tool not declared idempotent"),
        ("langchain", "LangChain step"),
        ("floor", f"floor: {step['floor']['hops_per_step']} raw hops"),
        ("hop", "one raw hop"),
    ):
        s = step.get(key)
        if s:
            out.append(_latency_line(label, s))
    if http:
        out += _step_http_lines(http)
    cmds = step.get("commands_per_step")
    if cmds:
        out += _commands_lines(cmds, step["steps_per_task"])
    return out


def _step_http_lines(http: dict[str, Any]) -> list[str]:
    out = [
        "",
        "End to end: the same steps with the real `langchain_openai.ChatOpenAI` on "
        "both sides, over HTTP to the scripted OpenAI-compatible server "
        "(`python -m loopline.testing.scripted`, its own process); loopline's model service "
        "reaches it through `OPENAI_BASE_URL`. "
        f"{http['tasks_per_side']} tasks of {http['steps_per_task']} model calls "
        "per side, in interleaved rounds.",
        "",
        *_LATENCY_TABLE_HEAD,
    ]
    for key, label in (("loopline", "loopline step"), ("langchain", "LangChain step")):
        out.append(_latency_line(label, http[key]))
    return out


def _commands_lines(cmds: dict[str, float], steps_per_task: int) -> list[str]:
    return [
        "",
        "Redis commands per step (`INFO commandstats` around one task of "
        f"{2 * steps_per_task} steps, divided by its steps; idle readers' polls, "
        "the benchmark's own log reads and the commands Lua scripts run (counted "
        "besides their `evalsha`) included): "
        + ", ".join(f"{k} {v:g}" for k, v in cmds.items())
        + f"; total {sum(cmds.values()):.1f}.",
    ]


def _throughput_section(thr: dict[str, Any]) -> list[str]:
    return [
        "",
        "## 2. Throughput",
        "",
        f"{thr['tasks']} tasks × {thr['steps']} model calls submitted at once; steps/s = "
        "steps / (last task's end − submit time). LangChain: `asyncio.gather` of as many "
        "`ainvoke` on the same machine. Median of the rounds; every round: loopline "
        + ", ".join(f"{x:.0f}" for x in thr["loopline_all"])
        + "; LangChain "
        + ", ".join(f"{x:.0f}" for x in thr["langchain_all"])
        + "."
        + _cpu_text(thr),
    ]


def _cpu_text(thr: dict[str, Any]) -> str:
    per = thr.get("loopline_cpu_ms_per_step")
    if not per:
        return ""
    parts = ", ".join(f"{k} {v:.3f}" for k, v in sorted(per.items()))
    return (
        f" CPU ms per step (median of the rounds, from /proc): {parts}; LangChain in-process "
        f"(this process's CPU time) {thr['langchain_cpu_ms_per_step']:.3f}; the floor "
        f"(LangChain's `ainvoke` of the same bound model and `noop` tool, one after the "
        f"other, in-process) {thr['floor_cpu_ms_per_step']:.3f}."
    )


def _flat_section(flat: dict[str, Any]) -> list[str]:
    out = [
        "",
        "## 3. Flat cost as the history grows",
        "",
        f"{flat.get('tasks', 1)} tasks of {flat['steps']} model calls per side (loopline "
        "and LangChain alternating), each tool result "
        f"{flat['tool_bytes']:,} bytes. *Event bytes*: the JSON of every event of that "
        "step on the work streams (for this hook-free agent ModelRequested and "
        "ToolRequested; ModelResponded and ToolCompleted are applied where they are "
        "produced and only written to the task's log); *log bytes*: that step's "
        "entries in the task's own log. *Redis "
        "bytes in*: the server's `total_net_input_bytes` (INFO stats: every command "
        "every client sent, the services' reads and Lua calls included) over steps "
        f"k … k+{flat['window']}, divided by {flat['window']}"
        + ("" if flat["private_server"] else " (a shared server: other clients count too)")
        + " (first task). *Per-step latency*: median of the window's steps over all "
        "tasks. *LangChain "
        "state*: the serialized message list the model gets at that step "
        "(`messages_to_dict`), what shipping the whole history every step carries. "
        "*Model call*: the model call's own time inside loopline's step, as the model "
        "service measured it (`model_ms` of the task's `ModelResponded`, median of the "
        "window), and the same call in-process in the benchmark (the scripted model's "
        "`ainvoke` on the messages of that step, median of 30). It grows with the "
        "conversation in any system: LangChain's `BaseChatModel` walks every message on "
        "each call (normalizing them, formatting them for tracing), and a real model is "
        "sent them all.",
        "",
        "| step | event bytes | log bytes | Redis bytes in / step | loopline step (ms) "
        "| its model call (ms) | model call in-process (ms) | LangChain step (ms) "
        "| LangChain state bytes |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in flat["rows"]:
        out.append(
            f"| {r['step']} | {r['event_bytes']:,} | {r['log_bytes']:,} | "
            f"{_f(r['redis_bytes_in_per_step'], 0)} | {_f(r['loopline_step_ms'])} | "
            f"{_f(r.get('service_model_call_ms'))} | {_f(r.get('model_call_ms'))} | "
            f"{_f(r['langchain_step_ms'])} | {r['langchain_state_bytes']:,} |"
        )
    return out


def _concurrency_section(concs: list[dict[str, Any]], notes: list[str]) -> list[str]:
    out = [
        "",
        "## 4. Many concurrent tasks, a model with 1 s latency",
        "",
        "All tasks submitted at once; one replica per service (a size marked ×N: N of "
        "each, their CPU summed, the first one's peak RSS); the model service may "
        "hold every call in flight (`LOOPLINE_CONCURRENCY_MODEL=N`; its default of 256 "
        "would queue the rest behind the latency). Time = last task's end − submit "
        "time; ideal = model calls per task × 1 s. Peak RSS: `VmHWM` of each service "
        "process (/proc). CPU: seconds of CPU each service process used during the run "
        "(a process near the wall time is the bound). LangChain: `asyncio.gather` of N "
        "`ainvoke` in-process. *Model-call floor*: N × model calls per task × the CPU "
        "of one call's LangChain code (the scripted model's `ainvoke`, zero latency, "
        "measured in-process in the same run): the least CPU time one model replica "
        "spends before loopline does anything; past the ideal time, no single replica "
        "can be within it.",
        "",
        "| N | loopline (s) | ideal (s) | ratio | median task (s) | LangChain (s) "
        "| model-call floor (s) | peak RSS (MB) | CPU (s) |",
        "|---:|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    out += [_concurrency_line(c) for c in concs]
    for note in notes:
        out += ["", note]
    return out


def _concurrency_line(c: dict[str, Any]) -> str:
    """One size's line of section 4; a run that did not finish shows its error instead."""
    rss = ", ".join(f"{k} {v:.0f}" for k, v in c.get("peak_rss_mb", {}).items())
    cpu = ", ".join(f"{k} {v:.1f}" for k, v in c.get("cpu_s", {}).items())
    n = f"{c['n']:,}" + (f" ×{c['replicas']}" if c.get("replicas", 1) > 1 else "")
    if "loopline_s" in c:
        return (
            f"| {n} | {c['loopline_s']:.1f} | {c['ideal_s']:.1f} | "
            f"{c['loopline_s'] / c['ideal_s']:.2f}× | {c['loopline_p50_task_s']:.1f} | "
            f"{_f(c.get('langchain_s'), 1)} | {_f(c.get('model_call_floor_s'), 1)} | "
            f"{rss} | {cpu} |"
        )
    return (
        f"| {n} | {_not_timed(c)}: {c.get('error', '')} | "
        f"{c['ideal_s']:.1f} | — | — | — | {_f(c.get('model_call_floor_s'), 1)} | "
        f"{rss} | {cpu} |"
    )


def _without_title(markdown: str) -> str:
    """A sub-benchmark's own Markdown less its title line and the blank line after it."""
    return markdown.split("\n", 2)[2].strip()


def _context_editing_section(ce: dict[str, Any]) -> list[str]:
    return [
        "",
        "## 5. Context editing",
        "",
        "From `python -m benchmarks.context_editing` (also in `context_editing.md`):",
        "",
        _without_title(ce["markdown"]),
    ]


def _recovery_section(rec: dict[str, Any] | None) -> list[str]:
    """Always present: the recovery run's table, or why there is none."""
    out = ["", "## 6. Recovery", ""]
    if rec and rec.get("markdown"):
        out += [
            "From `python -m benchmarks.recovery` (also in `recovery.md`):",
            "",
            _without_title(rec["markdown"]),
        ]
    else:
        out.append((rec or {}).get("note", "not run"))
    return out


def to_markdown(fig: dict[str, Any]) -> str:
    """``results/README.md``: the summary table, then one section per measurement run."""
    out = _header(fig)
    step = fig.get("step")
    if step:
        out += _step_section(step, fig.get("step_http"))
    thr = fig.get("throughput")
    if thr:
        out += _throughput_section(thr)
    flat = fig.get("flat")
    if flat:
        out += _flat_section(flat)
    concs = fig.get("concurrency", [])
    if concs:
        out += _concurrency_section(concs, fig.get("concurrency_notes", []))
    ce = fig.get("context_editing")
    if ce:
        out += _context_editing_section(ce)
    out += _recovery_section(fig.get("recovery"))
    if fig.get("chart"):
        out += ["", f"![benchmarks]({fig['chart']})"]
    return "\n".join(out) + "\n"


def chart(fig: dict[str, Any], path: Path) -> bool:
    """Write the PNG; False (with a note printed) when matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(
            "note: matplotlib is not installed, so no chart was drawn "
            "(pip install matplotlib, then run again)"
        )
        return False
    panels = [k for k in ("step", "throughput", "flat", "concurrency") if fig.get(k)]
    if not panels:
        return False
    f, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.8))
    axes = list(axes) if len(panels) > 1 else [axes]
    for ax, key in zip(axes, panels, strict=True):
        if key == "step":
            s = fig["step"]
            labels = ["loopline", "LangChain", f"{s['floor']['hops_per_step']} raw hops"]
            p50 = [s["loopline"]["p50_ms"], s["langchain"]["p50_ms"], s["floor"]["p50_ms"]]
            p99 = [s["loopline"]["p99_ms"], s["langchain"]["p99_ms"], s["floor"]["p99_ms"]]
            xs = range(len(labels))
            ax.bar([x - 0.2 for x in xs], p50, 0.4, label="p50")
            ax.bar([x + 0.2 for x in xs], p99, 0.4, label="p99")
            ax.set_xticks(list(xs), labels)
            ax.set_ylabel("ms per step")
            ax.set_title("Step latency")
            ax.legend()
        elif key == "throughput":
            t = fig["throughput"]
            ax.bar(
                ["loopline", "LangChain"],
                [t["loopline_steps_s"], t["langchain_steps_s"]],
                color=["tab:blue", "tab:orange"],
            )
            ax.set_ylabel("steps / s")
            ax.set_title(f"Throughput ({t['tasks']} tasks)")
        elif key == "flat":
            rows = fig["flat"]["rows"]
            steps = [r["step"] for r in rows]
            ax.plot(steps, [r["event_bytes"] for r in rows], "o-", label="loopline event bytes")
            ax.plot(
                steps,
                [r["langchain_state_bytes"] for r in rows],
                "s-",
                label="whole history (LangChain state)",
            )
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlabel("step")
            ax.set_ylabel("bytes per step")
            ax.set_title("Bytes as history grows")
            ax.legend(fontsize=7)
        elif key == "concurrency":
            cs = [c for c in fig["concurrency"] if "loopline_s" in c]
            labels = [f"N={c['n']:,}" for c in cs]
            xs = range(len(cs))
            ax.bar([x - 0.27 for x in xs], [c["loopline_s"] for c in cs], 0.27, label="loopline")
            ax.bar(
                list(xs),
                [c.get("langchain_s") or 0 for c in cs],
                0.27,
                label="LangChain in-process",
            )
            ax.bar([x + 0.27 for x in xs], [c["ideal_s"] for c in cs], 0.27, label="ideal")
            ax.set_xticks(list(xs), labels)
            ax.set_ylabel("seconds to finish")
            ax.set_title("Concurrent tasks, 1 s model")
            ax.legend()
    f.tight_layout()
    f.savefig(path, dpi=110)
    plt.close(f)
    return True
