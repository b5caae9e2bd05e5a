"""`mnemolog tenant ...`, `mnemolog token ...`, and `mnemolog mcp --token` as an operator runs them."""

from __future__ import annotations

import json
import os
from pathlib import Path

import anyio
import pytest
from mcp import Client, StdioServerParameters

from tests.support.cli import Cli


def test_tenants_and_their_tokens(cli: Cli, tmp_path: Path) -> None:
    root = str(tmp_path / "root")
    added = cli.ok(None, "tenant", "add", "acme", "--tenants", root)
    assert added["tenant"] == "acme" and added["vkey"]
    cli.ok(None, "tenant", "add", "globex", env={"MNEMOLOG_TENANTS": root})
    assert [t["tenant"] for t in cli.ok(None, "tenant", "list", "--tenants", root)["tenants"]] == [
        "acme",
        "globex",
    ]
    made = cli.ok(None,
        "token", "create", "--tenants", root, "--tenant", "acme", "--scope", "write",
        "--namespace", "agents/a", "--project", "p1", "--expires", "30d", "--rate", "60", "--label", "bot",
    )  # fmt: skip
    assert made["token"].startswith("mlt.acme.") and made["namespaces"] == ["agents/a"]
    listed = cli.ok(None, "token", "list", "--tenants", root, "--tenant", "acme")["tokens"]
    assert [t["token_id"] for t in listed] == [made["token_id"]]
    assert made["token"] not in json.dumps(listed) and listed[0]["state"] == "active"
    # Only the hash is on disk, in the tenant's log.
    logs = b"".join(p.read_bytes() for p in (tmp_path / "root" / "tenants" / "acme" / "log").rglob("*.seg"))
    assert made["token"].rsplit(".", 1)[1].encode() not in logs
    assert (
        cli.ok(None, "token", "revoke", made["token_id"], "--tenants", root, "--tenant", "acme")["revoked"]
        is True
    )
    again = cli(None, "token", "revoke", made["token_id"], "--tenants", root, "--tenant", "acme", json=True)
    assert again.code == 1
    assert cli.ok(None, "tenant", "remove", "globex", "--tenants", root)["tenant"] == "globex"
    assert [t["tenant"] for t in cli.ok(None, "tenant", "list", "--tenants", root)["tenants"]] == ["acme"]


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (("tenant", "add", "../x"), 64),
        (("tenant", "add", "Acme"), 64),
        (("tenant", "list"), 2),  # the root does not exist yet
        (("token", "create", "--tenant", "nosuch", "--scope", "read"), 6),
        (("token", "create", "--tenant", "acme", "--scope", "owner"), 64),
        (("token", "create", "--tenant", "acme", "--scope", "read", "--expires", "soon"), 64),
        (("token", "create", "--tenant", "acme", "--scope", "read", "--namespace", "a//b"), 65),
        (("tenant", "remove", "nosuch"), 2),
    ],
)
def test_refusals_exit_with_their_code(cli: Cli, tmp_path: Path, args: tuple[str, ...], code: int) -> None:
    root = str(tmp_path / "root")
    if args[0] == "token" or args[:2] == ("tenant", "remove"):
        cli.ok(None, "tenant", "add", "acme", "--tenants", root)
    p = cli(None, *args, "--tenants", root, json=True)
    assert p.code == code, p.stdout + p.stderr


def test_token_commands_on_a_home_served_alone(cli: Cli, tmp_path: Path) -> None:
    home = str(tmp_path / "home")
    cli.ok(None, "--home", home, "init")
    made = cli.ok(None, "--home", home, "token", "create", "--scope", "read")
    assert made["token"].startswith("mlt._.")
    assert (
        cli(None, "token", "create", "--tenant", "acme", "--scope", "read", json=True).code == 64
    )  # no root given


def test_mcp_with_a_token_serves_its_scope(cli: Cli, tmp_path: Path) -> None:
    home = tmp_path / "home"
    cli.ok(None, "--home", str(home), "init")
    cli.ok(None, "--home", str(home), "store", "BSECRET of agent b", "--namespace", "agents/b")
    token = cli.ok(
        None, "--home", str(home), "token", "create", "--scope", "write", "--namespace", "agents/a"
    )["token"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("MNEMOLOG_")}
    env["MNEMOLOG_TOKEN"] = token
    import sys

    params = StdioServerParameters(
        command=sys.executable, args=["-m", "mnemolog.cli.main", "--home", str(home), "mcp"], env=env
    )

    async def main() -> None:
        async with Client(params, read_timeout_seconds=120) as c:
            stored = await c.call_tool("memory_store", {"content": "mine", "namespace": "agents/a"})
            assert not stored.is_error
            refused = await c.call_tool("memory_store", {"content": "x", "namespace": "agents/b"})
            assert refused.is_error and refused.structured_content["error"] == "scope_refused"  # type: ignore[index]
            found = await c.call_tool("memory_recall", {"query": "BSECRET mine agent"})
            assert "BSECRET" not in json.dumps(found.structured_content["results"])  # type: ignore[index]

    anyio.run(main)


def test_any_command_works_on_a_tenant_with_the_global_tenant_option(cli: Cli, tmp_path: Path) -> None:
    root = str(tmp_path / "root")
    cli.ok(None, "tenant", "add", "acme", "--tenants", root)
    mem0 = tmp_path / "mem0.json"
    mem0.write_text(json.dumps({"results": [{"id": "m-1", "memory": "Alice likes tea", "user_id": "alice"}]}))
    cli.ok(None, "--tenants", root, "--tenant", "acme", "embeddings", "set", "off")
    assert cli.ok(
        None, "--tenants", root, "--tenant", "acme", "import", "--from", "mem0", str(mem0), "--trust"
    )
    out = tmp_path / "acme.jsonl"
    cli.ok(None, "--tenant", "acme", "export", "--to", "jsonl", str(out), env={"MNEMOLOG_TENANTS": root})
    assert "Alice likes tea" in out.read_text()
    made = cli.ok(None, "--tenants", root, "--tenant", "acme", "token", "create", "--scope", "read")
    assert made["token"].startswith("mlt.acme.")
    assert (
        cli(
            None, "--home", str(tmp_path / "h"), "--tenant", "acme", "--tenants", root, "stats", json=True
        ).code
        == 64
    )
    assert cli(None, "--tenant", "acme", "stats", json=True).code == 64  # no root
    assert cli(None, "--tenants", root, "--tenant", "nosuch", "stats", json=True).code == 6  # no such home
