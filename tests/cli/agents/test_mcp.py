"""`mnemolog mcp`: the SDK's own client against a real server process, over stdio and streamable HTTP."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import mcp_types as types
import pytest
from mcp import Client, StdioServerParameters

from mnemolog.substrate.home import init_home
from tests.support.cli import Cli

NEWEST = "2026-07-28"
NEWEST_HANDSHAKE = "2025-11-25"


def server_argv(home: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "mnemolog.cli.main", "--home", str(home), "mcp", *extra]


def stdio_params(home: Path) -> StdioServerParameters:
    return StdioServerParameters(
        command=server_argv(home)[0], args=server_argv(home)[1:], env=dict(os.environ)
    )


def with_client(target: Any, fn: Callable[[Client], Awaitable[None]], mode: str = "auto") -> None:
    async def main() -> None:
        async with Client(target, mode=mode, read_timeout_seconds=120) as c:
            await fn(c)

    anyio.run(main)


async def tool(c: Client, name: str, **args: Any) -> tuple[bool, dict[str, Any]]:
    r = await c.call_tool(name, args)
    assert isinstance(r, types.CallToolResult)
    # Structured content and the text block say the same thing.
    assert json.loads(r.content[0].text) == r.structured_content  # type: ignore[union-attr]
    return r.is_error, r.structured_content


@pytest.fixture
def home(tmp_path: Path) -> Path:
    init_home(tmp_path / "home")
    return tmp_path / "home"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def http_server(home: Path) -> Iterator[str]:
    port = free_port()
    p = subprocess.Popen(server_argv(home, "--http", f"127.0.0.1:{port}"), stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            break
        except OSError:
            assert p.poll() is None, p.stderr.read() if p.stderr else ""
            assert time.monotonic() < deadline, "the MCP HTTP server did not start"
            time.sleep(0.1)
    try:
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        p.terminate()
        assert p.wait(timeout=30) == 0  # a clean shutdown: the home closed, no traceback
        assert b"Traceback" not in (p.stderr.read() if p.stderr else b"")


# -- the protocol -------------------------------------------------------------------------


def test_newest_protocol_tools_annotations_and_schemas(home: Path) -> None:
    async def fn(c: Client) -> None:
        assert c.protocol_version == NEWEST
        tools = {t.name: t for t in (await c.list_tools()).tools}
        assert {
            "memory_store", "memory_recall", "memory_search", "memory_get", "memory_list", "memory_link",
            "memory_update", "memory_archive", "memory_restore", "memory_atomise", "memory_stats",
            "memory_history", "log_verify", "bundle_export", "bundle_verify",
        } <= set(tools)  # fmt: skip
        for t in tools.values():
            assert t.title and t.description and t.annotations is not None
            assert t.output_schema and t.output_schema["type"] == "object"
            assert t.input_schema["type"] == "object"
            assert t.input_schema.get("additionalProperties") is False
        assert tools["memory_recall"].annotations.read_only_hint is True  # type: ignore[union-attr]
        assert tools["memory_store"].annotations.read_only_hint is False  # type: ignore[union-attr]
        assert tools["memory_store"].annotations.destructive_hint is False  # type: ignore[union-attr]
        assert tools["memory_update"].annotations.destructive_hint is True  # type: ignore[union-attr]
        assert tools["memory_archive"].annotations.idempotent_hint is True  # type: ignore[union-attr]
        kinds = tools["memory_list"].input_schema["properties"]["kinds"]
        assert kinds["type"] == "array"

    with_client(stdio_params(home), fn)


def test_handshake_era_is_served_too(home: Path) -> None:
    async def fn(c: Client) -> None:
        assert c.protocol_version == NEWEST_HANDSHAKE
        err, out = await tool(c, "memory_store", content="stored over the handshake era")
        assert not err and out["memory"]["content"] == "stored over the handshake era"

    with_client(stdio_params(home), fn, mode="legacy")


def test_arguments_are_validated_against_the_schema(home: Path) -> None:
    async def fn(c: Client) -> None:
        err, out = await tool(c, "memory_store", content="x", tags="x")
        assert err and out["exit_code"] == 64 and out["details"]["field"] == "tags"
        assert "valid list" in out["message"]
        err, out = await tool(c, "memory_list", kinds="decision")
        assert err and out["exit_code"] == 64 and out["details"]["field"] == "kinds"
        assert "decision" in out["message"] and "unknown kind 'd'" not in out["message"]
        err, out = await tool(c, "memory_list", kinds=["decisions"])
        assert err and out["details"]["field"] == "kinds.0"
        err, out = await tool(c, "memory_store", content="x", bogus=1)
        assert err and out["exit_code"] == 64 and out["details"]["field"] == "bogus"
        err, out = await tool(c, "memory_recall")
        assert err and out["details"]["field"] == "query"
        err, out = await tool(c, "memory_recall", query="x", limit="5")
        assert err and out["details"]["field"] == "limit"  # strict: a string is not a number
        err, out = await tool(c, "memory_store", content="x", confidence=2)
        assert err and out["details"]["field"] == "confidence"
        err, out = await tool(c, "memory_store", content="")
        assert err and out["exit_code"] == 65
        err, out = await tool(c, "memory_get", id="01ABCDEFGHJKMNPQRSTVWXYZ00")
        assert err and out["error"] == "not_found" and out["exit_code"] == 2
        # Nothing of that reached the log.
        err, out = await tool(c, "memory_stats")
        assert not err and out["stats"]["memories"] == 0
        with pytest.raises(Exception, match="nope"):
            await c.call_tool("nope", {})

    with_client(stdio_params(home), fn)


def test_compact_by_default_verbose_on_request(home: Path) -> None:
    async def fn(c: Client) -> None:
        err, out = await tool(
            c, "memory_store", content="Prefer pg_repack over ALTER TABLE for big tables.", kind="decision",
            title="pg_repack", namespace="ops/db", tags=["db"], metadata={"ticket": "OPS-1"},
        )  # fmt: skip
        assert not err
        m = out["memory"]
        assert set(m) == {"id", "namespace", "kind", "title", "content", "tags", "created_at"}
        assert m["created_at"].endswith("Z") and "T" in m["created_at"]
        err, out = await tool(c, "memory_get", id=m["id"], verbose=True)
        v = out["memory"]
        assert v["metadata"] == {"ticket": "OPS-1"} and v["stored_seq"] >= 1
        assert v["created_at"] == m["created_at"] and v["archived_at"] is None
        assert v["links"] == {"outgoing": [], "incoming": []}
        err, hits = await tool(c, "memory_recall", query="rewrite a big table")
        assert not err and hits["results"][0]["id"] == m["id"] and "score" in hits["results"][0]
        err, listed = await tool(c, "memory_list", kinds=["decision"], namespace="ops")
        assert [x["id"] for x in listed["memories"]] == [m["id"]]

    with_client(stdio_params(home), fn)


def test_every_tool_end_to_end_with_history_and_audit(home: Path, tmp_path: Path) -> None:
    async def fn(c: Client) -> None:
        _, a = await tool(c, "memory_store", content="Workers timed out because the pool was exhausted.")
        _, b = await tool(
            c, "memory_store", content="Raise the pool size to 50 on checkout.", kind="decision"
        )
        a_id, b_id = a["memory"]["id"], b["memory"]["id"]
        err, link = await tool(c, "memory_link", src=b_id, dst=a_id, relation="derived_from")
        assert (
            not err
            and link["link"]["relation"] == "derived_from"
            and link["link"]["created_at"].endswith("Z")
        )
        err, up = await tool(c, "memory_update", id=a_id, title="Pool exhaustion", metadata={"k": 1})
        assert not err and up["memory"]["title"] == "Pool exhaustion"
        err, up = await tool(c, "memory_update", id=a_id, metadata={"k": None}, verbose=True)
        assert not err and up["memory"]["metadata"] == {}
        err, ar = await tool(c, "memory_archive", id=a_id, reason="superseded")
        assert not err and ar["memory"]["archived"] is True
        err, hits = await tool(c, "memory_search", query="workers")
        assert not err and hits["results"] == []
        err, re = await tool(c, "memory_restore", id=a_id)
        assert not err and "archived" not in re["memory"]
        err, hist = await tool(c, "memory_history", id=a_id)
        assert not err
        kinds = [e["type"] for e in hist["events"]]
        assert kinds == [
            "memory.stored", "link.created", "memory.updated", "memory.updated", "memory.archived",
            "memory.restored",
        ]  # fmt: skip
        assert all(e["signature"] == "verified" and e["ts"].endswith("Z") for e in hist["events"])
        assert [e["seq"] for e in hist["events"]] == sorted(e["seq"] for e in hist["events"])
        err, st = await tool(c, "memory_stats")
        assert not err and st["stats"]["memories"] == 2 and st["stats"]["links"] == 1
        err, ver = await tool(c, "log_verify")
        assert not err and ver["entries"] >= 8 and "entry_signatures" in ver["checks"]
        # Clients name files only in the home's exchange folder by default (`[server] paths`).
        err, outside = await tool(c, "bundle_export", memory_id=a_id, output=str(tmp_path / "a.tar"))
        assert err and outside["error"] == "path_not_allowed" and not (tmp_path / "a.tar").exists()
        out = home / "bundles" / "a.tar"
        out.parent.mkdir(exist_ok=True)
        err, ex = await tool(c, "bundle_export", memory_id=a_id, output=str(out))
        assert not err and ex["path"] == str(out) and out.stat().st_size == ex["bytes"]
        err, vb = await tool(c, "bundle_verify", path=str(out))
        assert not err and vb["memory_id"] == a_id and not vb["trust"]["pinned"]
        err, ex2 = await tool(c, "bundle_export", memory_id=b_id)
        assert not err and Path(ex2["path"]).parent == home / "bundles"
        # A forged bundle is refused with the verification error (exit 8).
        data = bytearray(out.read_bytes())
        i = data.find(b"memory.stored")
        data[i] ^= 1
        out.write_bytes(bytes(data))
        err, bad = await tool(c, "bundle_verify", path=str(out))
        assert err and bad["exit_code"] == 8
        # Too short to split: "nothing to do" is exit 1, the same object the CLI prints.
        err, at = await tool(c, "memory_atomise", id=b_id, curator="rules")
        assert err and at["exit_code"] == 1
        long = " ".join(
            f"Section {i}. The checkout workers stalled for reason number {i}." for i in range(60)
        )
        _, big = await tool(c, "memory_store", content=long)
        err, at = await tool(c, "memory_atomise", id=big["memory"]["id"], curator="rules")
        assert not err and at["atom_count"] >= 2 and at["archived_at"]
        err, again = await tool(c, "memory_atomise", id=big["memory"]["id"], curator="rules")
        assert not err and again["already_atomised"] is True and again["atom_ids"] == at["atom_ids"]

    with_client(stdio_params(home), fn)


def test_history_refuses_a_forged_signature(home: Path) -> None:
    from mnemolog.substrate.api import Substrate

    with Substrate.open(home, long_lived=False) as s:
        m = s.store("A memory whose signature will be forged.")
        seq = m["stored_seq"]
    seg = sorted((home / "log").glob("*.seg"))[0]
    raw = bytearray(seg.read_bytes())
    with Substrate.open(home, long_lived=False) as s:
        entry = s.log.entry(seq)
    i = raw.find(entry.sig)
    assert i > 0
    raw[i + 5] ^= 0x01
    seg.write_bytes(bytes(raw))
    # The projection notices a replaced entry by its leaf hash; rebuilt from the forged log,
    # it no longer can: the signature is what catches it.
    import shutil

    shutil.rmtree(home / "projections")
    (home / "projections").mkdir()

    async def fn(c: Client) -> None:
        err, out = await tool(c, "memory_history", id=m["id"])
        assert err and out["exit_code"] == 8, out
        assert out["details"]["check"] == "entry.signature"
        assert out["details"]["seq"] == seq

    with_client(stdio_params(home), fn)


def test_resources_and_prompt(home: Path) -> None:
    async def fn(c: Client) -> None:
        _, s = await tool(
            c, "memory_store", content="Always run migrations in a transaction.", kind="decision"
        )
        mid = s["memory"]["id"]
        listed = await c.list_resources()
        assert [str(r.uri) for r in listed.resources] == ["mnemolog://vault/INDEX.md"]
        templates = await c.list_resource_templates()
        assert [t.uri_template for t in templates.resource_templates] == ["memory://{id}"]
        r = await c.read_resource(f"memory://{mid}")
        body = json.loads(r.contents[0].text)  # type: ignore[union-attr]
        assert body["id"] == mid and body["kind"] == "decision" and "links" in body
        idx = await c.read_resource("mnemolog://vault/INDEX.md")
        text = idx.contents[0].text  # type: ignore[union-attr]
        assert text.startswith("# ") and "Always run migrations in a transaction" in text
        with pytest.raises(Exception, match="no memory"):
            await c.read_resource("memory://01ABCDEFGHJKMNPQRSTVWXYZ00")
        prompts = await c.list_prompts()
        assert [p.name for p in prompts.prompts] == ["use-memory"]
        p = await c.get_prompt("use-memory", {"namespace": "ops"})
        text = p.messages[0].content.text  # type: ignore[union-attr]
        assert "memory_recall" in text and "memory_store" in text and '"ops"' in text

    with_client(stdio_params(home), fn)


def test_streamable_http_both_eras_beside_the_cli(cli: Cli, home: Path, http_server: str) -> None:
    async def newest(c: Client) -> None:
        assert c.protocol_version == NEWEST
        err, _out = await tool(c, "memory_store", content="Stored over streamable HTTP about kafka lag.")
        assert not err

    async def handshake(c: Client) -> None:
        assert c.protocol_version == NEWEST_HANDSHAKE
        err, hits = await tool(c, "memory_recall", query="kafka")
        assert not err and len(hits["results"]) == 2

    with_client(http_server, newest)
    ran = cli.process(home, "store", "The CLI stored this note about kafka consumers.", json=True)
    code, _out = ran.code, ran.doc
    assert code == 0
    with_client(http_server, handshake, mode="legacy")


def test_streamable_http_refuses_rebinding_hosts(http_server: str) -> None:
    init = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    headers = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
    for host in ("127.evil.com", "127.0.0.1.attacker.example", "[::1]attacker.example", "attacker.example"):
        r = httpx.post(http_server, json=init, headers={**headers, "host": host}, timeout=30)
        assert r.status_code == 421 and r.json()["error"] == "forbidden_host", host
        r = httpx.get(http_server.replace("/mcp", "/elsewhere"), headers={"host": host}, timeout=30)
        assert r.status_code == 421, host


def test_http_refuses_a_non_loopback_address(home: Path) -> None:
    r = subprocess.run(
        server_argv(home, "--http", "0.0.0.0:8765"), capture_output=True, text=True, timeout=60, check=False
    )
    assert r.returncode == 64 and "loopback" in r.stderr


def test_server_and_cli_share_a_home(cli: Cli, home: Path) -> None:
    async def fn(c: Client) -> None:
        err, stored = await tool(
            c, "memory_store", content="The MCP server stored this note about kafka lag."
        )
        assert not err
        # A CLI command in another process, while the server holds the store open.
        ran = cli.process(home, "store", "The CLI stored this note about kafka consumers.", json=True)
        code, out = ran.code, ran.doc
        assert code == 0
        ran = cli.process(home, "recall", "kafka", json=True)
        code, found = ran.code, ran.doc
        assert code == 0 and {r["id"] for r in found["results"]} == {
            stored["memory"]["id"],
            out["memory"]["id"],
        }
        err, hits = await tool(c, "memory_recall", query="kafka consumers")
        assert not err and hits["results"][0]["id"] == out["memory"]["id"]

    with_client(stdio_params(home), fn)


# -- hostile lines over a real stdio pipe (issue: the server died on one line) -------------


class Pipe:
    def __init__(self, home: Path, env: dict[str, str]) -> None:
        self.p = subprocess.Popen(
            server_argv(home), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
        )

    def line(self, data: bytes) -> dict[str, Any]:
        assert self.p.stdin and self.p.stdout
        self.p.stdin.write(data + b"\n")
        self.p.stdin.flush()
        out = self.p.stdout.readline()
        assert out, (self.p.stderr.read() if self.p.stderr else b"")[-2000:]
        value = json.loads(out)  # strict JSON: no Infinity, no NaN
        assert isinstance(value, dict)
        return value

    def alive(self) -> None:
        assert self.line(b'{"jsonrpc":"2.0","id":"p","method":"ping"}') == {
            "jsonrpc": "2.0",
            "id": "p",
            "result": {},
        }

    def peak_rss_mib(self) -> float:
        for row in Path(f"/proc/{self.p.pid}/status").read_text().splitlines():
            if row.startswith("VmHWM:"):
                return int(row.split()[1]) / 1024
        raise AssertionError("no VmHWM")

    def close(self) -> int:
        assert self.p.stdin
        self.p.stdin.close()
        code = self.p.wait(timeout=60)
        assert b"Traceback" not in (self.p.stderr.read() if self.p.stderr else b"")
        return code


HOSTILE = [
    (b"[" * 100_000, -32700),
    (b"{" * 100_000, -32700),
    (b'{"jsonrpc":"2.0","id":1,"method":"ping"}\xff', -32700),
    (b"\xff\xfe\x00garbage", -32700),
    (b'{"id":1e400}', -32600),
    (b'{"jsonrpc":"2.0","id":1e400,"method":"ping"}', -32600),
    (b'{"jsonrpc":"2.0","id":NaN,"method":"ping"}', -32700),
    (b'{"jsonrpc":"2.0","id":true,"method":"ping"}', -32600),
    (b'[{"jsonrpc":"2.0","id":1,"method":"ping"}]', -32600),
    (b"42", -32600),
    (b'"\\ud800"', -32700),  # a lone surrogate is not text: refused by the parser
    (b'{"jsonrpc":"2.0","id":3,"method":"no/such"}', -32601),
    (b'{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":5}}', -32602),
    (b'{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"nope","arguments":{}}}', -32602),
]


@pytest.mark.parametrize("locale", ["C.UTF-8", "C"])
def test_every_hostile_line_gets_an_error_and_the_server_keeps_serving(home: Path, locale: str) -> None:
    env = {**os.environ, "LC_ALL": locale, "PYTHONIOENCODING": "utf-8:strict", "PYTHONUTF8": "0"}
    pipe = Pipe(home, env)
    init = pipe.line(
        b'{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25",'
        b'"capabilities":{},"clientInfo":{"name":"t","version":"1"}}}'
    )
    assert init["result"]["protocolVersion"] == NEWEST_HANDSHAKE
    for line, code in HOSTILE:
        out = pipe.line(line)
        assert "error" in out and out["error"]["code"] == code, (line[:60], out)
        pipe.alive()
    # A request after all that still works.
    out = pipe.line(
        b'{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"memory_store",'
        b'"arguments":{"content":"still here"}}}'
    )
    assert out["id"] == 9 and out["result"]["isError"] is False
    assert pipe.close() == 0


def test_an_oversized_line_is_read_with_a_bound(home: Path) -> None:
    pipe = Pipe(home, dict(os.environ))
    pipe.alive()
    before = pipe.peak_rss_mib()
    big = b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":"' + b"x" * (200 * 1024 * 1024) + b'"}}'
    out = pipe.line(big)
    assert out["id"] is None and out["error"]["code"] == -32600 and "larger than" in out["error"]["message"]
    pipe.alive()
    # The line was never held: the peak grew by far less than its 200 MB.
    assert pipe.peak_rss_mib() - before < 64
    assert pipe.close() == 0


def test_context_and_knowledge_tools_are_served(home: Path) -> None:
    async def fn(c: Client) -> None:
        tools = {t.name: t for t in (await c.list_tools()).tools}
        assert {"context_build", "context_show", "capture_interaction", "candidates_list"} <= set(tools)
        assert tools["context_show"].annotations.read_only_hint is True  # type: ignore[union-attr]
        err, _ = await tool(
            c, "memory_store", content="Zerodur CTE gradient dominates thermal WFE", kind="knowledge"
        )
        assert not err
        err, pack = await tool(c, "context_build", query="thermal effects on polishing accuracy", budget=500)
        assert not err and pack["pack_id"] and "Zerodur" in pack["text"]
        err, shown = await tool(c, "context_show", pack_id=pack["pack_id"])
        assert not err and shown["text"] == pack["text"] and shown["verified"] is True
        err, out = await tool(c, "context_build", query="q", unit="words")
        assert err and out["exit_code"] == 64
        err, out = await tool(c, "context_show", pack_id="01NOSUCHPACK00000000000000")
        assert err and out["exit_code"] == 2
        err, out = await tool(c, "context_build", query="q", record=False)
        assert not err and out["pack_id"] is None
        # The memory tools carry the knowledge loop's fields.
        err, out = await tool(c, "memory_store", content="the p04 mirror cell", project="p04", verbose=True)
        assert not err and out["memory"]["project"] == "p04" and out["memory"]["status"] == "active"
        err, out = await tool(c, "memory_list", project="p04")
        assert not err and [m["content"] for m in out["memories"]] == ["the p04 mirror cell"]
        err, out = await tool(c, "memory_list", statuses=["bogus"])
        assert err and out["exit_code"] == 64

    with_client(stdio_params(home), fn)
