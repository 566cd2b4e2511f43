"""The reference-suite harness (``benchmarks.parity_suites``): its figures, its sorting of
failures into causes, and the swap plugin's rebinding, run by pytest in a child process on
a test module that imports LangChain's names as LangChain's own tests do."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from benchmarks import parity_suites
from benchmarks.parity_causes import RULES, classify, error_of
from benchmarks.parity_suites import compare
from benchmarks.stack import REPO_ROOT


def test_figures_count_only_tests_passing_on_langchain() -> None:
    reference = {
        "a": {"outcome": "passed"},
        "b": {"outcome": "passed"},
        "c": {"outcome": "failed"},  # fails on LangChain: out of the count
        "d": {"outcome": "passed"},
    }
    loopline = {
        "a": {"outcome": "passed"},
        "b": {"outcome": "failed", "error": "boom"},
        "c": {"outcome": "passed"},
    }
    figures = compare(reference, loopline)
    assert figures.of(lambda k: True) == (3, 1)
    assert sorted(figures.failures) == ["b", "d"]
    assert figures.failures["d"]["outcome"] == "not run"


def test_causes_use_the_scoped_run_to_tell_thread_leaks_apart() -> None:
    failures = {
        "t::leak": {"outcome": "failed", "error": "TaskFailedError: thread t is busy"},
        "t::masked": {"outcome": "failed", "error": "TaskFailedError: thread t is busy"},
        "t::stream": {"outcome": "failed", "error": "AttributeError: no attribute 'stream_events'"},
        "t::new": {"outcome": "failed", "error": "ZeroDivisionError: 12 by 0"},
    }
    scoped = {
        "t::leak": {"outcome": "passed"},
        "t::masked": {"outcome": "failed", "error": "x: the model streamed no message"},
        "t::stream": {"outcome": "failed", "error": "AttributeError: no attribute 'stream_events'"},
        "t::new": {"outcome": "failed", "error": "ZeroDivisionError: 12 by 0"},
    }
    causes = {c.title: c.tests for c in classify(failures, scoped)}
    thread_rule = next(r for r in RULES if r.scoped)
    assert causes[thread_rule.title] == ["t::leak"]
    # failing in both runs: sorted by the scoped run's error, which the leak did not mask
    assert error_of("t::masked", failures, scoped) == "x: the model streamed no message"
    streamed = next(title for title, tests in causes.items() if "t::masked" in tests)
    assert "streamed no message" in streamed
    assert any("t::stream" in tests and "stream_events" in t for t, tests in causes.items())
    assert causes["Other: ZeroDivisionError: N by N"] == ["t::new"]
    assert sum(len(tests) for tests in causes.values()) == len(failures)


SWAPPED_MODULE = """
from langchain.agents import create_agent
from langchain.agents.factory import create_agent as factory_create_agent
from langchain.agents.middleware import ContextEditingMiddleware, TodoListMiddleware

import loopline
import loopline.middleware


def test_names_bound_at_import_are_loopline_s():
    assert create_agent.__wrapped__ is loopline.create_agent
    assert factory_create_agent.__wrapped__ is loopline.create_agent
    assert TodoListMiddleware is loopline.middleware.TodoListMiddleware
    assert ContextEditingMiddleware is loopline.middleware.ContextEditingMiddleware


def test_a_function_level_import_is_loopline_s():
    from langchain.agents import create_agent as late

    assert late.__wrapped__ is loopline.create_agent
"""


def test_swap_rebinds_what_the_test_modules_imported(tmp_path: Path) -> None:
    (tmp_path / "test_swapped.py").write_text(SWAPPED_MODULE)
    record = tmp_path / "record.json"
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-o", "addopts=",
         "--disable-plugin-autoload", "-p", "benchmarks.parity_swap",
         "-p", "benchmarks.parity_record", "--parity-record", str(record),
         str(tmp_path / "test_swapped.py")],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "parity swap: create_agent -> loopline.create_agent (langchain)" in done.stdout
    outcomes = {k.split("::")[1]: v["outcome"] for k, v in json.loads(record.read_text()).items()}
    assert outcomes == {
        "test_names_bound_at_import_are_loopline_s": "passed",
        "test_a_function_level_import_is_loopline_s": "passed",
    }


def test_a_suite_whose_sdist_has_no_tests_is_refused_with_the_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An sdist (here a small one in a cache of the test's own) without the test folder."""
    package = tmp_path / "build" / "demo-0.1.0"
    (package / "demo").mkdir(parents=True)
    (package / "demo" / "__init__.py").write_text("")
    (tmp_path / "sdists").mkdir()
    with tarfile.open(tmp_path / "sdists" / "demo-0.1.0.tar.gz", "w:gz") as archive:
        archive.add(package, arcname="demo-0.1.0")
    monkeypatch.setattr(parity_suites, "CACHE", tmp_path)
    suite = parity_suites.Suite(name="demo", dist="demo", tests="tests/unit_tests", requirements=())
    with pytest.raises(
        parity_suites.Refused, match=r"ships no tests/unit_tests/ \(it holds demo\)"
    ):
        parity_suites.fetch(suite)


def test_a_suites_tests_come_from_a_checkout_at_its_declared_version(tmp_path: Path) -> None:
    """``--source``: the package's folder in a checkout of its repository (or the folder
    given), at the version its ``pyproject.toml`` declares; refused without the tests or
    when the checkout holds another project."""
    suite = parity_suites.Suite(
        name="demo", dist="demo", tests="tests/unit_tests", requirements=(), package="libs/demo"
    )
    package = tmp_path / "libs" / "demo"
    (package / "tests" / "unit_tests").mkdir(parents=True)
    (package / "pyproject.toml").write_text('[project]\nname = "demo"\nversion = "1.2.3"\n')
    for given in (tmp_path, package):
        tests = parity_suites.fetch(suite, given)
        assert (tests.root, tests.version, tests.checkout) == (package, "1.2.3", True)
    assert "libs/demo/tests/unit_tests/" in parity_suites.fetch(suite, tmp_path).origin
    (package / "pyproject.toml").write_text('[project]\nname = "other"\nversion = "1.0"\n')
    with pytest.raises(parity_suites.Refused, match="declares project 'other'"):
        parity_suites.fetch(suite, tmp_path)
    with pytest.raises(parity_suites.Refused, match=r"no tests/unit_tests/ there"):
        parity_suites.fetch(suite, tmp_path / "libs")
