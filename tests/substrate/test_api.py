"""The Substrate API: what each command writes, what it returns, and how it refuses bad input.

Every refusal is checked for its error class and exit code, and for writing
nothing: the log's bytes are the same before and after.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from mnemolog.eventlog.errors import BadInput, MnemologError, NotFound, UsageError
from mnemolog.eventlog.store.log import Log
from mnemolog.substrate.api import MAX_CONTENT_BYTES, Substrate
from mnemolog.substrate.home import Home
from tests.projections.kit import FakeClock, log_digest, new_home, open_sub


@pytest.fixture
def sub(tmp_path: Path) -> Iterator[Substrate]:
    s = open_sub(new_home(tmp_path / "home"), long_lived=True, clock=FakeClock())
    yield s
    s.close()


@pytest.fixture
def mem(sub: Substrate) -> dict[str, Any]:
    return sub.store("a memory to point at", title="Target", tags=["x"], metadata={"a": 1, "b": 2})


# -- what the commands do ---------------------------------------------------------------


def test_store_returns_what_get_shows_and_writes_one_event(sub: Substrate) -> None:
    size = sub.log.refresh()
    m = sub.store(
        "Body text",
        namespace="team/app",
        kind="decision",
        title="Choose Postgres",
        tags=["db", "db", "prod"],
        confidence=0.75,
        source="meeting-12",
        metadata={"ticket": "OPS-1", "nested": {"k": [1, 2]}},
    )
    assert sub.log.refresh() == size + 1
    with Log(sub.home.log_dir) as log:
        e = log.entry(size)
    assert (
        e.type == "memory.stored"
        and e.data["id"] == m["id"]
        and sub.keys.upcast(e.type, e.tv, e.data)["tags"] == ["db", "prod"]
    )
    got = sub.get(m["id"])
    assert got.pop("links") == {"outgoing": [], "incoming": []}
    assert got == m
    assert m["stored_seq"] == m["last_event_seq"] == size
    assert (m["namespace"], m["kind"], m["confidence"], m["source"]) == (
        "team/app",
        "decision",
        0.75,
        "meeting-12",
    )
    assert m["metadata"] == {"ticket": "OPS-1", "nested": {"k": [1, 2]}}
    assert m["created_at"] == m["updated_at"] == e.ts


def test_update_replaces_given_fields_and_merges_metadata(sub: Substrate, mem: dict[str, Any]) -> None:
    u = sub.update(mem["id"], metadata={"a": None, "c": 3}, tags=["y"], confidence=0.5, kind="reference")
    assert u["metadata"] == {"b": 2, "c": 3}
    assert (u["tags"], u["confidence"], u["kind"]) == (["y"], 0.5, "reference")
    assert u["title"] == "Target" and u["content"] == mem["content"]
    assert u["stored_seq"] == mem["stored_seq"] and u["last_event_seq"] > mem["last_event_seq"]
    u2 = sub.update(mem["id"], content="entirely different words now")
    assert sub.recall("different words")[0]["id"] == mem["id"]
    assert sub.recall("memory point") == []  # the old text is no longer indexed
    assert u2["content"] == "entirely different words now"


def test_link_archive_restore(sub: Substrate, mem: dict[str, Any]) -> None:
    other = sub.store("another memory")
    e = sub.link(other["id"], mem["id"], "supersedes", {"why": "newer"})
    assert (e["src"], e["dst"], e["relation"], e["metadata"]) == (
        other["id"],
        mem["id"],
        "supersedes",
        {"why": "newer"},
    )
    links = sub.get(mem["id"])["links"]
    assert links["incoming"] == [e] and links["outgoing"] == []
    a = sub.archive(mem["id"], reason="stale")
    assert a["archived_at"] is not None and a["archive_reason"] == "stale"
    size = sub.log.refresh()
    assert sub.archive(mem["id"])["archived_at"] == a["archived_at"]  # already archived: nothing written
    assert sub.log.refresh() == size
    r = sub.restore(mem["id"])
    assert r["archived_at"] is None and r["archive_reason"] is None
    assert sub.restore(mem["id"]) == r  # not archived: nothing written
    assert sub.log.refresh() == size + 1


def test_content_at_the_limit_is_accepted(sub: Substrate) -> None:
    body = "word " * (MAX_CONTENT_BYTES // 5) + "é" * ((MAX_CONTENT_BYTES % 5) // 2)
    body += "x" * (MAX_CONTENT_BYTES - len(body.encode()))
    assert len(body.encode()) == MAX_CONTENT_BYTES
    m = sub.store(body)
    assert sub.recall("word")[0]["id"] == m["id"]


# -- refusals -------------------------------------------------------------------------------


def refused(sub: Substrate, fn: Callable[[], Any], err: type[MnemologError], code: int) -> MnemologError:
    before = log_digest(sub.home)
    with pytest.raises(err) as info:
        fn()
    assert info.value.exit_code == code
    assert info.value.message  # a sentence for a person, not an empty string
    assert log_digest(sub.home) == before
    return info.value


BAD_STORES: list[tuple[str, dict[str, Any], type[MnemologError], int]] = [
    ("empty", {"content": ""}, BadInput, 65),
    ("blank", {"content": " \n\t "}, BadInput, 65),
    ("oversized", {"content": "x" * (MAX_CONTENT_BYTES + 1)}, BadInput, 65),
    ("oversized multibyte", {"content": "é" * (MAX_CONTENT_BYTES // 2 + 1)}, BadInput, 65),
    ("NUL", {"content": "a\x00b"}, BadInput, 65),
    ("lone surrogate", {"content": "bad \udcff text"}, BadInput, 65),
    ("not text", {"content": b"bytes"}, BadInput, 65),
    ("bad namespace", {"content": "x", "namespace": "../etc"}, BadInput, 65),
    ("namespace with space", {"content": "x", "namespace": "a b"}, BadInput, 65),
    ("empty namespace", {"content": "x", "namespace": ""}, BadInput, 65),
    ("too deep namespace", {"content": "x", "namespace": "/".join(["a"] * 17)}, BadInput, 65),
    ("unknown kind", {"content": "x", "kind": "gossip"}, UsageError, 64),
    ("confidence above 1", {"content": "x", "confidence": 1.5}, BadInput, 65),
    ("negative confidence", {"content": "x", "confidence": -0.1}, BadInput, 65),
    ("NaN confidence", {"content": "x", "confidence": float("nan")}, BadInput, 65),
    ("boolean confidence", {"content": "x", "confidence": True}, BadInput, 65),
    ("text confidence", {"content": "x", "confidence": "high"}, BadInput, 65),
    ("tag with space", {"content": "x", "tags": ["a b"]}, BadInput, 65),
    ("empty tag", {"content": "x", "tags": [""]}, BadInput, 65),
    ("too many tags", {"content": "x", "tags": [f"t{i}" for i in range(65)]}, BadInput, 65),
    ("metadata not an object", {"content": "x", "metadata": ["a"]}, BadInput, 65),
    ("metadata not JSON", {"content": "x", "metadata": {"k": object()}}, BadInput, 65),
    ("metadata NaN", {"content": "x", "metadata": {"k": float("inf")}}, BadInput, 65),
    ("metadata too big", {"content": "x", "metadata": {"k": "v" * 70_000}}, BadInput, 65),
    ("metadata integer beyond 64 bits", {"content": "x", "metadata": {"k": 2**64}}, BadInput, 65),
    ("title too long", {"content": "x", "title": "t" * 513}, BadInput, 65),
    ("title with NUL", {"content": "x", "title": "a\x00"}, BadInput, 65),
    ("source too long", {"content": "x", "source": "s" * 3000}, BadInput, 65),
]


@pytest.mark.parametrize(("name", "kw", "err", "code"), BAD_STORES, ids=[b[0] for b in BAD_STORES])
def test_store_refuses(
    sub: Substrate, name: str, kw: dict[str, Any], err: type[MnemologError], code: int
) -> None:
    kw = dict(kw)
    content = kw.pop("content")
    refused(sub, lambda: sub.store(content, **kw), err, code)


BAD_UPDATES: list[tuple[str, dict[str, Any]]] = [
    ("title with NUL", {"title": "a\x00b"}),
    ("612-character title", {"title": "t" * 612}),
    ("2,058-character source", {"source": "s" * 2058}),
    ("title with a lone surrogate", {"title": "bad \udcff"}),
    ("source with NUL", {"source": "a\x00"}),
    ("content with NUL", {"content": "a\x00b"}),
    ("metadata too big", {"metadata": {"k": "v" * 70_000}}),
    ("too many tags", {"tags": [f"t{i}" for i in range(65)]}),
]


@pytest.mark.parametrize(("name", "kw"), BAD_UPDATES, ids=[b[0] for b in BAD_UPDATES])
def test_update_refuses_what_store_refuses(
    sub: Substrate, mem: dict[str, Any], name: str, kw: dict[str, Any]
) -> None:
    # Every limit lives on the payload models, so an update is held to a store's rules.
    refused(sub, lambda: sub.update(mem["id"], **kw), BadInput, 65)
    rest = {k: x for k, x in kw.items() if k != "content"}
    refused(sub, lambda: sub.store(kw.get("content", "x"), **rest), BadInput, 65)


def test_a_reason_is_bounded_text(sub: Substrate, mem: dict[str, Any]) -> None:
    refused(sub, lambda: sub.archive(mem["id"], reason="r" * 3000), BadInput, 65)
    refused(sub, lambda: sub.archive(mem["id"], reason="r\x00"), BadInput, 65)


def test_unknown_ids_are_not_found(sub: Substrate, mem: dict[str, Any]) -> None:
    ghost = "01ZZZZZZZZZZZZZZZZZZZZZZZZ"
    for fn in (
        lambda: sub.get(ghost),
        lambda: sub.update(ghost, title="t"),
        lambda: sub.archive(ghost),
        lambda: sub.restore(ghost),
        lambda: sub.link(ghost, mem["id"]),
        lambda: sub.link(mem["id"], ghost),
        lambda: sub.get(""),
        lambda: sub.get("'; DROP TABLE memories; --"),
    ):
        e = refused(sub, fn, NotFound, 2)
        assert e.slug == "not_found"
    assert sub.get(mem["id"])["id"] == mem["id"]


def test_other_refusals(sub: Substrate, mem: dict[str, Any]) -> None:
    mid = mem["id"]
    refused(sub, lambda: sub.link(mid, mid, "loves"), UsageError, 64)
    refused(sub, lambda: sub.link(mid, mid, "related_to", {"k": object()}), BadInput, 65)
    refused(sub, lambda: sub.update(mid), UsageError, 64)
    with pytest.raises(TypeError):  # the fields are keyword parameters (memory.updated's fields)
        sub.update(mid, colour="red")  # type: ignore[call-arg]
    refused(sub, lambda: sub.update(mid, content=""), BadInput, 65)
    refused(sub, lambda: sub.update(mid, content="y" * (MAX_CONTENT_BYTES + 1)), BadInput, 65)
    refused(sub, lambda: sub.update(mid, namespace="bad namespace"), BadInput, 65)
    refused(sub, lambda: sub.update(mid, kind="gossip"), UsageError, 64)
    refused(sub, lambda: sub.update(mid, confidence=7), BadInput, 65)
    refused(sub, lambda: sub.update(mid, tags=["a b"]), BadInput, 65)
    refused(sub, lambda: sub.update(mid, metadata="nope"), BadInput, 65)


@pytest.mark.parametrize("read", ["recall", "search", "list"])
def test_read_refusals(sub: Substrate, mem: dict[str, Any], read: str) -> None:
    fn = getattr(sub, read)
    args: tuple[Any, ...] = () if read == "list" else ("memory",)
    for limit in (0, -1, 1001):
        refused(sub, lambda limit=limit: fn(*args, limit=limit), UsageError, 64)
    refused(sub, lambda: fn(*args, namespace="not valid!"), BadInput, 65)
    refused(sub, lambda: fn(*args, kinds=["gossip"]), UsageError, 64)
    refused(sub, lambda: fn(*args, tags=["a b"]), BadInput, 65)
    if read != "list":
        refused(sub, lambda: fn(""), BadInput, 65)
        refused(sub, lambda: fn("   "), BadInput, 65)
    else:
        refused(sub, lambda: fn(offset=-1), UsageError, 64)
    assert fn(*args, limit=1000) is not None


HOSTILE: list[tuple[str, Callable[[Substrate], Any]]] = [
    ("title not text", lambda s: s.store("x", title=5)),
    ("source not text", lambda s: s.store("x", source=["a"])),
    ("tags not a list", lambda s: s.store("x", tags=5)),
    ("namespace not text", lambda s: s.store("x", namespace=None)),
    ("limit as text", lambda s: s.recall("x", limit="10")),
    ("limit as float", lambda s: s.recall("x", limit=2.5)),
    ("limit as bool", lambda s: s.list(limit=True)),
    ("query not text", lambda s: s.recall(b"x")),
    ("offset as text", lambda s: s.list(offset="1")),
    ("update title not text", lambda s: s.update(s.list(limit=1)[0]["id"], title=["t"])),
    ("id not text", lambda s: s.get(42)),
]


@pytest.mark.parametrize(("name", "call"), HOSTILE, ids=[h[0] for h in HOSTILE])
def test_hostile_argument_types_are_mnemolog_errors(
    sub: Substrate, mem: dict[str, Any], name: str, call: Callable[[Substrate], Any]
) -> None:
    before = log_digest(sub.home)
    with pytest.raises(MnemologError) as info:
        call(sub)
    assert info.value.exit_code in (2, 64, 65)
    assert log_digest(sub.home) == before


def test_a_populated_home_reads_back(populated_home: Home, open_substrate: Callable[..., Substrate]) -> None:
    # The shared fixture (tests/conftest.py): four memories, a link, the last one archived.
    s = open_substrate(populated_home)
    visible = s.list(limit=10)
    assert len(visible) == 3 and len(s.list(limit=10, include_archived=True)) == 4
    checkout = s.list(limit=10, namespace="team/checkout", include_archived=True)
    assert {m["kind"] for m in checkout} == {"decision", "observation"}
    linked = [m for m in visible if s.get(m["id"])["links"]["outgoing"]]
    assert [m["content"] for m in linked] == ["Rollback at 09:41 fixed checkout"]
