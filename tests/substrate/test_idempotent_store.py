"""A store is durable or it is not: no phantom writes, and an id stores at most one memory.

`store --id ULID` (API `memory_id`, MCP `id`) makes a retry safe: the same id
and memory return the stored one with `already_stored: true`; different
content under a stored id is refused (65). Once an entry is durable the
command succeeds: a projection that cannot fold it, or a closing checkpoint
that cannot be written, is a warning.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from mnemolog.eventlog.errors import BadInput, StorageError
from mnemolog.eventlog.store.log import Log
from mnemolog.projections.engine import Projections
from mnemolog.substrate.api import Substrate
from mnemolog.substrate.home import Home
from mnemolog.substrate.ids import new_id
from tests.projections.kit import log_digest, new_home
from tests.support.cli import Cli
from tests.support.mcp_client import Client

EXE = Path(sys.executable).with_name("mnemolog")


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return new_home(tmp_path / "home").root


@pytest.fixture
def sub(home: Path) -> Iterator[Substrate]:
    s = Substrate.open(home, long_lived=False, worker=False)
    yield s
    s.close()


def stores_of(home: Path, mid: str) -> int:
    with Log(home / "log") as log:
        return sum(1 for e in log.iter_entries(0) if e.type == "memory.stored" and e.data["id"] == mid)


def test_a_retry_with_the_same_id_and_memory_returns_it(sub: Substrate, home: Path) -> None:
    mid = new_id()
    first = sub.store("The deploy raised the pool size.", memory_id=mid, tags=["ops"], title="Pool")
    assert first["id"] == mid and "already_stored" not in first
    before = log_digest(home)
    again = sub.store("The deploy raised the pool size.", memory_id=mid, tags=["ops"], title="Pool")
    assert again["already_stored"] is True and again["id"] == mid
    assert log_digest(home) == before and stores_of(home, mid) == 1


def test_the_original_store_decides_even_after_an_update(sub: Substrate, home: Path) -> None:
    mid = new_id()
    sub.store("original text", memory_id=mid)
    sub.update(mid, content="updated text")
    assert sub.store("original text", memory_id=mid)["already_stored"] is True
    with pytest.raises(BadInput):
        sub.store("updated text", memory_id=mid)


@pytest.mark.parametrize(
    "change", [{"content": "other text"}, {"namespace": "elsewhere"}, {"title": "Other"}, {"tags": ["x"]}]
)
def test_a_different_memory_under_a_stored_id_is_refused(
    sub: Substrate, home: Path, change: dict[str, Any]
) -> None:
    mid = new_id()
    base: dict[str, Any] = {"content": "The deploy raised the pool size.", "title": "Pool", "tags": ["ops"]}
    sub.store(base.pop("content"), memory_id=mid, **base)
    before = log_digest(home)
    args: dict[str, Any] = {"content": "The deploy raised the pool size.", "title": "Pool", "tags": ["ops"]}
    args.update(change)
    with pytest.raises(BadInput) as caught:
        sub.store(args.pop("content"), memory_id=mid, **args)
    assert caught.value.exit_code == 65 and mid in caught.value.message
    assert caught.value.details["differ"] == [next(iter(change))]
    assert log_digest(home) == before


@pytest.mark.parametrize(
    "bad", ["", "not-a-ulid", "01ARZ3NDEKTSV4RRFFQ69G5FAVX", "01arz3ndektsv4rrffq69g5fav"]
)
def test_an_id_must_be_a_ulid(sub: Substrate, bad: str) -> None:
    with pytest.raises(BadInput):
        sub.store("x", memory_id=bad)


def test_the_cli_store_id(cli: Cli, home: Path) -> None:
    mid = new_id()
    r = cli(home, "store", "a note", "--id", mid, json=True)
    assert r.code == 0 and json.loads(r.stdout)["memory"]["id"] == mid
    r = cli(home, "store", "a note", "--id", mid, json=True)
    assert r.code == 0 and json.loads(r.stdout)["memory"]["already_stored"] is True
    r = cli(home, "store", "a note", "--id", mid)
    assert r.code == 0 and r.stdout.strip() == f"already stored {mid}"
    r = cli(home, "store", "another note", "--id", mid, json=True)
    assert r.code == 65 and json.loads(r.stdout)["error"] == "bad_input"
    assert stores_of(home, mid) == 1


def test_concurrent_retries_store_once(home: Path) -> None:
    mid = new_id()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MNEMOLOG_")}
    procs = [
        subprocess.Popen(
            [str(EXE), "--home", str(home), "--json", "store", "the same note", "--id", mid],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        for _ in range(4)
    ]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0, 0], [e for _, e in outs]
    flags = sorted(bool(json.loads(o)["memory"].get("already_stored")) for o, _ in outs)
    assert flags == [False, True, True, True]
    assert stores_of(home, mid) == 1


def test_the_mcp_store_id(make_home: Callable[..., Home], mcp_server: Callable[[Home], Client]) -> None:
    client = mcp_server(make_home())
    client.send("initialize", {"protocolVersion": "2025-06-18"})
    mid = new_id()
    err, first = client.tool("memory_store", content="via mcp", id=mid)
    assert not err and first["memory"]["id"] == mid
    err, again = client.tool("memory_store", content="via mcp", id=mid)
    assert not err and again["memory"]["already_stored"] is True
    err, out = client.tool("memory_store", content="something else", id=mid)
    assert err and out["exit_code"] == 65


def test_a_projection_that_cannot_fold_a_durable_store_is_a_warning(
    sub: Substrate, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = Projections.catch_up
    calls = {"n": 0}

    def failing(self: Projections, conn: Any, **kw: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 2:  # the first catch-up opens the session; the second folds the store
            raise StorageError("the projection database failed: No space left on device")
        return real(self, conn, **kw)

    monkeypatch.setattr(Projections, "catch_up", failing)
    m = sub.store("durable even so", tags=["t"])
    assert m["content"] == "durable even so" and m["tags"] == ["t"] and m["stored_seq"] > 0
    assert any("durable" in w and "No space left" in w for w in m["warnings"])
    monkeypatch.undo()
    assert stores_of(home, m["id"]) == 1
    assert sub.get(m["id"])["content"] == "durable even so"  # the projection caught up


def test_a_closing_checkpoint_that_fails_does_not_fail_the_store(
    cli: Cli, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mnemolog.eventlog.store import writer

    def full(*_: Any, **__: Any) -> Any:
        raise OSError(errno.ENOSPC, "No space left on device", str(home / "log" / "checkpoints" / "x"))

    monkeypatch.setattr(writer.LogWriter, "checkpoint", full)
    r = cli(home, "store", "kept", json=True)
    assert r.code == 0, r.stdout + r.stderr
    mid = json.loads(r.stdout)["memory"]["id"]
    assert "warning" in r.stderr and "nothing written is lost" in r.stderr
    monkeypatch.undo()
    assert stores_of(home, mid) == 1
