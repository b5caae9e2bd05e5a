"""The knowledge commands as an operator runs them (in process): JSON, text, exit codes, stdin.

One real-process test covers capture from standard input; the rest run the
command tree in process with click's runner.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from mnemolog.cli.agents import mcp_server
from mnemolog.substrate.api import MAX_CONTENT_BYTES, Substrate
from tests.projections.kit import log_digest, new_home, open_sub
from tests.support.cli import Cli


@pytest.fixture
def home(cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("MNEMOLOG_OLLAMA_MODEL", raising=False)
    path = tmp_path / "home"
    new_home(path)
    cli.ok(path, "stats")  # the first open writes the log's derived index; refusals are compared after it
    return path


def test_the_loop_through_the_cli(cli: Cli, home: Path) -> None:
    cli.ok(home, "project", "add", "p04-gigabit", "--alias", "p04", "--description", "1.2 m telescope")
    cli.ok(home, "project", "alias", "p04", "gigabit")
    projects = cli.ok(home, "project", "list")["projects"]
    assert [(p["name"], p["aliases"]) for p in projects] == [("p04-gigabit", ["p04", "gigabit"])]
    entry = cli.ok(
        home, "state", "set", "p04", "decision", "vendor_path", "Twyman-Green", "--source", "review"
    )["entry"]
    assert entry["project"] == "p04-gigabit"
    assert [e["key"] for e in cli.ok(home, "state", "get", "gigabit")["entries"]] == ["vendor_path"]
    response = (
        "## Decisions\n- We keep the 18-point whiffletree for the M1 mirror.\n\n"
        "Lesson learned: Zerodur CTE gradient dominates WFE at fast focal ratios (3 nm at F/1.2)."
    )
    iid = cli.ok(
        home, "capture", "--prompt", "What did we decide?", "--response", response, "--project", "p04"
    )["interaction"]["id"]
    assert [i["id"] for i in cli.ok(home, "interactions", "list", "--project", "p04")["interactions"]] == [
        iid
    ]
    assert cli.ok(home, "interactions", "show", iid)["interaction"]["extraction"] == "pending"
    extracted = cli.ok(home, "extract", "--pending", "--extractor", "rules")
    assert extracted["candidates"] == 2
    queue = cli.ok(home, "candidates", "list")["candidates"]
    assert [c["candidate"]["queue"] for c in queue] == ["pending", "pending"]
    dry = cli.ok(home, "triage", "--pending", "--triager", "rules", "--dry-run")
    assert dry["dry_run"] and dry["promoted"] == 1
    tri = cli.ok(home, "triage", "--pending", "--triager", "rules")
    assert (tri["promoted"], tri["waiting"]) == (1, 1)
    (waiting,) = cli.ok(home, "candidates", "list", "--status", "needs_human")["candidates"]
    assert waiting["domains"] == ["materials"]
    promoted = cli.ok(home, "promote", waiting["id"], "--reason", "earned on p04")["memory"]
    assert promoted["status"] == "active"
    hits = cli.ok(home, "recall", "CTE gradient Zerodur", "--project", "", "--domain", "materials")["results"]
    assert [m["id"] for m in hits] == [waiting["id"]]
    assert cli.ok(home, "list", "--project", "gigabit")["memories"][0]["kind"] == "decision"
    assert cli.ok(home, "list", "--status", "candidate")["memories"] == []
    stats = cli.ok(home, "stats")["stats"]["knowledge"]
    assert stats["statuses"] == {"active": 2}
    assert stats["candidates"]["promoted"] == 2
    # The promoted insight was just recalled: a recall hit is a reference, so decay
    # keeps it and retires only the decision nobody has asked about.
    decay = cli.ok(home, "decay", "run", "--now", "2099-01-01", "--dry-run")
    assert decay["superseded_count"] == 1
    assert decay["exempt"]["recalled"] == 1
    assert [d["name"] for d in cli.ok(home, "domains", "list")["domains"]][:2] == ["physics", "materials"]


def test_store_and_update_take_project_and_domains(cli: Cli, home: Path) -> None:
    m = cli.ok(
        home, "store", "Coma is not correctable by force modulation", "--project", "p04", "--domain", "optics"
    )["memory"]
    assert (m["project"], m["domains"]) == ("p04", ["optics"])
    u = cli.ok(home, "update", m["id"], "--domain", "optics", "--domain", "mechanics", "--project", "")[
        "memory"
    ]
    assert (u["project"], u["domains"]) == ("", ["optics", "mechanics"])


@pytest.mark.parametrize(
    ("args", "exit_code", "slug"),
    [
        (("state", "set", "p04", "notes", "k", "v"), 65, "bad_input"),
        (("state", "get", "p04", "--category", "notes"), 65, "bad_input"),
        (("state", "invalidate", "p04", "decision", "nothing"), 2, "not_found"),
        (("store", "x", "--domain", "alchemy"), 65, "bad_input"),
        (("store", "x", "--project", "no spaces allowed"), 65, "bad_input"),
        (("capture", "--prompt", ""), 65, "bad_input"),
        (("extract", "--pending"), 1, "nothing_to_do"),
        (("extract",), 64, "usage"),
        (("extract", "--pending", "--extractor", "ollama"), 3, "TIER_LOCKED"),
        (("triage", "--pending", "--triager", "rules"), 1, "nothing_to_do"),
        (("promote", "01NOPE"), 2, "not_found"),
        (("reject", "01NOPE", "--reason", "x"), 2, "not_found"),
        (("decay", "run", "--now", "yesterday"), 64, "usage"),
        (("interactions", "show", "01NOPE"), 2, "not_found"),
        (("project", "alias", "p09", "nine"), 2, "not_found"),
    ],
)
def test_refusals(cli: Cli, home: Path, args: tuple[str, ...], exit_code: int, slug: str) -> None:
    before = log_digest(home)
    code, out = cli.json(home, *args)
    assert code == exit_code, out
    assert isinstance(out, dict) and out["ok"] is False and out["error"] == slug
    assert log_digest(home) == before


def test_reject_needs_a_reason(cli: Cli, home: Path) -> None:
    code, out = cli.json(home, "reject", "01ABC")
    assert code == 64 and isinstance(out, dict) and out["error"] == "usage"


def test_ollama_without_a_model_is_tier_locked(cli: Cli, home: Path) -> None:
    cli.ok(home, "capture", "--prompt", "q", "--response", "r")
    code, out = cli.json(home, "extract", "--pending", "--extractor", "ollama")
    assert code == 3 and isinstance(out, dict) and out["error"] == "TIER_LOCKED"


@pytest.mark.parametrize(
    ("stdin", "found"),
    [
        ("not json", "not valid JSON"),
        ("[1, 2]", "must be a JSON object"),
        ('{"prompt": "q", "colour": "red"}', "unknown field"),
        ('{"response": "r"}', "needs a prompt"),
        ('{"prompt": 5}', "needs a prompt"),
        ('{"prompt": "q", "reinforce": "yes"}', "true or false"),
        ('{"prompt": "q", "project": 4}', "must be text"),
        (json.dumps({"prompt": "x" * (MAX_CONTENT_BYTES + 1)}), "256 KiB"),
    ],
)
def test_malformed_captures_on_stdin(cli: Cli, home: Path, stdin: str, found: str) -> None:
    before = log_digest(home)
    code, out = cli.json(home, "capture", stdin=stdin)
    assert code == 65, out
    assert isinstance(out, dict) and found in out["message"]
    assert log_digest(home) == before


def test_an_oversized_or_invalid_stdin_is_refused_before_parsing(cli: Cli, home: Path) -> None:
    code, out = cli.json(home, "capture", stdin=b"{" + b" " * (2 * MAX_CONTENT_BYTES + 70 * 1024))
    assert code == 65 and isinstance(out, dict) and "larger than" in out["message"]
    code, out = cli.json(home, "capture", stdin=b'{"prompt": "\xff"}')
    assert code == 65 and isinstance(out, dict) and "UTF-8" in out["message"]


def test_capture_from_stdin_in_a_real_process(cli: Cli, home: Path) -> None:
    capture = {"prompt": "How is the layout decided?", "response": "By the CTE map.", "project": "p04",
               "client": "claude-code", "session": "s-1"}  # fmt: skip
    env: dict[str, str | None] = {k: None for k in os.environ if k.startswith("MNEMOLOG_")}
    p = cli.process(home, "capture", "--reinforce", json=True, stdin=json.dumps(capture).encode(), env=env)
    assert p.code == 0, p.stderr
    out = json.loads(p.stdout)["interaction"]
    assert out["project"] == "p04" and out["reinforced"] == []
    shown = cli.ok(home, "interactions", "show", out["id"])["interaction"]
    assert (shown["client"], shown["session"], shown["reinforce"]) == ("claude-code", "s-1", True)
    p = cli.process(home, "capture", "--prompt", "q", env=env)
    assert p.code == 0 and p.stdout.strip().startswith("01")  # text mode prints the id


# -- MCP tools ----------------------------------------------------------------------------------------


def call(sub: Substrate, name: str, **args: Any) -> tuple[bool, dict[str, Any]]:
    """A tool call as the MCP server answers it: (is_error, the structured result or error object)."""
    result = mcp_server.call(sub, name, args)
    assert result.structured_content is not None
    assert json.loads(result.content[0].text) == result.structured_content  # type: ignore[union-attr]
    return result.is_error, result.structured_content


def test_mcp_tools(home: Path) -> None:
    names = {t.name for t in mcp_server.TOOLS}
    assert {"capture_interaction", "project_state_get", "project_state_set", "candidates_list",
            "candidate_promote", "candidate_reject"} <= names  # fmt: skip
    with open_sub(home) as sub:
        err, out = call(sub, "project_state_set", project="p04", category="decision", key="k", value="v")
        assert not err and out["project"] == "p04"
        err, out = call(sub, "project_state_get", project="p04")
        assert not err and [e["value"] for e in out["entries"]] == ["v"]
        # A category outside the tool's schema is a usage error naming the field, as every tool's is;
        # a value the schema admits but the knowledge loop refuses is bad input.
        err, out = call(sub, "project_state_set", project="p04", category="notes", key="k", value="v")
        assert err and out["exit_code"] == 64 and out["details"]["field"] == "category"
        err, out = call(
            sub, "project_state_set", project="no spaces", category="decision", key="k", value="v"
        )
        assert err and out["exit_code"] == 65 and out["error"] == "bad_input"
        err, out = call(sub, "memory_store", content="x", domains=["alchemy"])
        assert err and out["exit_code"] == 65 and out["error"] == "bad_input"
        err, out = call(
            sub,
            "capture_interaction",
            prompt="What did we decide?",
            response="Decision: we keep the whiffletree for the M1 mirror.\nLesson: Zerodur CTE gradient "
            "dominates WFE at fast focal ratios.",
            project="p04",
        )
        assert not err and out["id"]
        sub.extract(pending=True, extractor="rules")
        err, out = call(sub, "candidates_list")
        assert not err and len(out["candidates"]) == 2
        first, second = (c["id"] for c in out["candidates"])
        err, out = call(sub, "candidate_promote", id=first, domains=["mechanics"])
        assert not err and out["status"] == "active" and out["domains"] == ["mechanics"]
        err, out = call(sub, "candidate_reject", id=second, reason="common knowledge")
        assert not err and out["status"] == "invalid"
        err, out = call(sub, "candidate_reject", id=second)
        assert err and out["error"] == "usage" and out["exit_code"] == 64
        err, out = call(sub, "memory_store", content="A global insight", domains=["optics"], project="p04")
        assert not err and (out["memory"]["project"], out["memory"]["domains"]) == ("p04", ["optics"])
        err, out = call(sub, "memory_update", id=out["memory"]["id"], project="", verbose=True)
        assert not err and (out["memory"]["project"], out["memory"]["domains"]) == ("", ["optics"])
        err, out = call(sub, "memory_recall", query="insight", domains=["optics"])
        assert not err and [m["content"] for m in out["results"]] == ["A global insight"]
        err, out = call(sub, "memory_list", statuses=["invalid"])
        assert not err and [m["id"] for m in out["memories"]] == [second]
        err, out = call(sub, "candidates_list", statuses=["promoted", "rejected"])
        assert not err and {c["status"] for c in out["candidates"]} == {"active", "invalid"}


def test_a_fresh_home_triages_offline_by_default(cli: Cli, home: Path) -> None:
    cli.ok(
        home, "capture", "--prompt", "q", "--response", "Decision: we keep the 18-point whiffletree for M1."
    )
    cli.ok(home, "extract", "--pending")
    out = cli.ok(
        home, "triage", "--pending"
    )  # no --triager, no [knowledge] table: rules, not ollama (exit 3)
    assert out["promoted"] == 1


def test_decay_lists_what_it_retires_first_and_restore_brings_it_back(cli: Cli, home: Path) -> None:
    cli.ok(
        home, "capture", "--prompt", "q", "--response", "Decision: we keep the 18-point whiffletree for M1."
    )
    cli.ok(home, "extract", "--pending")
    cli.ok(home, "triage", "--pending")
    pinned = cli.ok(home, "store", "I want answers in metric units", "--kind", "user")["memory"]
    (loop,) = cli.ok(home, "list", "--kind", "decision")["memories"]
    args = ["decay", "run", "--now", "2099-01-01"]
    dry = cli(home, *args, "--dry-run")
    assert dry.code == 0, dry.output
    assert f"would retire 1 memory\n  {loop['id']}  decision" in dry.stderr
    assert "would supersede 1" in dry.stdout
    assert cli.ok(home, "get", loop["id"])["memory"]["status"] == "active"
    wet = cli(home, *args)
    assert wet.code == 0 and f"retiring 1 memory\n  {loop['id']}" in wet.stderr
    assert cli.ok(home, "get", loop["id"])["memory"]["status"] == "superseded"
    assert cli.ok(home, "get", pinned["id"])["memory"]["status"] == "active"  # a person's, and user kind
    assert cli.ok(home, "recall", "whiffletree")["results"] == []
    assert cli.ok(home, "restore", loop["id"], "--reason", "still true")["memory"]["status"] == "active"
    assert [m["id"] for m in cli.ok(home, "recall", "whiffletree")["results"]] == [loop["id"]]
    assert cli.ok(home, "decay", "run", "--now", "2199-01-01")["superseded_count"] == 0


def test_mcp_memory_restore_brings_a_decayed_memory_back(cli: Cli, home: Path, mcp_server: Any) -> None:
    cli.ok(
        home, "capture", "--prompt", "q", "--response", "Decision: we keep the 18-point whiffletree for M1."
    )
    cli.ok(home, "extract", "--pending")
    cli.ok(home, "triage", "--pending")
    (loop,) = cli.ok(home, "list", "--kind", "decision")["memories"]
    cli.ok(home, "decay", "run", "--now", "2099-01-01")
    client = mcp_server(home)
    is_error, out = client.tool("memory_restore", id=loop["id"], reason="still true")
    assert not is_error and out["memory"]["id"] == loop["id"], out
    client.close()
    assert cli.ok(home, "get", loop["id"])["memory"]["status"] == "active"
    assert [m["id"] for m in cli.ok(home, "recall", "whiffletree")["results"]] == [loop["id"]]


def test_http_restore_brings_a_decayed_memory_back(cli: Cli, home: Path) -> None:
    import httpx

    from tests.cli.agents.test_http_api import Server

    cli.ok(
        home, "capture", "--prompt", "q", "--response", "Decision: we keep the 18-point whiffletree for M1."
    )
    cli.ok(home, "extract", "--pending")
    cli.ok(home, "triage", "--pending")
    (loop,) = cli.ok(home, "list", "--kind", "decision")["memories"]
    cli.ok(home, "decay", "run", "--now", "2099-01-01")
    server = Server(home)
    try:
        r = httpx.post(f"{server.url}/memory/{loop['id']}/restore", json={"reason": "still true"}, timeout=30)
        assert r.status_code == 200, r.text
    finally:
        server.stop()
    assert cli.ok(home, "get", loop["id"])["memory"]["status"] == "active"
