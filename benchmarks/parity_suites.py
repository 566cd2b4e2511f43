"""A reference project's own agent tests, run on LangChain and again on loopline.

``python -m benchmarks.parity_suites --suite langchain|deepagents [--source DIR] [--install]
[--subset acceptance] [--redis-url URL]``:

1. takes the suite's tests from its sdist on PyPI (``pip download --no-deps --no-binary
   :all:``; for LangChain the installed version), downloaded into a cache outside the
   repository (``$LOOPLINE_PARITY_CACHE``, default ``~/.cache/loopline-parity``) and
   unpacked; or, with ``--source DIR``, from a local checkout of the suite's repository (the
   whole repository, or the package's own folder in it), at the version its
   ``pyproject.toml`` declares. A suite whose tests are not there is refused, with that
   reason (deepagents' sdist ships none: its tests come from a checkout);
2. with ``--install``, makes the suite's virtual environment in the cache, which sees this
   one's packages (``--system-site-packages`` plus this interpreter's site directories), and
   installs the suite's test dependencies there (for a checkout, also the suite's package
   from PyPI at the checkout's version), so this environment is left as it is;
3. runs pytest on the suite's tests twice: as they are (LangChain's side), and with
   ``benchmarks.parity_swap`` (``create_agent`` and, for LangChain, its two natively run
   middleware classes rebound to loopline's; see that module for the blockbuster guard);
   loopline's services in-process on its embedded server, or on ``--redis-url`` (under a
   key prefix of the run's own, deleted afterwards). Each run records every test's outcome
   (``benchmarks.parity_record``);
4. prints the tests passing on LangChain and, of those, the ones passing on loopline, and
   writes ``benchmarks/results/parity_<suite>.json`` (per test) and ``parity_<suite>.md``
   (the figures, per file, and the failures sorted into root causes by
   ``benchmarks.parity_causes``).

``--report-only`` rewrites the summary from the cached runs. The suites' test files stay in
the cache; nothing of theirs is written into the repository.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import json
import os
import subprocess
import sys
import tarfile
import time
import uuid
import venv
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.parity_causes import Cause, classify, error_of
from benchmarks.stack import REPO_ROOT

CACHE = Path(os.environ.get("LOOPLINE_PARITY_CACHE", Path.home() / ".cache" / "loopline-parity"))
RESULTS = REPO_ROOT / "benchmarks" / "results"


# LangChain's side; loopline's; loopline's again with threads scoped to their checkpointer
# (the diagnostic of ``benchmarks.parity_swap``: it tells thread leaks from other causes).
SIDES = ("reference", "loopline", "scoped")


class Refused(SystemExit):
    """A suite that cannot be run as asked, with the reason."""


@dataclass(frozen=True)
class Suite:
    name: str
    dist: str
    tests: str  # the test folder inside the sdist (or the package's folder of a checkout)
    requirements: tuple[str, ...]
    pytest_args: tuple[str, ...] = ()
    # Issue 29's acceptance: the suite's tests of these files must pass on loopline.
    acceptance: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    # Where the package lives in its repository (a checkout given with ``--source``).
    package: str = ""
    # The suite's virtual environment in the cache: its own where its installs (the suite's
    # package and its dependencies) would change what another suite's tests see.
    environment: str = "venv"


@dataclass(frozen=True)
class Tests:
    """Where a suite's tests were found."""

    root: Path  # pytest runs here; the suite's ``tests`` folder is under it
    version: str | None  # the suite's version there (``None``: the installed one)
    origin: str  # said in the summary
    checkout: bool  # from a local checkout (its package is installed at ``version``)


