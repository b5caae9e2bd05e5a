"""Knowledge earned on one project reaches another: the p04 -> p06 story, through every door.

p04 and p06 are registered with aliases; p06 has trusted state; an
interaction on p04 is captured, extracted and triaged by rules, and a person
promotes the `[materials]` lesson it taught; p06 has memories of its own.
`context build "thermal effects on polishing accuracy" --project p06` then
holds the p06 state, the p06 memories, the p04-earned materials insight and
no p04 project memory: through the CLI, MCP (the SDK's client), HTTP and the
Python API, with the same pack bytes. The home embeds with the offline
MiniLM, as a new home does by default, so the pack ranks by meaning as
`recall` does.

The README's worked context example is run as it is written and its output
compared with what the README shows.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from mnemolog.cli.agents import http_api
from mnemolog.substrate.api import Substrate
from mnemolog.substrate.home import init_home
from tests.cli.agents.test_mcp import stdio_params, tool, with_client

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
QUERY = "thermal effects on polishing accuracy"
RESPONSE = (
    "## Decisions\n"
    "- CTE gradient analysis drove the M1 support pad layout; it is the second largest WFE "
    "contributor after gravity.\n\n"
    "Lesson learned: Zerodur CTE gradient dominates WFE contribution at fast focal ratios "
    "(about 3 nm at F/1.2)."
)
VENDOR_PATH = "Twyman-Green preferred, 4D technical lead but cost-challenged"


@pytest.fixture
def seed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, dict[str, str]]:
    """The story up to the pack: the home and the ids that matter."""
    monkeypatch.setenv("MNEMOLOG_EMBED", "minilm")  # a new home's default; the log keeps it
    home = tmp_path / "home"
    init_home(home)
    with Substrate.open(home, long_lived=False) as s:
        s.register_project("p04-gigabit", aliases=["p04"])
        s.register_project("p06-polisher", aliases=["p06"])
        s.set_state("p06", "decision", "vendor_path", VENDOR_PATH)
        s.set_state("p04", "status", "phase", "M1 integration")
        i = s.capture("What did the thermal study show?", RESPONSE, project="p04")
        s.extract(interaction_ids=[i["id"]], extractor="rules")
        s.triage(pending=True, triager="rules")
        (lesson,) = s.candidates(queues=["needs_human"])
        insight = s.promote(lesson["id"], reason="earned on p04")
        (p04,) = s.list(project="p04")
        ids = {
            "insight": insight["id"],
            "p04": p04["id"],
            "calibration": s.store(
                "Calibration loop adjusts Preston kp from surface measurements", kind="project", project="p06"
            )["id"],
            "drift": s.store(
                "Polishing accuracy on the p06 bench drifts with pad temperature",
                kind="project",
                project="p06",
            )["id"],
        }
        assert insight["project"] == "" and insight["domains"] == ["materials"]
        assert p04["project"] == "p04-gigabit" and "M1 support pad" in p04["content"]
    return home, ids


def through_api(home: Path) -> dict[str, Any]:
    with Substrate.open(home, long_lived=False) as s:
        return s.build_context(QUERY, project="p06")


def through_cli(home: Path) -> dict[str, Any]:
    import json

    argv = ["--home", str(home), "--json", "context", "build", QUERY, "--project", "p06"]
    p = subprocess.run(
        [str(VENV_BIN / "mnemolog"), *argv],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    out: dict[str, Any] = json.loads(p.stdout)
    return out


def through_mcp(home: Path) -> dict[str, Any]:
    got: dict[str, Any] = {}

    async def fn(c: Any) -> None:
        err, res = await tool(c, "context_build", query=QUERY, project="p06")
        assert not err, res
        got.update(res)

    with_client(stdio_params(home), fn)
    return got


def through_http(home: Path) -> dict[str, Any]:
    with Substrate.open(home, long_lived=False) as s:
        client = TestClient(http_api.app(s, http_api.HttpSettings()), base_url="http://127.0.0.1")
        r = client.post("/context/build", json={"query": QUERY, "project": "p06"})
        assert r.status_code == 200, r.text
        out: dict[str, Any] = r.json()
        return out


def test_knowledge_earned_on_p04_reaches_a_p06_pack_through_every_door(
    seed: tuple[Path, dict[str, str]],
) -> None:
    home, ids = seed
    packs = {
        "api": through_api(home),
        "cli": through_cli(home),
        "mcp": through_mcp(home),
        "http": through_http(home),
    }
    texts = {door: p["text"].encode() for door, p in packs.items()}
    assert len(set(texts.values())) == 1, texts
    assert len({p["sha256"] for p in packs.values()}) == 1
    assert len({p["pack_id"] for p in packs.values()}) == 4  # each door recorded its own pack
    pack = packs["api"]
    by_tier = {t["name"]: [e["id"] for e in t["entries"]] for t in pack["tiers"]}
    assert by_tier["state"] == ["p06-polisher/decision/vendor_path"]
    assert set(by_tier["project"]) == {ids["calibration"], ids["drift"]}
    assert by_tier["domain"] == [ids["insight"]]
    assert pack["config"]["recall_mode"] == "hybrid"
    text = pack["text"]
    assert text.startswith(
        "## Trusted project state (p06-polisher)\n"
        f"- decision/vendor_path: {VENDOR_PATH}\n\n"
        "## Project memories (p06-polisher)\n"
    )
    assert "- [project] Calibration loop adjusts Preston kp from surface measurements\n" in text
    assert "## Domain knowledge\n- [materials] Zerodur CTE gradient dominates WFE contribution" in text
    # No p04 project memory, no p04 state: not in the pack, not even a candidate.
    assert "M1 support pad" not in text and "M1 integration" not in text
    assert ids["p04"] not in str(pack["tiers"]) and ids["p04"] not in str(pack["excluded"])
    # Every recorded pack re-renders byte for byte from the log, its quoted texts checked.
    with Substrate.open(home, long_lived=False) as s:
        for p in packs.values():
            shown = s.show_context(p["pack_id"])
            assert shown["text"].encode() == texts["api"] and shown["sources_checked"] == 4


def readme_context_example() -> tuple[str, str]:
    readme = (REPO / "README.md").read_text()
    start = readme.index("\n### Context packs and documents\n")
    section = readme[start : readme.index("\n## Agents: MCP and the HTTP API\n")]
    (script,) = re.findall(r"```sh\n(.*?)```", section, re.S)
    shown = re.search(r"```sh\n.*?```\n```\n(.*?)```", section, re.S)
    assert shown is not None
    return script, shown.group(1)


def test_the_readme_context_example_prints_what_the_readme_shows(tmp_path: Path) -> None:
    script, shown = readme_context_example()
    # A new user's environment: no MNEMOLOG_EMBED, so the home embeds with the default (MiniLM).
    env = {
        "HOME": str(tmp_path),
        "PATH": f"{VENV_BIN}:/usr/local/bin:/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "MNEMOLOG_HOME": str(tmp_path / "home"),
    }
    p = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", "mnemolog init >/dev/null\n" + script],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    assert p.stdout.endswith(shown), p.stdout
