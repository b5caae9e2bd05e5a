"""`mnemolog ingest` and `mnemolog context ...` as an operator runs them: exit codes, JSON, text."""

from __future__ import annotations

import json
import os
from pathlib import Path

from tests.projections.kit import log_digest, new_home
from tests.support.cli import Cli


def test_ingest_build_show_why(cli: Cli, tmp_path: Path) -> None:
    home = tmp_path / "home"
    new_home(home)
    d = tmp_path / "docs"
    d.mkdir()
    (d / "a.md").write_text("# Thermal\nPolishing accuracy drifts with temperature.\n")
    r = cli.ok(home, "ingest", str(d), "--project", "p06")
    assert r["chunks"] == 1 and r["ingested"][0]["version"] == 1
    mid = cli.ok(home, "store", "Zerodur CTE dominates thermal WFE", "--kind", "knowledge")["memory"]["id"]
    pack = cli.ok(home, "context", "build", "thermal effects on polishing accuracy", "--project", "p06")
    assert pack["pack_id"] and [t["name"] for t in pack["tiers"]][-1] == "chunks"
    shown = cli.ok(home, "context", "show", pack["pack_id"])
    assert shown["text"] == pack["text"] and shown["verified"] is True
    why = cli.ok(home, "context", "why", mid)
    assert [p["pack_id"] for p in why["packs"]] == [pack["pack_id"]]
    # Text mode: the pack on stdout, its id on stderr.
    p = cli(home, "context", "build", "thermal", "--budget", "200")
    assert p.code == 0
    assert p.stdout.startswith("## Domain knowledge\n") and "mnemolog: pack " in p.stderr
    before = log_digest(home)
    p = cli(home, "context", "build", "thermal", "--no-record")
    assert p.code == 0 and p.stderr_bytes == b"" and log_digest(home) == before


def test_refusals_and_usage_errors(cli: Cli, tmp_path: Path) -> None:
    home = tmp_path / "home"
    new_home(home)
    d = tmp_path / "docs"
    d.mkdir()
    (d / "good.md").write_text("fine")
    (d / "bad.md").write_bytes(b"\x00\x01 binary")
    os.mkfifo(d / "pipe.md")
    p = cli(home, "ingest", str(d), json=True)
    assert p.code == 65
    err = json.loads(p.stdout)
    assert err["error"] == "document_refused"
    assert sorted(Path(x["path"]).name for x in err["details"]["refused"]) == ["bad.md", "pipe.md"]
    assert [Path(x["path"]).name for x in err["details"]["ingested"]] == ["good.md"]
    before = log_digest(home)
    for args, code in [
        (("context", "build", "q", "--budget", "0"), 64),
        (("context", "build", "q", "--unit", "words"), 64),
        (("context", "build", ""), 65),
        (("context", "show", "01NOSUCHPACK00000000000000"), 2),
        (("ingest", str(tmp_path / "missing")), 65),
        (("ingest",), 64),
    ]:
        p = cli(home, *args, json=True)
        assert p.code == code, (args, p.stdout, p.stderr)
        if code != 64 or p.stdout:
            assert json.loads(p.stdout)["ok"] is False
        assert log_digest(home) == before


def test_an_alias_names_the_project_in_scope(cli: Cli, tmp_path: Path) -> None:
    home = tmp_path / "home"
    new_home(home)
    cli.ok(home, "project", "add", "p06-polisher", "--alias", "p06")
    cli.ok(home, "state", "set", "p06", "decision", "vendor_path", "Twyman-Green preferred")
    mid = cli.ok(home, "store", "Polishing accuracy drifts with pad temperature", "--kind", "project",
             "--project", "p06-polisher")["memory"]["id"]  # fmt: skip
    pack = cli.ok(home, "context", "build", "thermal effects on polishing accuracy", "--project", "P06")
    assert pack["project"] == "p06-polisher"
    by_tier = {t["name"]: [e["id"] for e in t["entries"]] for t in pack["tiers"]}
    assert by_tier["state"] == ["p06-polisher/decision/vendor_path"] and by_tier["project"] == [mid]
    assert pack["text"].startswith("## Trusted project state (p06-polisher)\n- decision/vendor_path: Twyman")
    assert cli.ok(home, "context", "show", pack["pack_id"])["sources_checked"] == 2


def test_personal_scope_through_the_cli(cli: Cli, tmp_path: Path) -> None:
    home = tmp_path / "home"
    new_home(home)
    mid = cli.ok(home, "store", "Medication budget is 40 a month", "--domain", "finance")["memory"]["id"]
    plain = cli.ok(home, "context", "build", "medication budget", "--no-record")
    assert mid not in plain["text"]
    assert {"source": "memory", "id": mid, "reason": "personal"} in plain["excluded"]
    mine = cli.ok(home, "context", "build", "medication budget", "--personal")
    assert mid in {e["id"] for t in mine["tiers"] for e in t["entries"]}
    assert cli.ok(home, "context", "show", mine["pack_id"])["config"]["personal"] is True
    p = cli(home, "context", "build", "medication budget", "--personal", "--project", "p06", json=True)
    assert p.code == 64 and json.loads(p.stdout)["error"] == "usage"