SUITES = {
    "langchain": Suite(
        name="langchain",
        dist="langchain",
        tests="tests/unit_tests/agents",
        # The sdist's ``test`` dependency group, less what this environment already has.
        requirements=(
            "pytest-mock",
            "syrupy>=5.0.0,<6.0.0",
            "blockbuster>=1.5.26,<1.6.0",
            "langchain-tests>=1.1.9,<2.0.0",
            "pytest-socket>=0.6.0,<1.0.0",
            "toml>=0.10.2,<1.0.0",
        ),
        acceptance=(
            "middleware/implementations/test_todo.py",
            "middleware/implementations/test_context_editing.py",
            "test_agent_streaming.py",
            "middleware/core/test_wrap_model_call_state_update.py",
            "test_agent_name.py",
            "test_response_format.py",
            "test_responses.py",
            "test_responses_spec.py",
        ),
        # The conftest's default: the in-memory checkpointer and store only.
        env={"LANGGRAPH_TEST_FAST": "true"},
    ),
    "deepagents": Suite(
        name="deepagents",
        dist="deepagents",
        tests="tests/unit_tests",
        # The checkout's ``test`` dependency group, less what this environment already has.
        requirements=("pytest-socket", "pytest-mock", "syrupy", "pytest-cov"),
        pytest_args=("--disable-socket", "--allow-hosts=127.0.0.1,localhost"),
        # Issue 29 names them: the tests that build and run deep agents.
        acceptance=(
            "test_end_to_end.py",
            "test_subagents.py",
            "test_deep_agent_streaming.py",
            "test_file_system_tools.py",
            "test_file_system_tools_async.py",
            "middleware/test_memory_middleware.py",
            "middleware/test_memory_middleware_async.py",
            "middleware/test_skills_middleware.py",
            "middleware/test_skills_middleware_async.py",
            "middleware/test_rubric_middleware.py",
            "smoke_tests/test_system_prompt.py",
        ),
        package="libs/deepagents",
        environment="venv-deepagents",
    ),
}


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def fetch(suite: Suite, source: Path | None = None) -> Tests:
    """The suite's tests: from the checkout at ``source``, else from PyPI's sdist."""
    if source is not None:
        return from_checkout(suite, source)
    root = from_sdist(suite)
    return Tests(root, _version(suite.dist), f"PyPI's sdist `{root.name}`", checkout=False)


def from_checkout(suite: Suite, source: Path) -> Tests:
    """The package's folder in a checkout of the suite's repository (``source`` itself, or
    ``source/<package>``), at the version its ``pyproject.toml`` declares."""
    import tomllib

    if not source.is_dir():
        raise Refused(f"--source {source}: no such directory")
    root = source / suite.package if suite.package and (source / suite.package).is_dir() else source
    if not (root / suite.tests).is_dir():
        where = f" nor in {suite.package}/" if suite.package else ""
        raise Refused(f"--source {source}: no {suite.tests}/ there{where}")
    pyproject = root / "pyproject.toml"
    if not pyproject.is_file():
        raise Refused(f"--source {source}: no pyproject.toml beside {suite.tests}/")
    project = tomllib.loads(pyproject.read_text()).get("project", {})
    if project.get("name") != suite.dist or not project.get("version"):
        raise Refused(
            f"--source {source}: {pyproject} declares project "
            f"{project.get('name')!r} version {project.get('version')!r}, not {suite.dist}'s"
        )
    version = str(project["version"])
    folder = f"{suite.package}/{suite.tests}" if root != source else suite.tests
    origin = f"a checkout of {suite.dist}'s repository at version {version} (`{folder}/`)"
    return Tests(root, version, origin, checkout=True)


