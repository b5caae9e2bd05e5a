"""The memory commands as an operator runs them: exit codes, JSON, stdin.

Commands run in-process (click's CliRunner) unless `real=True`: a small set
of cases (stdin bytes, usage errors, stderr without --json) runs the real
`mnemolog` executable, so the process's own exit code and streams are tested
too. Every refusal is checked for its exit code, its one JSON error object
(or a message on stderr and nothing on stdout without --json), and for
leaving the log exactly as it was.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from mnemolog.cli.main import cli
from mnemolog.substrate.api import MAX_CONTENT_BYTES
from tests.projections.kit import log_digest, new_home

EXE = Path(sys.executable).with_name("mnemolog")


def mnemolog(
    home: Path, *args: str, stdin: bytes | None = None, as_json: bool = True, real: bool = False
) -> subprocess.CompletedProcess[bytes]:
    argv = ["--home", str(home), *(["--json"] if as_json else []), *args]
    if real:
        env = {k: v for k, v in os.environ.items() if not k.startswith("MNEMOLOG_") or k == "MNEMOLOG_EMBED"}
        return subprocess.run(
            [str(EXE), *argv], input=stdin, capture_output=True, timeout=120, env=env, check=False
        )
    unset: dict[str, str | None] = {
        k: None for k in os.environ if k.startswith("MNEMOLOG_") and k != "MNEMOLOG_EMBED"
    }
    r = CliRunner().invoke(cli, argv, input=stdin, env=unset)
    return subprocess.CompletedProcess(argv, r.exit_code, r.stdout_bytes, r.stderr_bytes)


def ok(home: Path, *args: str, stdin: bytes | None = None) -> dict[str, Any]:
    p = mnemolog(home, *args, stdin=stdin)
    assert p.returncode == 0, p.stderr.decode() + p.stdout.decode()
    out = json.loads(p.stdout)
    assert out["ok"] is True
    return out  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def base_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("cli") / "home"
    new_home(home)
    ok(home, "store", "The deploy at 09:05 raised the worker count", "--title", "Deploy", "--tag", "ops")
    ok(home, "store", "Rollback at 09:41 fixed checkout", "-n", "team/checkout", "--kind", "decision")
    return home


@pytest.fixture
def home(base_home: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "home"
    shutil.copytree(base_home, copy, ignore=shutil.ignore_patterns(".lock", ".want-*"))
    return copy


def test_store_recall_search_get_list_stats(home: Path) -> None:
    text = "The orders database connection pool was exhausted — café ☕"
    args = ["store", "-", "--title", "Pool", "--meta", '{"ticket": "OPS-7"}', "--confidence", "0.9"]
    m = ok(home, *args, stdin=text.encode())["memory"]
    assert m["metadata"] == {"ticket": "OPS-7"} and m["confidence"] == 0.9
    assert m["content"].endswith("café ☕")
    r = ok(home, "recall", "why was the connection pool exhausted?")
    assert r["results"][0]["id"] == m["id"] and r["results"][0]["score"] > 0
    assert [x["id"] for x in ok(home, "search", "pool exhausted")["results"]] == [m["id"]]
    assert ok(home, "search", "pools")["results"] == []
    assert ok(home, "get", m["id"])["memory"]["title"] == "Pool"
    assert len(ok(home, "list", "--limit", "2")["memories"]) == 2
    assert [x["namespace"] for x in ok(home, "list", "-n", "team")["memories"]] == ["team/checkout"]
    st = ok(home, "stats")["stats"]
    assert st["memories"] == 3 and st["events"]["memory.stored"] == 3
    text = mnemolog(home, "recall", "pool", as_json=False, real=True)
    assert text.returncode == 0 and m["id"] in text.stdout.decode()


def test_recall_takes_the_mode_beside_the_knowledge_filters(home: Path) -> None:
    m = ok(home, "store", "The pump seal leaks under load", "--project", "p06")["memory"]
    base = ["recall", "pump seal", "--mode", "bm25"]
    r = ok(home, *base, "--project", "p06", "--explain")
    assert r["mode"] == "bm25" and [x["id"] for x in r["results"]] == [m["id"]]
    assert r["results"][0]["explain"]["bm25_rank"] == 1
    assert ok(home, *base, "--project", "")["results"] == []
    assert ok(home, *base, "--status", "candidate")["results"] == []
    assert [x["id"] for x in ok(home, "search", "pump", "--project", "p06")["results"]] == [m["id"]]
    assert ok(home, "search", "pump", "--status", "superseded")["results"] == []
    text = mnemolog(home, *base, "--explain", as_json=False)
    assert text.returncode == 0
    first, second = text.stdout.decode().splitlines()[:2]
    assert m["id"] in first and second.split() == ["bm25", "#1", second.split()[2]]


def test_recall_min_score_include_expired_and_the_neighbour_in_explain(home: Path) -> None:
    ask = ok(home, "store", "which instrument did you pick up?", "--source", "chat/9")["memory"]["id"]
    answer = ok(home, "store", "the violin, every evening", "--source", "chat/9")["memory"]["id"]
    r = ok(home, "recall", "instrument", "--mode", "bm25", "--explain")
    assert [x["id"] for x in r["results"]] == [ask, answer]
    assert r["results"][1]["explain"]["neighbour_id"] == ask
    text = mnemolog(home, "recall", "instrument", "--mode", "bm25", "--explain", as_json=False)
    assert "neighbour +" in text.stdout.decode() and ask in text.stdout.decode().splitlines()[3]
    top = r["results"][0]["score"]
    got = ok(home, "recall", "instrument", "--mode", "bm25", "--min-score", str(top))["results"]
    assert [x["id"] for x in got] == [ask]
    assert mnemolog(home, "recall", "instrument", "--min-score", "-1").returncode == 64
    meta = '{"vault": {"expires_at": "2001-02-03"}}'
    gone = ok(home, "store", "expired instrument list", "--meta", meta)["memory"]["id"]
    assert gone not in [x["id"] for x in ok(home, "recall", "instrument")["results"]]
    assert gone not in [x["id"] for x in ok(home, "list", "--limit", "100")["memories"]]
    assert gone in [x["id"] for x in ok(home, "recall", "instrument", "--include-expired")["results"]]
    assert gone in [x["id"] for x in ok(home, "search", "expired", "--include-expired")["results"]]
    assert ok(home, "search", "expired")["results"] == []


def test_update_link_archive_restore(home: Path) -> None:
    a = ok(home, "store", "first memory about queues")["memory"]["id"]
    b = ok(home, "store", "second memory about queues")["memory"]["id"]
    assert (
        ok(home, "link", b, a, "-r", "supersedes", "--meta", '{"why": "newer"}')["link"]["relation"]
        == "supersedes"
    )
    assert ok(home, "update", a, "--content", "-", stdin=b"rewritten about caches")["memory"][
        "content"
    ].startswith("rewritten")
    # The target of a supersedes link leaves default recall; asking for superseded ones shows it.
    assert [x["id"] for x in ok(home, "recall", "caches")["results"]] == []
    old = ["--status", "active", "--status", "superseded"]
    assert [x["id"] for x in ok(home, "recall", "caches", *old)["results"]] == [a]
    ok(home, "archive", a, "--reason", "old")
    assert [x["id"] for x in ok(home, "recall", "caches", *old)["results"]] == []
    assert [x["id"] for x in ok(home, "recall", "caches", "--include-archived", *old)["results"]] == [a]
    ok(home, "restore", a)
    assert [x["id"] for x in ok(home, "recall", "caches", *old)["results"]] == [a]
    links = ok(home, "get", a)["memory"]["links"]
    assert [e["src"] for e in links["incoming"]] == [b]


GHOST = "01ZZZZZZZZZZZZZZZZZZZZZZZZ"
BAD: list[tuple[str, list[str], bytes | None, int, str]] = [
    ("empty content", ["store", ""], None, 65, "bad_input"),
    ("blank content", ["store", "   "], None, 65, "bad_input"),
    ("oversized stdin", ["store", "-"], b"x" * (MAX_CONTENT_BYTES + 1), 65, "bad_input"),
    (
        "oversized multibyte stdin",
        ["store", "-"],
        "é".encode() * (MAX_CONTENT_BYTES // 2 + 1),
        65,
        "bad_input",
    ),
    ("invalid UTF-8 stdin", ["store", "-"], b"valid start \xff\xfe then junk", 65, "bad_input"),
    ("truncated UTF-8 stdin", ["store", "-"], "café".encode()[:-1], 65, "bad_input"),
    ("empty stdin", ["store", "-"], b"", 65, "bad_input"),
    ("NUL on stdin", ["store", "-"], b"a\x00b", 65, "bad_input"),
    ("malformed --meta", ["store", "x", "--meta", "{not json"], None, 65, "bad_input"),
    ("--meta not an object", ["store", "x", "--meta", "[1, 2]"], None, 65, "bad_input"),
    ("--meta truncated", ["store", "x", "--meta", '{"a": '], None, 65, "bad_input"),
    ("bad namespace", ["store", "x", "-n", "no spaces allowed"], None, 65, "bad_input"),
    ("namespace traversal", ["store", "x", "-n", "../../etc"], None, 65, "bad_input"),
    ("confidence above 1", ["store", "x", "--confidence", "1.5"], None, 65, "bad_input"),
    ("confidence below 0", ["store", "x", "--confidence", "-0.5"], None, 65, "bad_input"),
    ("confidence nan", ["store", "x", "--confidence", "nan"], None, 65, "bad_input"),
    ("confidence not a number", ["store", "x", "--confidence", "high"], None, 64, "usage"),
    ("unknown kind", ["store", "x", "--kind", "gossip"], None, 64, "usage"),
    ("tag with space", ["store", "x", "--tag", "a b"], None, 65, "bad_input"),
    ("limit 0", ["recall", "deploy", "--limit", "0"], None, 64, "usage"),
    ("limit too big", ["recall", "deploy", "--limit", "1001"], None, 64, "usage"),
    ("limit not a number", ["list", "--limit", "ten"], None, 64, "usage"),
    ("empty query", ["recall", ""], None, 65, "bad_input"),
    ("unknown relation", ["link", GHOST, GHOST, "-r", "loves"], None, 64, "usage"),
    ("unknown id get", ["get", GHOST], None, 2, "not_found"),
    ("unknown id update", ["update", GHOST, "--title", "t"], None, 2, "not_found"),
    ("unknown id archive", ["archive", GHOST], None, 2, "not_found"),
    ("unknown id restore", ["restore", GHOST], None, 2, "not_found"),
    ("unknown id link", ["link", GHOST, "01YYYYYYYYYYYYYYYYYYYYYYYY"], None, 2, "not_found"),
    ("self-link", ["link", GHOST, GHOST], None, 65, "bad_input"),
    ("update without fields", ["update", GHOST], None, 64, "usage"),
    # The payload models hold every limit, so update refuses what store refuses (before any read).
    ("update title with NUL", ["update", GHOST, "--title", "a\x00b"], None, 65, "bad_input"),
    ("update 612-character title", ["update", GHOST, "--title", "t" * 612], None, 65, "bad_input"),
    ("update 2,058-character source", ["update", GHOST, "--source", "s" * 2058], None, 65, "bad_input"),
    ("missing argument", ["store"], None, 64, "usage"),
    ("unknown option", ["recall", "x", "--colour", "red"], None, 64, "usage"),
]


# Run as real processes: stdin bytes, click's own usage errors, an id that is not there.
REAL = {"invalid UTF-8 stdin", "NUL on stdin", "empty stdin", "confidence not a number", "missing argument",
        "unknown id get"}  # fmt: skip


@pytest.mark.parametrize(("name", "args", "stdin", "code", "slug"), BAD, ids=[b[0] for b in BAD])
def test_refusals(home: Path, name: str, args: list[str], stdin: bytes | None, code: int, slug: str) -> None:
    before = log_digest(home)
    p = mnemolog(home, *args, stdin=stdin, real=name in REAL)
    assert p.returncode == code, p.stdout.decode() + p.stderr.decode()
    out = json.loads(p.stdout)  # exactly one JSON object
    assert out["ok"] is False and out["exit_code"] == code and out["error"] == slug and out["message"]
    assert log_digest(home) == before


def test_refusal_without_json_goes_to_stderr(home: Path) -> None:
    p = mnemolog(home, "store", "-", stdin=b"\xc3\x28", as_json=False, real=True)
    assert p.returncode == 65
    assert p.stdout == b""
    assert b"not valid UTF-8" in p.stderr and b"byte 0" in p.stderr


def test_stdin_at_the_limit_is_stored(home: Path) -> None:
    body = b"ab " * (MAX_CONTENT_BYTES // 3) + b"c" * (MAX_CONTENT_BYTES % 3)
    assert len(body) == MAX_CONTENT_BYTES
    m = ok(home, "store", "-", stdin=body)["memory"]
    assert len(m["content"].encode()) == MAX_CONTENT_BYTES


def test_a_diverged_projection_refuses_until_rebuild(home: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    new_home(other)
    ok(other, "store", "memories of another home")
    # Replace this home's log with another home's log, with its key, its record of the log
    # (config and high-water mark) and its key, so that only the projection is foreign.
    for part in ("log", "keys", "state", "datakeys"):
        shutil.rmtree(home / part, ignore_errors=True)
        shutil.copytree(other / part, home / part)
    shutil.copy(other / "config.toml", home / "config.toml")
    p = mnemolog(home, "recall", "deploy")
    assert p.returncode == 6
    err = json.loads(p.stdout)
    assert err["error"] == "projection_diverged" and "mnemolog rebuild" in err["message"]
    assert mnemolog(home, "stats").returncode == 6  # every read refuses, not only recall
    r = ok(home, "rebuild")
    assert r["replayed"] == r["log_size"] == 2
    assert [x["content"] for x in ok(home, "recall", "memories another")["results"]] == [
        "memories of another home"
    ]
    assert ok(home, "recall", "deploy")["results"] == []
