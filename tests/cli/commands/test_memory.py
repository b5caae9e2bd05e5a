"""The memory commands as an operator runs them: exit codes, JSON, stdin.

Commands run in-process (the `cli` fixture) unless `cli.process`: a small set
of cases (stdin bytes, usage errors, stderr without --json) runs the real
`mnemolog` executable, so the process's own exit code and streams are tested
too. Every refusal is checked for its exit code, its one JSON error object
(or a message on stderr and nothing on stdout without --json), and for
leaving the log exactly as it was.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from mnemolog.substrate.api import MAX_CONTENT_BYTES
from tests.projections.kit import log_digest, new_home
from tests.support.cli import Cli

EXE = Path(sys.executable).with_name("mnemolog")


@pytest.fixture(scope="module")
def base_home(cli: Cli, tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("cli") / "home"
    new_home(home)
    cli.ok(
        home,
        "store",
        "The deploy at 09:05 raised the worker count",
        "--title",
        "Deploy",
        "--tag",
        "ops",
    )
    cli.ok(
        home,
        "store",
        "Rollback at 09:41 fixed checkout",
        "-n",
        "team/checkout",
        "--kind",
        "decision",
    )
    return home


@pytest.fixture
def home(base_home: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "home"
    shutil.copytree(base_home, copy, ignore=shutil.ignore_patterns(".lock", ".want-*"))
    return copy


def test_store_recall_search_get_list_stats(cli: Cli, home: Path) -> None:
    text = "The orders database connection pool was exhausted — café ☕"
    args = ["store", "-", "--title", "Pool", "--meta", '{"ticket": "OPS-7"}', "--confidence", "0.9"]
    m = cli.ok(home, *args, stdin=text.encode())["memory"]
    assert m["metadata"] == {"ticket": "OPS-7"} and m["confidence"] == 0.9
    assert m["content"].endswith("café ☕")
    r = cli.ok(home, "recall", "why was the connection pool exhausted?")
    assert r["results"][0]["id"] == m["id"] and r["results"][0]["score"] > 0
    assert [x["id"] for x in cli.ok(home, "search", "pool exhausted")["results"]] == [m["id"]]
    assert cli.ok(home, "search", "pools")["results"] == []
    assert cli.ok(home, "get", m["id"])["memory"]["title"] == "Pool"
    assert len(cli.ok(home, "list", "--limit", "2")["memories"]) == 2
    assert [x["namespace"] for x in cli.ok(home, "list", "-n", "team")["memories"]] == ["team/checkout"]
    st = cli.ok(home, "stats")["stats"]
    assert st["memories"] == 3 and st["events"]["memory.stored"] == 3
    text = cli.process(home, "recall", "pool")
    assert text.code == 0 and m["id"] in text.stdout


def test_recall_takes_the_mode_beside_the_knowledge_filters(cli: Cli, home: Path) -> None:
    m = cli.ok(home, "store", "The pump seal leaks under load", "--project", "p06")["memory"]
    base = ["recall", "pump seal", "--mode", "bm25"]
    r = cli.ok(home, *base, "--project", "p06", "--explain")
    assert r["mode"] == "bm25" and [x["id"] for x in r["results"]] == [m["id"]]
    assert r["results"][0]["explain"]["bm25_rank"] == 1
    assert cli.ok(home, *base, "--project", "")["results"] == []
    assert cli.ok(home, *base, "--status", "candidate")["results"] == []
    assert [x["id"] for x in cli.ok(home, "search", "pump", "--project", "p06")["results"]] == [m["id"]]
    assert cli.ok(home, "search", "pump", "--status", "superseded")["results"] == []
    text = cli(home, *base, "--explain")
    assert text.code == 0
    first, second = text.stdout.splitlines()[:2]
    assert m["id"] in first and second.split() == ["bm25", "#1", second.split()[2]]


def test_recall_min_score_include_expired_and_the_neighbour_in_explain(cli: Cli, home: Path) -> None:
    ask = cli.ok(home, "store", "which instrument did you pick up?", "--source", "chat/9")["memory"]["id"]
    answer = cli.ok(home, "store", "the violin, every evening", "--source", "chat/9")["memory"]["id"]
    r = cli.ok(home, "recall", "instrument", "--mode", "bm25", "--explain")
    assert [x["id"] for x in r["results"]] == [ask, answer]
    assert r["results"][1]["explain"]["neighbour_id"] == ask
    text = cli(home, "recall", "instrument", "--mode", "bm25", "--explain")
    assert "neighbour +" in text.stdout and ask in text.stdout.splitlines()[3]
    top = r["results"][0]["score"]
    got = cli.ok(home, "recall", "instrument", "--mode", "bm25", "--min-score", str(top))["results"]
    assert [x["id"] for x in got] == [ask]
    assert cli(home, "recall", "instrument", "--min-score", "-1", json=True).code == 64
    meta = '{"vault": {"expires_at": "2001-02-03"}}'
    gone = cli.ok(home, "store", "expired instrument list", "--meta", meta)["memory"]["id"]
    assert gone not in [x["id"] for x in cli.ok(home, "recall", "instrument")["results"]]
    assert gone not in [x["id"] for x in cli.ok(home, "list", "--limit", "100")["memories"]]
    assert gone in [x["id"] for x in cli.ok(home, "recall", "instrument", "--include-expired")["results"]]
    assert gone in [x["id"] for x in cli.ok(home, "search", "expired", "--include-expired")["results"]]
    assert cli.ok(home, "search", "expired")["results"] == []


def test_update_link_archive_restore(cli: Cli, home: Path) -> None:
    a = cli.ok(home, "store", "first memory about queues")["memory"]["id"]
    b = cli.ok(home, "store", "second memory about queues")["memory"]["id"]
    assert (
        cli.ok(home, "link", b, a, "-r", "supersedes", "--meta", '{"why": "newer"}')["link"]["relation"]
        == "supersedes"
    )
    assert cli.ok(home, "update", a, "--content", "-", stdin=b"rewritten about caches")["memory"][
        "content"
    ].startswith("rewritten")
    # The target of a supersedes link leaves default recall; asking for superseded ones shows it.
    assert [x["id"] for x in cli.ok(home, "recall", "caches")["results"]] == []
    old = ["--status", "active", "--status", "superseded"]
    assert [x["id"] for x in cli.ok(home, "recall", "caches", *old)["results"]] == [a]
    cli.ok(home, "archive", a, "--reason", "old")
    assert [x["id"] for x in cli.ok(home, "recall", "caches", *old)["results"]] == []
    assert [x["id"] for x in cli.ok(home, "recall", "caches", "--include-archived", *old)["results"]] == [a]
    cli.ok(home, "restore", a)
    assert [x["id"] for x in cli.ok(home, "recall", "caches", *old)["results"]] == [a]
    links = cli.ok(home, "get", a)["memory"]["links"]
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
def test_refusals(
    cli: Cli, home: Path, name: str, args: list[str], stdin: bytes | None, code: int, slug: str
) -> None:
    before = log_digest(home)
    run = cli.process if name in REAL else cli
    p = run(home, *args, json=True, stdin=stdin)
    assert p.code == code, p.stdout + p.stderr
    out = json.loads(p.stdout)  # exactly one JSON object
    assert out["ok"] is False and out["exit_code"] == code and out["error"] == slug and out["message"]
    assert log_digest(home) == before


def test_refusal_without_json_goes_to_stderr(cli: Cli, home: Path) -> None:
    p = cli.process(home, "store", "-", stdin=b"\xc3\x28")
    assert p.code == 65
    assert p.stdout_bytes == b""
    assert "not valid UTF-8" in p.stderr and "byte 0" in p.stderr


def test_stdin_at_the_limit_is_stored(cli: Cli, home: Path) -> None:
    body = b"ab " * (MAX_CONTENT_BYTES // 3) + b"c" * (MAX_CONTENT_BYTES % 3)
    assert len(body) == MAX_CONTENT_BYTES
    m = cli.ok(home, "store", "-", stdin=body)["memory"]
    assert len(m["content"].encode()) == MAX_CONTENT_BYTES


def test_a_diverged_projection_refuses_until_rebuild(cli: Cli, home: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    new_home(other)
    cli.ok(other, "store", "memories of another home")
    # Replace this home's log with another home's log, with its key, its record of the log
    # (config and high-water mark) and its key, so that only the projection is foreign.
    for part in ("log", "keys", "state", "datakeys"):
        shutil.rmtree(home / part, ignore_errors=True)
        shutil.copytree(other / part, home / part)
    shutil.copy(other / "config.toml", home / "config.toml")
    p = cli(home, "recall", "deploy", json=True)
    assert p.code == 6
    err = json.loads(p.stdout)
    assert err["error"] == "projection_diverged" and "mnemolog rebuild" in err["message"]
    assert cli(home, "stats", json=True).code == 6  # every read refuses, not only recall
    r = cli.ok(home, "rebuild")
    assert r["replayed"] == r["log_size"] == 2
    assert [x["content"] for x in cli.ok(home, "recall", "memories another")["results"]] == [
        "memories of another home"
    ]
    assert cli.ok(home, "recall", "deploy")["results"] == []


def test_store_and_capture_take_when_it_happened(cli: Cli, tmp_path: Path) -> None:
    home = new_home(tmp_path / "home")
    m = cli.ok(home, "store", "The kiln was relined", "--occurred-at", "2023-05-08T14:30Z")["memory"]
    assert m["occurred_at"] == 1_683_556_200_000_000
    shown = cli(home, "get", m["id"])
    assert shown.code == 0 and "occurred   2023-05-08 14:30" in shown.stdout
    assert [r["id"] for r in cli.ok(home, "recall", "what happened in May 2023")["results"]] == [m["id"]]
    before = log_digest(home)
    code, doc = cli.json(home, "store", "when?", "--occurred-at", "last week")
    assert (code, doc["error"]) == (65, "bad_input") and "occurred_at" in doc["message"]
    assert log_digest(home) == before
    iid = cli.ok(home, "capture", "--prompt", "q", "--occurred-at", "2023-05-08")["interaction"]["id"]
    got = cli.ok(home, "capture", stdin=json.dumps({"prompt": "q2", "occurred_at": "2023-05-09"}))
    assert got["interaction"]["id"] != iid
    # `update --occurred-at` puts the date right; recall's date words follow.
    fixed = cli.ok(home, "update", m["id"], "--occurred-at", "2024-02-10")["memory"]
    assert fixed["occurred_at"] == 1_707_523_200_000_000
    assert [r["id"] for r in cli.ok(home, "recall", "what happened in February 2024")["results"]] == [m["id"]]
    assert cli.ok(home, "recall", "what happened in May 2023")["results"] == []
    before = log_digest(home)
    code, doc = cli.json(home, "update", m["id"], "--occurred-at", "2024-02-30")
    assert (code, doc["error"]) == (65, "bad_input") and "occurred_at" in doc["message"]
    assert log_digest(home) == before