def from_sdist(suite: Suite) -> Path:
    """The unpacked sdist's root, downloaded once; refused when it holds no tests."""
    version = _version(suite.dist)
    spec = f"{suite.dist}=={version}" if version else suite.dist
    downloads = CACHE / "sdists"
    found = sorted(downloads.glob(f"{suite.dist}-{version or '*'}.tar.gz"))
    if not found:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
             spec, "-d", str(downloads)],
            check=True,
        )  # fmt: skip
        found = sorted(downloads.glob(f"{suite.dist}-{version or '*'}.tar.gz"))
    sdist = found[-1]
    root = CACHE / "src" / sdist.name.removesuffix(".tar.gz")
    if not root.exists():
        with tarfile.open(sdist) as archive:
            archive.extractall(root.parent, filter="data")
    if not (root / suite.tests).is_dir():
        shipped = sorted({p.relative_to(root).parts[0] for p in root.iterdir()})
        raise Refused(
            f"{sdist.name} (PyPI's sdist) ships no {suite.tests}/ (it holds "
            f"{', '.join(shipped)}): {suite.name}'s tests are not on PyPI; give a checkout "
            "of its repository with --source DIR"
        )
    return root


def install(suite: Suite, tests: Tests) -> Path:
    """The suite's environment in the cache (this one's packages visible) with the suite's
    test dependencies, and for a checkout the suite's package at the checkout's version."""
    env_dir = CACHE / suite.environment
    python = env_dir / "bin" / "python"
    if not python.exists():
        venv.create(env_dir, system_site_packages=True, with_pip=True)
        _see_this_environment(python)
    pinned = [f"{suite.dist}=={tests.version}"] if tests.checkout else []
    subprocess.run([str(python), "-m", "pip", "install", *pinned, *suite.requirements], check=True)
    return python


def _see_this_environment(python: Path) -> None:
    """A ``.pth`` that adds this interpreter's site directories (with their own ``.pth``
    files: editable installs) to the cache environment, venv or not."""
    import site

    dirs = [*site.getsitepackages(), site.getusersitepackages()]
    target = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    lines = [f"import site; site.addsitedir({d!r})" for d in dirs if Path(d).is_dir()]
    (Path(target) / "loopline_parity_base.pth").write_text("\n".join(lines) + "\n")


def _python(suite: Suite) -> str:
    cached = CACHE / suite.environment / "bin" / "python"
    return str(cached) if cached.exists() else sys.executable


