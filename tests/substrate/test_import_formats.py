"""Imports from other tools' exports (substrate.importers) and the export back out.

Each sample file under data/imports is written in the tool's documented
export format; each round-trips: the memories it gives (contents,
namespaces, times, sources, status), and a second import adds nothing. Bad
sources (malformed, truncated, oversized, hostile) are refused naming the
file and the item, with nothing written.
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from mnemolog.eventlog.errors import BadInput, MnemologError, UsageError
from mnemolog.substrate import importers
from mnemolog.substrate.api import Substrate
from mnemolog.substrate.ids import looks_like_id
from mnemolog.substrate.importers import MapError, derived_id, read_source
from mnemolog.substrate.importers.basic_memory import map_note
from mnemolog.substrate.importers.chats import map_chatgpt, map_claude
from mnemolog.substrate.importers.export import basic_memory_notes, jsonl_record
from mnemolog.substrate.importers.letta import map_letta
from mnemolog.substrate.importers.mem0 import map_mem0
from mnemolog.substrate.memory.importer import FIELDS, ImportFailed
from tests.projections.kit import log_digest, new_home, open_sub

DATA = Path(__file__).parent / "data" / "imports"


def us(iso: str) -> int:
    return int(datetime.fromisoformat(iso).timestamp() * 1_000_000)


#: format -> (sample, [(namespace, source, created_at, content)], in the order the mapper gives them)
EXPECTED: dict[str, tuple[str, list[tuple[str, str, int, str]]]] = {
    "mem0": (
        "mem0.json",
        [
            (
                "users/arjun",
                "mem0:5f2c8d1e-7a4b-4c3d-9e8f-0a1b2c3d4e5f",
                us("2024-07-20T01:12:43.123456-07:00"),
                "Prefers morning meetings and async communication",
            ),
            (
                "users/dev",
                "mem0:6a3d9e2f-8b5c-4d4e-af90-1b2c3d4e5f60",
                us("2024-07-22T10:00:00+00:00"),
                "Works at TechCorp as a senior engineer",
            ),
            (
                "agents/support-bot",
                "mem0:7b4eaf30-9c6d-4e5f-b0a1-2c3d4e5f6071",
                us("2024-08-01T12:30:00+00:00"),
                "Answers in British English",
            ),
        ],
    ),
    "letta": (
        "letta.af",
        [
            (
                "agents/agent-7f1c2d3e",
                "letta:agent-7f1c2d3e/persona",
                us("2025-03-01T08:00:00+00:00"),
                "I am a concise travel assistant.",
            ),
            (
                "agents/agent-7f1c2d3e",
                "letta:agent-7f1c2d3e/human",
                us("2025-03-01T08:00:00+00:00"),
                "Name: Ana. Vegetarian. Prefers trains to planes.",
            ),
            (
                "agents/agent-7f1c2d3e",
                "letta:agent-7f1c2d3e/archival/passage-1",
                us("2025-03-02T10:15:00+00:00"),
                "Booked Lisbon trip for May 2025",
            ),
        ],
    ),
    "claude": (
        "claude_conversations.json",
        [
            (
                "chats/claude",
                "claude:c1a2b3c4-0000-4000-8000-000000000001",
                us("2025-01-10T09:00:00+00:00"),
                "User: Should we use DuckDB for projections?\n\n"
                "Assistant: Yes: it is embedded and fast for analytics.",
            ),
            (
                "chats/claude",
                "claude:c1a2b3c4-0000-4000-8000-000000000001",
                us("2025-01-10T09:01:00+00:00"),
                "User: And for the log itself?\n\nAssistant: An append-only file with a hash chain.",
            ),
        ],
    ),
    "chatgpt": (
        "chatgpt_conversations.json",
        [
            (
                "chats/chatgpt",
                "chatgpt:6650a1b2-c3d4-8000-9000-abcdefabcdef",
                1718000010 * 1_000_000,
                # The shown branch only: the regenerated answer (n2b) is not on it.
                "User: When should I feed my starter?\n\nAssistant: Twelve hours before baking.",
            ),
            (
                "chats/chatgpt",
                "chatgpt:6650a1b2-c3d4-8000-9000-abcdefabcdef",
                1718000030 * 1_000_000,
                "User: Thanks!",
            ),
        ],
    ),
    "basic-memory": (
        "basic-memory",
        [
            (
                "notes/basic-memory",
                "memory://coffee/coffee-bean-origins",
                us("2025-02-02T11:30:00+00:00"),
                "Ethiopian beans taste of blueberries #origin",
            ),
            (
                "notes/basic-memory",
                "memory://coffee/coffee-brewing-methods",
                us("2025-02-01T10:00:00+00:00"),
                "Pour over gives more clarity #clarity",
            ),
            (
                "notes/basic-memory",
                "memory://coffee/coffee-brewing-methods",
                us("2025-02-01T10:00:00+00:00"),
                "Water at 96°C extracts best (for light roasts)",
            ),
            (
                "notes/basic-memory",
                "memory://plain-note",
                us("2025-02-03T08:00:00+00:00"),
                "A note without observations is one memory.",
            ),
        ],
    ),
}


def memories(sub: Substrate, *statuses: str) -> list[dict[str, Any]]:
    return [dict(m) for m in sub.list(limit=1000, statuses=statuses or ("candidate", "active"))]


@pytest.fixture
def home(tmp_path: Path) -> Path:
    new_home(tmp_path / "h")
    return tmp_path / "h"


@pytest.mark.parametrize("fmt", sorted(EXPECTED))
def test_each_sample_round_trips_as_candidates_and_a_second_import_adds_nothing(home: Path, fmt: str) -> None:
    sample, expected = EXPECTED[fmt]
    with open_sub(home) as sub:
        r = sub.import_from(fmt, DATA / sample)
        assert (r["imported"], r["skipped_existing"], r["status"]) == (len(expected), 0, "candidate")
        got = memories(sub)
        assert memories(sub, "active") == []  # candidates are never recalled until promoted
    want = {(ns, src, t, c) for ns, src, t, c in expected}
    assert {(m["namespace"], m["source"], m["created_at"], m["content"]) for m in got} == want
    assert {m["status"] for m in got} == {"candidate"}
    assert {m["id"] for m in got} == {r["id"] for r in read_source(fmt, DATA / sample)}
    before = log_digest(home)
    with open_sub(home) as sub:
        again = sub.import_from(fmt, DATA / sample)
        assert (again["imported"], again["skipped_existing"], again["batches"]) == (0, len(expected), 0)
        assert len(memories(sub)) == len(expected)
    assert log_digest(home) == before


def test_trust_stores_active_memories_that_recall_finds(home: Path) -> None:
    with open_sub(home) as sub:
        r = sub.import_from("mem0", DATA / "mem0.json", trust=True)
        assert r["status"] == "active"
        got = {m["source"]: m for m in memories(sub, "active")}
        hits = sub.recall("British English", limit=3)
    m = got["mem0:5f2c8d1e-7a4b-4c3d-9e8f-0a1b2c3d4e5f"]
    assert m["tags"] == ["work-preferences", "communication"]
    assert m["metadata"]["mem0"]["metadata"] == {"type": "preference"}
    assert m["metadata"]["mem0"]["updated_at"] == "2024-07-21T09:00:00-07:00"
    assert hits and hits[0]["source"] == "mem0:7b4eaf30-9c6d-4e5f-b0a1-2c3d4e5f6071"


def test_a_dry_run_shows_the_mapping_and_writes_nothing(home: Path) -> None:
    with open_sub(home) as sub:
        sub.import_from("letta", DATA / "letta.af")
    before = log_digest(home)
    with open_sub(home) as sub:
        r = sub.import_from("letta", DATA / "letta.af", dry_run=True)
        r2 = sub.import_from("mem0", DATA / "mem0.json", dry_run=True)
    assert log_digest(home) == before
    assert (r["items"], r["new"], r["skipped_existing"]) == (3, 0, 3)
    assert all(m["exists"] for m in r["mapping"])
    assert (r2["new"], [m["exists"] for m in r2["mapping"]]) == (3, [False] * 3)
    assert [m["namespace"] for m in r2["mapping"]] == ["users/arjun", "users/dev", "agents/support-bot"]


def test_letta_blocks_keep_their_labels_and_kinds() -> None:
    recs = read_source("letta", DATA / "letta.af")
    by_title = {r.get("title"): r for r in recs}
    assert by_title["human"]["kind"] == "user"
    assert by_title["persona"]["kind"] == "observation"
    assert "scratch" not in by_title  # an empty block holds nothing
    assert by_title["persona"]["metadata"]["letta"]["agent_name"] == "travel-helper"
    # The first agent-file shape: one agent with core_memory.
    old = map_letta({"name": "bot", "core_memory": [{"label": "human", "value": "Likes tea"}]})
    assert [(r["namespace"], r["source"]) for r in old] == [("agents/bot", "letta:bot/human")]


def test_basic_memory_keeps_categories_tags_and_relations() -> None:
    recs = {r["content"]: r for r in read_source("basic-memory", DATA / "basic-memory")}
    pour = recs["Pour over gives more clarity #clarity"]
    assert pour["title"] == "Coffee Brewing Methods"
    assert pour["tags"] == ["coffee", "brewing", "method", "clarity"]
    info = pour["metadata"]["basic_memory"]
    assert info["category"] == "method"
    assert info["relations"] == [
        {"type": "relates_to", "target": "Coffee Bean Origins"},
        {"type": "requires", "target": "Grinding Technique"},
    ]
    assert not any("done task" in c for c in recs)  # a checkbox is not an observation
    assert recs["A note without observations is one memory."]["kind"] == "reference"


def test_ids_derive_from_the_source_pointer_only() -> None:
    a = derived_id("mem0", "x")
    assert a == derived_id("mem0", "x") and looks_like_id(a)
    assert a != derived_id("mem0", "y") and a != derived_id("letta", "x")
    assert a[0] in "01234567"  # a 128-bit ULID


def test_a_conversation_that_grew_adds_only_its_new_exchanges(home: Path, tmp_path: Path) -> None:
    convs = json.loads((DATA / "claude_conversations.json").read_text())
    first = tmp_path / "first.json"
    one = json.loads(json.dumps(convs))
    one[0]["chat_messages"] = one[0]["chat_messages"][:2]
    first.write_text(json.dumps(one))
    with open_sub(home) as sub:
        assert sub.import_from("claude", first)["imported"] == 1
        r = sub.import_from("claude", DATA / "claude_conversations.json")
    assert (r["imported"], r["skipped_existing"]) == (1, 1)


def test_an_exchange_over_the_content_limit_is_cut_and_marked() -> None:
    huge = "word " * 80_000
    recs = map_claude(
        [
            {
                "uuid": "c",
                "chat_messages": [{"sender": "human", "text": "q"}, {"sender": "assistant", "text": huge}],
            }
        ]
    )
    assert recs[0]["metadata"]["chat"]["truncated"] is True
    assert len(recs[0]["content"].encode()) < 256 * 1024


def test_a_cycle_of_parents_in_a_chatgpt_mapping_ends() -> None:
    node = {"author": {"role": "user"}, "content": {"parts": ["hi"]}}
    conv = {
        "id": "c",
        "current_node": "a",
        "mapping": {
            "a": {"id": "a", "parent": "b", "message": node},
            "b": {"id": "b", "parent": "a", "message": node},
        },
    }
    assert len(map_chatgpt([conv])) == 2


# -- bad sources -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fmt", "doc", "where"),
    [
        ("mem0", {"results": {"id": 1}}, "results"),
        ("mem0", {"results": [{"id": "a", "memory": 7}]}, "results[0].memory"),
        ("mem0", {"results": [{"memory": "x"}]}, "results[0].id"),
        ("mem0", {"results": [{"id": True, "memory": "x"}]}, "results[0].id"),
        (
            "mem0",
            {"results": [{"id": "a", "memory": "x", "created_at": "yesterday"}]},
            "results[0].created_at",
        ),
        ("mem0", {"results": [{"id": "a", "memory": "x", "created_at": 1e300}]}, "results[0].created_at"),
        ("mem0", "text", None),
        ("letta", {"agents": [{"id": "a", "block_ids": ["nope"]}]}, "agents[0].block_ids[0]"),
        (
            "letta",
            {"agents": [{"id": "a", "memory_blocks": [{"label": "x"}]}]},
            "agents[0].memory_blocks[0].value",
        ),
        ("letta", {"something": 1}, "agents"),
        ("claude", [{"uuid": "c", "chat_messages": [{"text": "x"}]}], "[0].chat_messages[0].sender"),
        ("claude", {"uuid": "c"}, None),
        ("chatgpt", [{"id": "c", "mapping": []}], "[0].mapping"),
        (
            "chatgpt",
            [{"id": "c", "mapping": {"n": {"message": {"author": {}, "content": {}}}}}],
            "author.role",
        ),
    ],
)
def test_a_document_of_the_wrong_shape_is_refused_naming_the_item(
    fmt: str, doc: Any, where: str | None, home: Path, tmp_path: Path
) -> None:
    f = tmp_path / "bad.json"
    f.write_text(json.dumps(doc))
    before = log_digest(home)
    with open_sub(home) as sub, pytest.raises(MapError) as exc:
        sub.import_from(fmt, f)
    assert exc.value.exit_code == 65
    assert str(f) in exc.value.message
    if where:
        assert where in exc.value.message
    assert log_digest(home) == before


@pytest.mark.parametrize(
    "raw",
    [b'{"results": [{"id": "a", "memory": "x"}', b"", b"\xff\xfe{}", b'{"results": [NaN]}', b"[" * 100_000],
    ids=["truncated", "empty", "not-utf8", "nan", "deep"],
)
def test_malformed_or_truncated_json_is_refused(raw: bytes, home: Path, tmp_path: Path) -> None:
    f = tmp_path / "bad.json"
    f.write_bytes(raw)
    with open_sub(home) as sub, pytest.raises(BadInput) as exc:
        sub.import_from("mem0", f)
    assert str(f) in exc.value.message


def test_one_bad_item_refuses_the_whole_file(home: Path, tmp_path: Path) -> None:
    doc = json.loads((DATA / "mem0.json").read_text())
    doc["results"][2]["memory"] = "nul \x00 inside"
    f = tmp_path / "m.json"
    f.write_text(json.dumps(doc))
    before = log_digest(home)
    with open_sub(home) as sub, pytest.raises(ImportFailed) as exc:
        sub.import_from("mem0", f)
    bad = exc.value.details["bad_lines"]
    assert [b["line"] for b in bad] == [3]
    assert "mem0:7b4eaf30-9c6d-4e5f-b0a1-2c3d4e5f6071" in bad[0]["message"]
    assert log_digest(home) == before


def test_oversized_and_special_files_are_refused(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(importers, "MAX_IMPORT_BYTES", 100)
    with pytest.raises(UsageError, match="larger than 100 bytes"):
        read_source("mem0", DATA / "mem0.json")
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    with pytest.raises(UsageError, match="FIFO"):
        read_source("claude", fifo)  # refused at once, never blocks
    with pytest.raises(UsageError, match="directory"):
        read_source("chatgpt", tmp_path)
    with pytest.raises(UsageError, match="cannot read"):
        read_source("mem0", tmp_path / "absent.json")
    with pytest.raises(UsageError, match="unknown import format"):
        read_source("evernote", DATA / "mem0.json")


def test_basic_memory_bad_notes_are_named(tmp_path: Path) -> None:
    for text, msg in [
        ("---\ntitle: x\n", "no closing"),
        ("---\n- a\n- b\n---\nbody", "must be a mapping"),
        ("---\ntitle: [unclosed\n---\nbody", "not YAML"),
        ("---\n!!python/object:os.system x: 1\n---\nbody", "not YAML"),
        ("---\ncreated: 99999-01-01\n---\nbody", "created"),
    ]:
        d = tmp_path / f"v{abs(hash(text))}"
        (d / "sub").mkdir(parents=True)
        (d / "sub" / "n.md").write_text(text)
        with pytest.raises(MapError, match=msg) as exc:
            read_source("basic-memory", d)
        assert exc.value.details["file"] == str(d / "sub" / "n.md")


def test_basic_memory_folders_skip_links_and_hidden_folders(tmp_path: Path) -> None:
    d = tmp_path / "notes"
    (d / ".obsidian").mkdir(parents=True)
    (d / ".obsidian" / "x.md").write_text("- [a] hidden")
    outside = tmp_path / "outside.md"
    outside.write_text("- [a] outside the folder")
    (d / "link.md").symlink_to(outside)
    (d / "loop").symlink_to(d)
    (d / "real.md").write_text("- [a] inside #t")
    assert [r["content"] for r in read_source("basic-memory", d)] == ["inside #t"]


def test_observations_in_code_fences_are_not_read() -> None:
    recs = map_note("n.md", "```\n- [a] code\n```\n- [b] real", None)
    assert [r["content"] for r in recs] == ["real"]


def test_mem0_owner_ids_are_made_namespace_safe() -> None:
    recs = map_mem0({"results": [{"id": 1, "memory": "m", "user_id": "ana@example.com/../x"}]})
    assert recs[0]["namespace"] == "users/ana-example.com-..-x"
    assert recs[0]["source"] == "mem0:1"


# -- export ------------------------------------------------------------------------------------


ROWS: list[dict[str, Any]] = [
    {"content": "first", "namespace": "team/a", "kind": "decision", "title": "T1", "tags": ["x", "y"]},
    {
        "content": "second\nwith lines",
        "namespace": "team/b",
        "confidence": 0.7,
        "source": "s",
        "metadata": {"k": [1]},
    },
    {
        "content": "third",
        "namespace": "other",
        "created_at": 1_600_000_000_000_000,
        "last_seen": 1_600_000_000_000_001,
    },
]


def _comparable(ms: list[dict[str, Any]]) -> list[dict[str, Any]]:
    keep = tuple(f for f in FIELDS if f != "last_seen")  # the fields an import carries, as it reads them
    return sorted(({k: m[k] for k in keep} for m in ms), key=lambda m: m["id"])


def _seeded(home: Path, tmp_path: Path) -> None:
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    with open_sub(home) as sub:
        sub.import_jsonl(src)
        archived = sub.store("archived one", namespace="team/a")
        sub.archive(archived["id"])
        sub.import_from("mem0", DATA / "mem0.json")  # candidates: not exported


def test_jsonl_export_round_trips_into_a_fresh_home(home: Path, tmp_path: Path) -> None:
    _seeded(home, tmp_path)
    out = tmp_path / "out.jsonl"
    with open_sub(home) as sub:
        r = sub.export_memories("jsonl", out)
        mine = memories(sub, "active")
    assert (r["memories"], r["files"]) == (3, 1)
    fresh = tmp_path / "fresh"
    new_home(fresh)
    with open_sub(fresh) as sub:
        assert sub.import_jsonl(out)["imported"] == 3
        theirs = memories(sub, "active")
    assert _comparable(theirs) == _comparable(mine)


def test_jsonl_export_of_a_namespace(home: Path, tmp_path: Path) -> None:
    _seeded(home, tmp_path)
    out = tmp_path / "team.jsonl"
    with open_sub(home) as sub:
        assert sub.export_memories("jsonl", out, namespace="team")["memories"] == 2
    assert sorted(json.loads(line)["namespace"] for line in out.read_text().splitlines()) == [
        "team/a",
        "team/b",
    ]


def test_basic_memory_export_is_a_folder_of_notes_basic_memory_import_reads(
    home: Path, tmp_path: Path
) -> None:
    _seeded(home, tmp_path)
    out = tmp_path / "notes"
    out.mkdir()  # an empty folder is fine
    with open_sub(home) as sub:
        assert sub.export_memories("basic-memory", out)["files"] == 3
    note = (out / "team" / "a" / "t1.md").read_text()
    assert note.startswith("---\ntitle: T1\ntype: decision\npermalink: team/a/t1\ntags:\n- x\n- y\n")
    back = {r["content"]: r for r in read_source("basic-memory", out)}
    assert set(back) == {"first", "second\nwith lines", "third"}
    assert (back["first"]["title"], back["first"]["kind"], back["first"]["tags"]) == (
        "T1",
        "decision",
        ["x", "y"],
    )
    assert back["third"]["created_at"] == 1_600_000_000_000_000


def test_export_refuses_what_it_must_not_replace(home: Path, tmp_path: Path) -> None:
    full = tmp_path / "full"
    full.mkdir()
    (full / "keep.md").write_text("mine")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with open_sub(home) as sub:
        sub.store("one", namespace="a")
        for fmt, out in [("basic-memory", full), ("basic-memory", fifo), ("jsonl", fifo), ("jsonl", full)]:
            with pytest.raises(MnemologError) as exc:
                sub.export_memories(fmt, out)
            assert exc.value.exit_code == 64, (fmt, out)
        with pytest.raises(UsageError, match="unknown export format"):
            sub.export_memories("csv", tmp_path / "x")
    assert [p.name for p in full.iterdir()] == ["keep.md"]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_export_pure_functions_handle_hostile_titles() -> None:
    m = {
        "id": "01ARZ3NDEKTSV4RRFFQ69G5FAV",
        "namespace": "a",
        "kind": "observation",
        "content": "c",
        "title": "---\n../../etc: [x]",
        "tags": [],
        "created_at": 0,
    }
    [(path, data)] = basic_memory_notes([m])
    assert path == "a/etc-x.md"
    assert data.decode().count("\n---\n") == 1  # the title is quoted YAML, never a second fence
    assert jsonl_record({**m, "tags": [], "metadata": {}, "title": None}) == {
        "id": m["id"],
        "namespace": "a",
        "kind": "observation",
        "content": "c",
        "created_at": 0,
    }


def test_times_come_back_as_utc(home: Path) -> None:
    with open_sub(home) as sub:
        sub.import_from("chatgpt", DATA / "chatgpt_conversations.json")
        ts = sorted(m["created_at"] for m in memories(sub))
    assert datetime.fromtimestamp(ts[0] / 1e6, UTC).isoformat() == "2024-06-10T06:13:30+00:00"


def test_basic_memory_relations_between_imported_notes_become_links(home: Path) -> None:
    with open_sub(home) as sub:
        dry = sub.import_from("basic-memory", DATA / "basic-memory", dry_run=True)
        assert sorted(x["type"] for x in dry["links"]) == ["pairs_with", "relates_to"]
        assert sub.import_from("basic-memory", DATA / "basic-memory")["links"] == 2
        assert sub.import_from("basic-memory", DATA / "basic-memory")["links"] == 0  # drawn already
        first = {m["source"]: m for m in memories(sub) if m["content"].startswith(("Pour", "Ethiopian"))}
        brewing = first["memory://coffee/coffee-brewing-methods"]
        edges = sub.get(brewing["id"])["links"]["outgoing"]
    # "requires [[Grinding Technique]]" names no imported note: metadata only.
    assert [(e["dst"], e["relation"], e["metadata"]["type"]) for e in edges] == [
        (first["memory://coffee/coffee-bean-origins"]["id"], "related_to", "relates_to")
    ]


def test_basic_memory_reads_one_note_and_refuses_an_oversized_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    one = DATA / "basic-memory" / "plain-note.md"
    assert [r["source"] for r in read_source("basic-memory", one)] == ["memory://plain-note"]
    monkeypatch.setattr(importers, "MAX_NOTE_BYTES", 10)
    with pytest.raises(UsageError, match="larger than 10 bytes"):
        read_source("basic-memory", DATA / "basic-memory")
    (tmp_path / "bad.md").write_bytes(b"- [a] \xff")
    monkeypatch.setattr(importers, "MAX_NOTE_BYTES", 1 << 20)
    with pytest.raises(BadInput, match="not valid UTF-8"):
        read_source("basic-memory", tmp_path)


def test_long_hostile_lines_are_read_in_linear_time() -> None:
    # Patterns with a lazy group beside a run of spaces took minutes on lines like these.
    n = 500_000
    lines = [
        "- a" + " " * n + "x",
        "- [a] x" + " " * n + "y",
        "- a " + "b " * n + "[[x]] (",
        "- [a" + " " * n,
    ]
    recs = map_note("n.md", "\n".join(lines), None)
    assert [r["metadata"]["basic_memory"]["category"] for r in recs] == ["a"]
    assert recs[0]["metadata"]["basic_memory"]["relations"][0]["target"] == "x"
