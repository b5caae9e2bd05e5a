"""The README works as written: its Quick start runs verbatim in a clean shell, what it names exists."""

from __future__ import annotations

import http.server
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, ClassVar

import pytest

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text()
VENV_BIN = Path(sys.executable).parent


def section(title: str) -> str:
    start = README.index(f"\n{title}\n")
    nxt = re.search(r"\n#{2,3} ", README[start + len(title) + 2 :])
    return README[start : start + len(title) + 2 + (nxt.start() if nxt else len(README))]


def sh_blocks(text: str) -> list[str]:
    return re.findall(r"```sh\n(.*?)```", text, re.S)


def clean_env(home: Path) -> dict[str, str]:
    """A new login's environment: no venv, no MNEMOLOG_*, no PYTHONPATH."""
    return {"HOME": str(home), "PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "TERM": "dumb"}


def test_every_file_the_readme_names_exists() -> None:
    named = set(re.findall(r"(?<![\w/.])(examples/[\w./-]+\w)", README))
    named |= set(re.findall(r"\((docs/[\w.-]+\.md)\)", README))
    assert "examples/post-mortem.txt" in named and "examples/agent_loop.py" in named
    for rel in sorted(named):
        assert (REPO / rel).exists(), f"README names {rel}, which is not in the repository"


def test_the_post_mortem_is_the_demo_s() -> None:
    from mnemolog.cli.demo import POST_MORTEM

    assert (REPO / "examples" / "post-mortem.txt").read_text() == POST_MORTEM


def test_license_matches_pyproject() -> None:
    assert 'license = "Apache-2.0"' in (REPO / "pyproject.toml").read_text()
    text = (REPO / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text


def test_the_ollama_recipe_matches_what_init_writes() -> None:
    from mnemolog.curators.config import HOST_ENV, MODEL_ENV
    from mnemolog.substrate.home import default_config_text

    written = default_config_text("k")
    quick = section("## Quick start")
    model = re.search(r"export (\w+)=(\w+)", quick)
    assert model and model.group(1) == MODEL_ENV
    assert f'# model = "{model.group(2)}"' in written
    assert f'[llm] model = "{model.group(2)}"' in quick
    # The first block is what init writes; the [embeddings] block after it is not.
    config = section("## Configuration").split("```toml", 1)[1].split("```", 1)[0]
    for line in re.findall(r"^(host|model) = (\"[^\"]+\")", config, re.M):
        assert f"# {line[0]} = {line[1]}" in written, line
    assert HOST_ENV in config and MODEL_ENV in config


def test_the_mcp_configs_start_the_server(tmp_path: Path) -> None:
    import anyio
    from mcp import Client, StdioServerParameters

    from mnemolog.substrate.home import init_home

    for name in ("mcp.json", "vscode-mcp.json", "http.json"):
        json.loads((REPO / "examples" / "mcp" / name).read_text())
    entry = json.loads((REPO / "examples" / "mcp" / "mcp.json").read_text())["mcpServers"]["mnemolog"]
    vscode = json.loads((REPO / "examples" / "mcp" / "vscode-mcp.json").read_text())["servers"]["mnemolog"]
    assert (vscode["command"], vscode["args"]) == (entry["command"], entry["args"])
    init_home(tmp_path / "home")
    env = {**os.environ, "PATH": f"{VENV_BIN}:{os.environ['PATH']}", "MNEMOLOG_HOME": str(tmp_path / "home")}
    command = shutil.which(entry["command"], path=env["PATH"])
    assert command is not None

    async def main() -> None:
        params = StdioServerParameters(command=command, args=entry["args"], env=env)
        async with Client(params) as c:
            names = {t.name for t in (await c.list_tools()).tools}
            assert "memory_recall" in names

    anyio.run(main)


def test_the_agent_loop_runs_offline(tmp_path: Path) -> None:
    env = {**os.environ, "MNEMOLOG_HOME": str(tmp_path / "home")}
    p = subprocess.run(
        [sys.executable, str(REPO / "examples" / "agent_loop.py")],
        capture_output=True, text=True, env=env, timeout=300, check=False,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    assert "stored as decision" in p.stdout and "From memory (decision" in p.stdout
    assert "From memory (user" in p.stdout


class _Capture(http.server.BaseHTTPRequestHandler):
    received: ClassVar[list[dict[str, Any]]] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        _Capture.received.append({"path": self.path, "auth": self.headers.get("Authorization"), "body": body})
        out = json.dumps({"ok": True, "interaction": {"id": "01INTERACTION"}}).encode()
        self.send_response(201)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *args: Any) -> None:
        pass


def run_hook(event: dict[str, Any], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(REPO / "examples" / "hooks" / "claude_code_stop_hook.py")],
        input=json.dumps(event), capture_output=True, text=True, env=env, timeout=60, check=False,
    )  # fmt: skip


def test_the_stop_hook_posts_the_last_turn(tmp_path: Path) -> None:
    transcript = tmp_path / "t.jsonl"
    rows = [
        {"type": "user", "message": {"role": "user", "content": "an earlier question"}},
        {"type": "assistant", "message": {"role": "assistant", "content": [{"type": "text", "text": "old"}]}},
        {"type": "user", "message": {"role": "user", "content": "Why did checkout fail?"}},
        {"type": "assistant", "message": {"content": [{"type": "tool_use", "name": "Read", "input": {}}]}},
        {"type": "user", "message": {"content": [{"type": "tool_result", "content": "file text"}]}},
        {"type": "assistant", "message": {"content": [{"type": "text", "text": "The pool was exhausted."}]}},
    ]
    transcript.write_text("\n".join(json.dumps(r) for r in rows) + "\nnot json\n")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Capture)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    _Capture.received.clear()
    env = {
        "PATH": os.environ["PATH"],
        "MNEMOLOG_URL": f"http://127.0.0.1:{server.server_address[1]}",
        "MNEMOLOG_TOKEN": "tok-0123456789abcdef",
    }
    event = {
        "session_id": "s1",
        "transcript_path": str(transcript),
        "cwd": "/work/shop",
        "stop_hook_active": False,
    }
    try:
        p = run_hook(event, env)
        assert p.returncode == 0 and "captured the turn 01INTERACTION" in p.stderr
        (got,) = _Capture.received
        assert got["path"] == "/interactions" and got["auth"] == "Bearer tok-0123456789abcdef"
        assert got["body"] == {
            "prompt": "Why did checkout fail?",
            "response": "The pool was exhausted.",
            "client": "claude-code",
            "session": "s1",
            "project": "shop",
        }
        assert run_hook({**event, "stop_hook_active": True}, env).returncode == 0
        assert len(_Capture.received) == 1  # a prolonged turn is not posted twice
    finally:
        server.shutdown()
    # No server, no transcript, garbage on stdin: a line on stderr, exit 0, never in Claude's way.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    p = run_hook(event, {**env, "MNEMOLOG_URL": f"http://127.0.0.1:{dead}"})
    assert p.returncode == 0 and "mnemolog hook:" in p.stderr
    p = run_hook({**event, "transcript_path": str(tmp_path / "missing")}, env)
    assert p.returncode == 0 and "no transcript" in p.stderr
    p = subprocess.run(
        [sys.executable, str(REPO / "examples" / "hooks" / "claude_code_stop_hook.py")],
        input="{not json", capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert p.returncode == 0 and "mnemolog hook:" in p.stderr


@pytest.mark.slow
def test_the_quick_start_runs_verbatim_in_a_clean_shell(tmp_path: Path) -> None:
    (quick, _ollama) = sh_blocks(section("## Quick start"))
    http_block = sh_blocks(section("### The HTTP API"))[0]
    with socket.socket() as s:
        port_free = s.connect_ex(("127.0.0.1", 8100)) != 0
    script = quick + (http_block if port_free else "")
    p = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=REPO, env=clean_env(tmp_path), capture_output=True, text=True, timeout=1800, check=False,
    )  # fmt: skip
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    out = p.stdout
    assert "demo finished" in out.lower() or "ok" in out.lower()
    assert "Prefer pg_repack over ALTER TABLE" in out  # the first recall found the decision
    assert "atomised " in out and "atom-of:" in out  # the second recall returned an atom
    assert re.search(r"ok: \d+ entries", out)  # log verify
    if port_free:
        assert '"ok": true, "version"' in out and '"results": [{' in out
