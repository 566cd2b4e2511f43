"""A pytest plugin that writes each test's outcome and first error line to a JSON file.

``pytest -p benchmarks.parity_record --parity-record out.json``: ``{nodeid: {"outcome":
"passed" | "failed" | "error" | "skipped", "error": "<exception: first line>", "agent":
<whether the test built a loopline agent>}}``, what ``benchmarks.parity_suites`` compares
and sorts into root causes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

_results: dict[str, dict[str, Any]] = {}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.getgroup("parity").addoption("--parity-record", default=None)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    entry = _results.setdefault(report.nodeid, {"outcome": "passed", "error": "", "agent": False})
    if ("loopline_agent", True) in report.user_properties:
        entry["agent"] = True
    if report.failed:
        # A failure in setup or teardown is an error of the test, as pytest counts it.
        entry["outcome"] = "failed" if report.when == "call" else "error"
        if not entry["error"]:
            entry["error"] = _first_error_line(report)
    elif report.skipped and entry["outcome"] == "passed":
        entry["outcome"] = "skipped"


def pytest_sessionfinish(session: pytest.Session) -> None:
    path = session.config.getoption("--parity-record")
    if path:
        Path(path).write_text(json.dumps(_results, indent=1, sort_keys=True))


def _first_error_line(report: pytest.TestReport) -> str:
    """The exception's type and message (crash line), at most 600 characters."""
    crash = getattr(report.longrepr, "reprcrash", None)
    text = crash.message if crash is not None else str(report.longrepr)
    return text.strip()[:600]
