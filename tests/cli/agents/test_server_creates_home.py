"""`mnemolog mcp` and `mnemolog serve` pointed at a home that does not exist yet create it.

Real processes: an agent's client starts the server with a path and nothing
else, and what it sees (a working server, the diagnostics on stderr only) is
what is under test. `--no-create` keeps the refusal.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx

from mnemolog.substrate.home import Home
from tests.cli.agents.test_http_api import Server
from tests.support.mcp_client import REPO, Client


def test_mcp_creates_a_missing_home_and_says_where_on_stderr(tmp_path: Path) -> None:
    root = tmp_path / "deep" / "new-home"
    client = Client(root)
    is_error, out = client.tool("memory_store", content="The first memory of a new home")
    assert not is_error, out
    is_error, hits = client.tool("memory_recall", query="first memory")
    assert not is_error and [h["id"] for h in hits["results"]] == [out["memory"]["id"]]
    assert client.close() == 0
    err = client.p.stderr.read() if client.p.stderr else ""
    assert f"mnemolog mcp: created a new home at {root}" in err
    assert "public key " in err and Home(root).exists()
    assert (root.stat().st_mode & 0o777) == 0o700


def test_serve_creates_a_missing_home_and_says_where_on_stderr(tmp_path: Path) -> None:
    root = tmp_path / "new-home"
    server = Server(root)
    try:
        r = httpx.post(f"{server.url}/memory", json={"content": "Served from a new home"}, timeout=30)
        assert r.status_code == 201, r.text
    finally:
        err = server.stop()
    assert f"mnemolog serve: created a new home at {root}" in err
    assert "public key " in err
    assert Home(root).exists()


def run_refused(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mnemolog.cli.main", "--home", str(root), *args, "--no-create"],
        input="",
        capture_output=True,
        text=True,
        timeout=60,
        check=False,  # the exit code is what is asserted
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )


def test_no_create_keeps_the_refusal(tmp_path: Path) -> None:
    root = tmp_path / "absent"
    for args in (("mcp",), ("serve", "--listen", "127.0.0.1:1")):
        done = run_refused(root, *args)
        assert done.returncode != 0 and "no mnemolog home at" in done.stderr, done.stderr
        assert done.stdout == ""
    assert not root.exists()


def test_a_directory_holding_something_else_is_not_taken_over(tmp_path: Path) -> None:
    root = tmp_path / "busy"
    root.mkdir()
    (root / "notes.txt").write_text("not a home")
    done = subprocess.run(
        [sys.executable, "-m", "mnemolog.cli.main", "--home", str(root), "mcp"],
        input="",
        capture_output=True,
        text=True,
        timeout=60,
        check=False,  # the exit code is what is asserted
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert done.returncode != 0 and "is not a mnemolog home" in done.stderr
    assert sorted(p.name for p in root.iterdir()) == ["notes.txt"]
