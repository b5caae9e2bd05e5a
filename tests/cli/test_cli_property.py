"""A property over random command lines: a documented exit code (or an answer), never a traceback,
and the log's bytes unchanged unless the command succeeded.

Arguments are drawn hostile: lone surrogates, control characters, huge and
negative integers, deep and malformed JSON, ids that are not ids, names that
are not names. Commands that would run forever (mcp, worker without --once,
log tail --follow) or run user scripts (migrate) are left out.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.projections.kit import log_digest, new_home
from tests.support.cli import Cli

DOCUMENTED = {0, 1, 2, 3, 4, 5, 6, 7, 8, 64, 65}

hostile_text = st.one_of(
    st.text(max_size=40),
    st.text(alphabet=st.characters(codec=None, categories=["Cs", "Cc", "Zs", "L", "N"]), max_size=20),
    st.sampled_from(["", " ", "-", "--", "\x00", "a\udcff", "\ud800", "é", "x" * 3000, "{", "[]", "1e400"]),
)
ints = st.one_of(
    st.integers(-(2**70), 2**70).map(str), st.sampled_from(["0", "-1", "1", "9" * 30, "1.5", "x", ""])
)


def deep(n: int) -> str:
    return '{"a":' * n + "1" + "}" * n


json_text = st.one_of(
    st.recursive(
        st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=10),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
        max_leaves=10,
    ).map(lambda v: json.dumps(v, allow_nan=True)),
    st.sampled_from(['{"x":"\\ud800"}', '{"\\udfff":1}', deep(100), deep(20_000), "{", "nul\x00", "[1,2]"]),
)


@st.composite
def command(draw: st.DrawFn, ids: list[str], tmp: Path) -> list[str]:
    mid = draw(st.sampled_from(ids) | hostile_text)
    other = draw(st.sampled_from(ids) | hostile_text)
    opt: Any = lambda name, values: [name, draw(values)] if draw(st.booleans()) else []  # noqa: E731
    choices = [
        lambda: ["store", draw(hostile_text), *opt("--title", hostile_text), *opt("--tag", hostile_text),
                 *opt("--meta", json_text), *opt("--source", hostile_text), *opt("--confidence", ints),
                 *opt("--namespace", hostile_text), *opt("--kind", hostile_text), *opt("--id", hostile_text)],
        lambda: ["get", mid],
        lambda: ["update", mid, *opt("--content", hostile_text), *opt("--title", hostile_text),
                 *opt("--meta", json_text), *opt("--tag", hostile_text)],
        lambda: ["link", mid, other, *opt("--relation", hostile_text), *opt("--meta", json_text)],
        lambda: ["unlink", mid, other, *opt("--relation", hostile_text)],
        lambda: ["archive", mid, *opt("--reason", hostile_text)],
        lambda: ["restore", mid, *opt("--reason", hostile_text)],
        lambda: ["recall", draw(hostile_text), *opt("--limit", ints), *opt("--namespace", hostile_text),
                 *opt("--tag", hostile_text)],
        lambda: ["search", draw(hostile_text), *opt("--limit", ints)],
        lambda: ["list", *opt("--offset", ints), *opt("--limit", ints), *opt("--kind", hostile_text)],
        lambda: ["stats"],
        lambda: ["log", "show", *opt("--from", ints), *opt("--to", ints), *opt("--limit", ints),
                 *opt("--type", hostile_text)],
        lambda: ["log", "append", draw(st.sampled_from(["note.x", "memory.stored"]) | hostile_text),
                 "--data", draw(json_text)],
        lambda: ["log", "prove", draw(ints)],
        lambda: ["log", "consistency", draw(ints), draw(ints)],
        lambda: ["policy", "set", draw(hostile_text), *opt("--threshold", ints),
                 *opt("--max-atom-tokens", ints), *opt("--auto-atomise-mode", hostile_text)],
        lambda: ["policy", "get", draw(hostile_text)],
        lambda: ["atomise", mid, *opt("--max-atom-tokens", ints), *opt("--curator", hostile_text)],
        lambda: ["key", "show"],
        lambda: ["verify-bundle", str(tmp / "bundle.tar"), *opt("--trusted-key", hostile_text)],
        lambda: [draw(hostile_text), *draw(st.lists(hostile_text, max_size=3))],
    ]  # fmt: skip
    return draw(st.sampled_from(choices))()  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def world(cli: Cli, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str], Path]:
    root = tmp_path_factory.mktemp("property")
    home = new_home(root / "home").root
    ids = []
    for text in ("a memory about harbours", "a memory about ships", "a third memory"):
        r = cli(home, "store", text, json=True)
        ids.append(json.loads(r.stdout)["memory"]["id"])
    (root / "bundle.tar").write_bytes(b"\x00" * 1024 + b"not a tar")
    return home, ids, root


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
@given(data=st.data())
def test_random_command_lines_end_cleanly(
    cli: Cli, world: tuple[Path, list[str], Path], data: st.DataObject
) -> None:
    home, ids, tmp = world
    argv = data.draw(command(ids, tmp))
    as_json = data.draw(st.booleans())
    before = log_digest(home)
    r = cli(home, *argv, json=as_json)
    out = r.stdout + r.stderr
    assert r.code in DOCUMENTED, (argv, r.code, out[-2000:])
    assert "Traceback" not in out and "internal error" not in out, (argv, out[-2000:])
    if r.code != 0:
        assert log_digest(home) == before, (argv, r.code, out[-500:])
    if as_json and r.stdout.strip():
        doc = json.loads(r.stdout.strip().splitlines()[-1])
        assert doc["ok"] is (r.code == 0) or r.code == 1


def test_the_home_survives_the_property(cli: Cli, world: tuple[Path, list[str], Path]) -> None:
    home, _, _ = world
    copy = home.parent / "copy"
    shutil.copytree(home, copy, ignore=shutil.ignore_patterns(".lock", ".want-*"))
    assert cli(copy, "log", "verify").code == 0