def _check_installed(suite: Suite, tests: Tests) -> None:
    """A checkout's tests run against its own version of the package: refused otherwise."""
    if not tests.checkout:
        return
    found = subprocess.run(
        [_python(suite), "-c",
         f"import importlib.metadata as m; print(m.version({suite.dist!r}))"],
        capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    if found != tests.version:
        raise Refused(
            f"the checkout is {suite.dist} {tests.version}, the suite's environment has "
            f"{found or 'none'}: run with --install"
        )


def run_side(suite: Suite, root: Path, side: str, args: argparse.Namespace) -> Path:
    """One pytest run over the suite's tests; the per-test outcomes' JSON file."""
    record = CACHE / "results" / f"{_name(suite, args)}-{side}.json"
    record.parent.mkdir(parents=True, exist_ok=True)
    targets = [f"{suite.tests}/{t}" for t in _selected(suite, args)] or [suite.tests]
    command = [
        _python(suite), "-m", "pytest", "-p", "no:cacheprovider", "-o", "addopts=", "-q",
        "--timeout", str(args.timeout), *suite.pytest_args,
        "-p", "benchmarks.parity_record", "--parity-record", str(record),
    ]  # fmt: skip
    if side in ("loopline", "scoped"):
        command += ["-p", "benchmarks.parity_swap", "--parity-suite", suite.name,
                    "--parity-blockbuster", args.blockbuster]  # fmt: skip
    if side == "scoped":
        command.append("--parity-scoped-threads")
    env = {**os.environ, **suite.env}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    env.pop("REDIS_URL", None)
    prefix = f"parity-{uuid.uuid4().hex[:8]}"
    if side != "reference" and args.redis_url:
        command += ["--parity-redis-url", args.redis_url]
        env["LOOPLINE_PREFIX"] = prefix
    log = CACHE / "results" / f"{_name(suite, args)}-{side}.log"
    print(f"[{side}] {' '.join(command[1:])} {' '.join(targets)}  (log: {log})", flush=True)
    started = time.monotonic()
    with log.open("w") as out:
        subprocess.run([*command, *targets], cwd=root, env=env, stdout=out, stderr=out)
    if side != "reference" and args.redis_url:
        _delete_prefix(args.redis_url, prefix)
    print(f"[{side}] {time.monotonic() - started:.0f} s", flush=True)
    if side != "reference":
        with log.open() as written:  # the swap's settings, as the plugin printed them
            print(*(line.rstrip() for line in written if line.startswith("parity swap:")),
                  sep="\n")  # fmt: skip
    return record


def _delete_prefix(url: str, prefix: str) -> None:
    """The run's keys, gone from a shared server."""
    import redis

    client = redis.Redis.from_url(url)
    try:
        for batch in _batches(client.scan_iter(match=f"{prefix}*", count=1000), 500):
            client.unlink(*batch)
    finally:
        client.close()


def _batches(items: Any, size: int) -> Any:
    batch: list[Any] = []
    for item in items:
        batch.append(item)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def _selected(suite: Suite, args: argparse.Namespace) -> list[str]:
    if args.subset == "acceptance":
        return list(suite.acceptance)
    return list(args.tests or ())


# -- the report ------------------------------------------------------------------------


@dataclass
class Figures:
    reference_passed: list[str]
    both_passed: list[str]
    failures: dict[str, dict[str, Any]]  # nodeid -> the loopline side's record

    def of(self, keep: Any) -> tuple[int, int]:
        """(passing on LangChain, of those on loopline) among the tests ``keep`` keeps."""
        return (
            sum(1 for k in self.reference_passed if keep(k)),
            sum(1 for k in self.both_passed if keep(k)),
        )


def compare(reference: dict[str, Any], loopline: dict[str, Any]) -> Figures:
    passed = sorted(k for k, v in reference.items() if v["outcome"] == "passed")
    both = [k for k in passed if loopline.get(k, {}).get("outcome") == "passed"]
    missing = {"outcome": "not run", "error": "not run on loopline's side"}
    failures = {k: loopline.get(k, missing) for k in passed if k not in set(both)}
    return Figures(passed, both, failures)


def _name(suite: Suite, args: argparse.Namespace) -> str:
    """The suite's name, with the selection when it is not the whole suite: a subset's runs
    and summary never overwrite the whole suite's."""
    name = suite.name
    if args.subset:
        name = f"{name}_{args.subset}"
    elif args.tests:
        name = f"{name}_selected"
    return name if args.blockbuster == "threads" else f"{name}_blockbuster-{args.blockbuster}"


def _load(name: str, side: str) -> dict[str, Any]:
    path = CACHE / "results" / f"{name}-{side}.json"
    if not path.exists():
        if side == "scoped":
            return {}
        raise SystemExit(f"no {side} run yet ({path}): run it with --side {side} or all")
    return dict(json.loads(path.read_text()))


def _sentence(pair: tuple[int, int], what: str) -> str:
    return f"{pair[1]} of the {pair[0]} {what} that pass on LangChain pass on loopline"


def _file_of(nodeid: str, suite: Suite) -> str:
    return nodeid.split("::")[0].removeprefix(suite.tests + "/")


def report(suite: Suite, tests: Tests, args: argparse.Namespace) -> list[str]:
    """Writes the per-test JSON and the markdown summary; the headline figures."""
    name = _name(suite, args)
    reference, loopline, scoped = (_load(name, side) for side in SIDES)
    figures = compare(reference, loopline)
    causes = classify(figures.failures, scoped)
    cause_of = {k: c.title for c in causes for k in c.tests}
    per_test = {
        k: {"langchain": v["outcome"], "loopline": loopline.get(k, {}).get("outcome", "not run"),
            "loopline_scoped_threads": scoped.get(k, {}).get("outcome", "not run"),
            "builds_agent": loopline.get(k, {}).get("agent", False),
            "error": loopline.get(k, {}).get("error", ""), "cause": cause_of.get(k, "")}
        for k, v in sorted(reference.items())
    }  # fmt: skip
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"parity_{name}.json").write_text(json.dumps(per_test, indent=1))
    headline = _headline(suite, figures, loopline, scoped)
    if args.blockbuster == "threads":  # the figure with the guard as the suite sets it
        kept = CACHE / "results" / f"{name}_blockbuster-keep-loopline.json"
        if kept.exists():
            pair = compare(reference, json.loads(kept.read_text())).of(lambda k: True)
            headline.append(
                _sentence(pair, "tests")
                + " with blockbuster as the suite's conftest sets it (`--blockbuster keep`)"
            )
    errors = {k: error_of(k, figures.failures, scoped) for k in figures.failures}
    markdown = _markdown(suite, tests, figures, causes, errors, headline, args)
    (RESULTS / f"parity_{name}.md").write_text(markdown)
    return headline


