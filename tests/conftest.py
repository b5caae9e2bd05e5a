"""Shared fixtures for every test, and the per-file progress line of `make test`.

Factories rather than ready-made objects, so a test says what it needs:

- `make_home(name="home")`: a new, initialised home under the test's tmp_path;
- `populated_home`: a copy of a home holding a few memories in two
  namespaces, a link and an archived memory (built once per session);
- `open_substrate(home, **kw)`: a Substrate (short-lived unless asked),
  closed when the test ends;
- `mcp_server(home)`: the real `mnemolog mcp` in a subprocess, a
  tests.support.mcp_client.Client talking to it, closed when the test ends;
- `cli`: the `mnemolog` command (tests.support.cli.Cli): `cli(home, *argv)`
  in process, `cli.json` / `cli.ok` for `--json` documents, `cli.process`
  for a real process where a process is the point. No test file keeps a
  wrapper of its own.

`--file-progress` prints one line per test file as its last test finishes
(with pytest-xdist too), so a long run shows where it is. The tests listed
in tests/slow_tests.txt (measured, not guessed) are marked `slow`, which
`make test-fast` leaves out. Hypothesis runs without deadlines: a test
asserts what its code does, never how long it took on a shared machine;
with CI set, its examples are derandomized (profile "ci").

No MNEMOLOG_* variable of the shell that runs the suite reaches a test. The
suite runs with embeddings off (MNEMOLOG_EMBED=off, inherited by the CLI
subprocesses too): most tests assert exactly what BM25 recall returns,
and a home that embeds recalls in hybrid mode, which also ranks the nearest
vectors. The tests of embeddings and hybrid recall pass an embedder to the
Substrate (`embedder=`, which wins over the variable) or clear the variable.
"""

from __future__ import annotations

import os
import shutil
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

from mnemolog.substrate.api import Substrate
from mnemolog.substrate.home import Home, init_home
from tests.support.cli import Cli
from tests.support.mcp_client import Client

# Locally each run draws new examples (how CI once found an atomiser bug, now pinned as an
# @example); under CI (the CI variable set) the examples are derandomized, fixed by each
# test's source, so a red CI run means the change broke something, never that the search
# was lucky that time. A failure prints its reproduce blob either way.
settings.register_profile("mnemolog", deadline=None, print_blob=True)
settings.register_profile("ci", settings.get_profile("mnemolog"), derandomize=True)
settings.load_profile("ci" if os.environ.get("CI") else "mnemolog")

SLOW_TESTS = Path(__file__).with_name("slow_tests.txt")

# The operator's own settings (a home, a model, a tenant) never reach a test: each test sets
# what it needs (monkeypatch, or `env=` of the cli fixture).
for _name in [k for k in os.environ if k.startswith("MNEMOLOG_")]:
    del os.environ[_name]
os.environ["MNEMOLOG_EMBED"] = "off"

# -- fixtures ---------------------------------------------------------------------------

POPULATED = [
    ("The deploy at 09:05 raised the worker count", {"title": "Deploy", "tags": ["ops"]}),
    ("Rollback at 09:41 fixed checkout", {"namespace": "team/checkout", "kind": "decision"}),
    ("Alice prefers terse status updates", {"kind": "user", "confidence": 0.9}),
    ("The old runbook said to restart by hand", {"namespace": "team/checkout"}),
]


@pytest.fixture
def make_home(tmp_path: Path) -> Callable[..., Home]:
    """A factory of initialised homes under tmp_path (each name once)."""

    def make(name: str = "home", key_name: str = "test") -> Home:
        init_home(tmp_path / name, key_name=key_name)
        return Home(tmp_path / name)

    return make


@pytest.fixture(scope="session")
def _populated_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("populated") / "home"
    init_home(root, key_name="test")
    with Substrate.open(root, long_lived=False, worker=False) as sub:
        ids = [sub.store(text, **kw)["id"] for text, kw in POPULATED]
        sub.link(ids[1], ids[0], "related_to")
        sub.archive(ids[3], reason="superseded by the rollback note")
    return root


@pytest.fixture
def populated_home(_populated_template: Path, tmp_path: Path) -> Home:
    """A home of its own holding POPULATED (the last one archived, a link from the second to the first)."""
    copy = tmp_path / "populated"
    shutil.copytree(_populated_template, copy, ignore=shutil.ignore_patterns(".lock", ".want-*"))
    return Home(copy)


@pytest.fixture
def open_substrate() -> Iterator[Callable[..., Substrate]]:
    """Open Substrates (long_lived=False unless given), all closed when the test ends."""
    opened: list[Substrate] = []

    def open_(home: Home | Path, **kw: Any) -> Substrate:
        kw.setdefault("long_lived", False)
        s = Substrate.open(home if isinstance(home, Home) else Home(home), **kw)
        opened.append(s)
        return s

    yield open_
    for s in opened:
        s.close()


@pytest.fixture(scope="session")
def cli() -> Cli:
    """Run `mnemolog`: in process unless `.process` (see tests/support/cli.py)."""
    return Cli()


@pytest.fixture
def mcp_server() -> Iterator[Callable[[Home | Path], Client]]:
    """Start `mnemolog mcp` on a home; every server started is closed when the test ends."""
    started: list[Client] = []

    def start(home: Home | Path) -> Client:
        c = Client(home.root if isinstance(home, Home) else home)
        started.append(c)
        return c

    yield start
    for c in started:
        if c.p.poll() is None:
            c.close()


# -- per-file progress --------------------------------------------------------------------


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--file-progress", action="store_true", help="Print a line as each test file finishes.")


class FileProgress:
    """Counts reports per file; prints `file: N passed, M failed (s)` when a file is complete."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.total: Counter[str] = Counter()
        self.finished: Counter[str] = Counter()
        self.outcomes: defaultdict[str, Counter[str]] = defaultdict(Counter)
        self.first: dict[str, float] = {}
        self.known = False

    def expect(self, nodeids: list[str]) -> None:
        if self.known:
            return
        self.known = True
        for n in nodeids:
            self.total[n.split("::")[0]] += 1

    def report(self, r: pytest.TestReport) -> None:
        f = r.nodeid.split("::")[0]
        self.first.setdefault(f, time.monotonic())
        if r.when == "call" or (r.when == "setup" and r.outcome != "passed"):
            self.outcomes[f][r.outcome] += 1
        if r.when != "teardown":
            return
        self.finished[f] += 1
        if self.known and self.finished[f] == self.total[f]:
            tr = self.config.pluginmanager.get_plugin("terminalreporter")
            counts = ", ".join(f"{n} {k}" for k, n in sorted(self.outcomes[f].items()))
            if tr is not None:
                tr.ensure_newline()
                tr.write_line(f"{f}: {counts} ({time.monotonic() - self.first[f]:.1f} s)")


_PROGRESS: list[FileProgress] = []


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("file_progress") and not hasattr(config, "workerinput"):
        _PROGRESS.append(FileProgress(config))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    slow = {
        line.strip()
        for line in SLOW_TESTS.read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    }
    for item in items:
        if item.nodeid in slow or item.nodeid.split("[")[0] in slow:
            item.add_marker(pytest.mark.slow)


def pytest_collection_finish(session: pytest.Session) -> None:
    if session.items:  # under xdist the controller collects nothing; the workers report below
        for p in _PROGRESS:
            p.expect([i.nodeid for i in session.items])


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node: Any, ids: list[str]) -> None:
    for p in _PROGRESS:
        p.expect(ids)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    for p in _PROGRESS:
        p.report(report)