def _headline(
    suite: Suite, figures: Figures, loopline: dict[str, Any], scoped: dict[str, Any]
) -> list[str]:
    lines = [
        _sentence(figures.of(lambda k: True), "tests"),
        _sentence(figures.of(lambda k: loopline.get(k, {}).get("agent", False)),
                  "tests that build an agent (call `create_agent`)"),
        _sentence(figures.of(lambda k: _file_of(k, suite) in suite.acceptance),
                  "tests in issue 29's acceptance files"),
    ]  # fmt: skip
    if scoped:
        diagnostic = compare(_passed_only(figures.reference_passed), scoped)
        lines.append(
            _sentence(diagnostic.of(lambda k: True), "tests")
            + " with thread ids scoped to their checkpointer (diagnostic)"
        )
    return lines


def _passed_only(nodeids: list[str]) -> dict[str, Any]:
    return {k: {"outcome": "passed"} for k in nodeids}


def _markdown(
    suite: Suite,
    tests: Tests,
    figures: Figures,
    causes: list[Cause],
    errors: dict[str, str],
    headline: list[str],
    args: argparse.Namespace,
) -> str:
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True
    ).stdout.strip()
    server = f"`{args.redis_url}`" if args.redis_url else "its embedded server"
    server = f"loopline's services in-process on {server}"
    swap = "`create_agent` → `loopline.create_agent`" + (
        "; `TodoListMiddleware`, `ContextEditingMiddleware`, `ClearToolUsesEdit` → "
        "`loopline.middleware`'s"
        if suite.name == "langchain"
        else " (`deepagents.graph`, `deepagents.middleware.subagents`, "
        "`deepagents.middleware.rubric`, and the test modules' own imports)"
    )
    where = (
        f"{tests.origin}, in the cache, not in this repository"
        if tests.checkout
        else f"{tests.origin} (`{suite.tests}/`, in the cache, not in this repository)"
    )
    lines = [
        f"# {suite.name}'s own agent tests on loopline",
        "",
        f"`python -m benchmarks.parity_suites --suite {suite.name}"
        f"{' --source DIR' if tests.checkout else ''}`"
        f"{' --subset ' + args.subset if args.subset else ''}, "
        f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC, tree `{commit}`. Tests "
        f"from {where}, pytest `--timeout {args.timeout}`; {server}. The swap "
        f"(`benchmarks/parity_swap.py`): {swap}. LangChain's `blockbuster` guard on "
        f"loopline's side: `{args.blockbuster}` (on in the test's event loop; off in "
        "loopline's background threads and in the private loop of its sync `invoke`, "
        "where LangChain runs no loop).",
        "",
        *[f"- **{line}**" for line in headline],
        "",
        "The diagnostic run rebinds each agent's thread ids to its checkpointer instance "
        "(as LangGraph keeps them); a test that passes there and fails as is counts under "
        "the thread cause below. With the blockbuster guard untouched, the tests it fails "
        "fail with `BlockingError` raised inside loopline's own sync entry points (see "
        "`--blockbuster keep`'s log for each call).",
        "",
        "## Per file",
        "",
        "| file | pass on LangChain | of those on loopline | acceptance (issue 29) |",
        "|---|---:|---:|---|",
    ]
    for name in sorted({_file_of(k, suite) for k in figures.reference_passed}):
        ref, ok = figures.of(lambda k, name=name: _file_of(k, suite) == name)
        mark = "yes" if name in suite.acceptance else ""
        lines.append(f"| `{name}` | {ref} | {ok} | {mark} |")
    lines += [
        "",
        "## Failures by root cause",
        "",
        "Each test that passes on LangChain and fails on loopline, sorted by loopline's "
        "error (the diagnostic run's where it fails there too: the thread leak masks other "
        "causes); rules in `benchmarks/parity_causes.py`; a test counts once, under its "
        "first matching rule. The error shown below is the one it was sorted by.",
        "",
        "| root cause | tests | examples | where in loopline |",
        "|---|---:|---|---|",
    ]
    for cause in causes:
        examples = "<br>".join(f"`{k.split('/')[-1]}`" for k in cause.tests[:3])
        lines.append(f"| {cause.title} | {len(cause.tests)} | {examples} | {cause.where} |")
    lines += ["", "## Every failing test", ""]
    for cause in causes:
        lines += [f"### {cause.title} ({len(cause.tests)})", ""]
        for nodeid in cause.tests:
            error = errors[nodeid].splitlines()[0][:160] if errors[nodeid] else "(no error)"
            lines.append(f"- `{nodeid.removeprefix(suite.tests + '/')}`: {error}")
        lines.append("")
    return "\n".join(lines)


def _write_refusal(suite: Suite, reason: str) -> None:
    """The summary of a suite that cannot be run: why, and when that was found."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"parity_{suite.name}.md").write_text(
        f"# {suite.name}'s own agent tests on loopline\n\n"
        f"`python -m benchmarks.parity_suites --suite {suite.name}`, "
        f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC: **refused**: {reason}.\n"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--suite", choices=sorted(SUITES), required=True)
    parser.add_argument(
        "--source", type=Path, default=None,
        help="a local checkout of the suite's repository to take the tests from "
        "(default: PyPI's sdist)",
    )  # fmt: skip
    parser.add_argument("--install", action="store_true", help="install the test deps first")
    parser.add_argument("--subset", choices=("acceptance",), default=None)
    parser.add_argument("--tests", nargs="*", help="files or ids under the suite's test folder")
    parser.add_argument("--redis-url", default=None, help="default: the embedded server")
    parser.add_argument("--timeout", type=int, default=60, help="per test, seconds")
    parser.add_argument("--blockbuster", choices=("threads", "keep", "off"), default="threads")
    parser.add_argument(
        "--side", choices=("all", "reference", "loopline", "scoped"), default="all",
        help="which runs (all: the three)",
    )  # fmt: skip
    parser.add_argument("--report-only", action="store_true", help="summarise cached runs")
    args = parser.parse_args()
    suite = SUITES[args.suite]
    try:
        tests = fetch(suite, args.source)
        if args.install:
            install(suite, tests)
        if not args.report_only:
            _check_installed(suite, tests)
    except Refused as refused:
        print(f"refused: {refused}", file=sys.stderr)
        _write_refusal(suite, str(refused))
        raise SystemExit(2) from None
    if not args.report_only:
        for side in SIDES:
            if args.side in ("all", side):
                run_side(suite, tests.root, side, args)
    print("\n".join(report(suite, tests, args)))
    print(f"written: {RESULTS / f'parity_{_name(suite, args)}.md'}")


if __name__ == "__main__":
    main()
