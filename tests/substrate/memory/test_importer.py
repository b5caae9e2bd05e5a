"""Bulk import: good files in batches, and every kind of bad line refused with its number, nothing written."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mnemolog.curators.embedding.embedder import EmbedderFailed
from mnemolog.eventlog.errors import UsageError
from mnemolog.projections.embedding import vectors as vx
from mnemolog.substrate.api import Substrate
from mnemolog.substrate.ids import new_id
from mnemolog.substrate.memory import importer
from mnemolog.substrate.memory.importer import ImportFailed
from tests.projections.kit import log_digest, new_home, open_sub
from tests.support.fake_embedder import DIM, FakeEmbedder


def write(path: Path, lines: list[Any]) -> Path:
    """Lines as JSON (dicts) or raw (bytes / str), one per line."""
    out = bytearray()
    for x in lines:
        if isinstance(x, bytes):
            out += x
        elif isinstance(x, str):
            out += x.encode()
        else:
            out += json.dumps(x).encode()
        out += b"\n"
    path.write_bytes(bytes(out))
    return path


def vector_count(sub: Substrate) -> int:
    with sub.projections.session() as conn:
        meta = vx.read_meta(conn)
        return meta.rows if meta else 0


def test_a_good_file_is_imported_in_batches_with_its_vectors(tmp_path: Path) -> None:
    fake = FakeEmbedder()
    ids = [new_id() for _ in range(3)]
    rows: list[Any] = [
        {"content": f"memory {i} about kafka", "namespace": "a/b", "tags": ["t"]} for i in range(20)
    ]
    rows += [
        {"id": ids[0], "content": "with an id", "title": "T", "kind": "decision", "confidence": 0.5},
        "",  # blank lines are skipped
        {
            "id": ids[1],
            "content": "created long ago",
            "created_at": 1_600_000_000_000_000,
            "metadata": {"k": 1},
        },
    ]
    f = write(tmp_path / "in.jsonl", rows)
    with open_sub(new_home(tmp_path / "h"), embedder=fake) as s:
        r = s.import_jsonl(f, batch=7)
        assert (r["lines"], r["imported"], r["batches"], r["embedded"], r["pending"]) == (23, 22, 4, 22, 0)
        assert (
            r["first_seq"] is not None and r["last_seq"] is not None and r["last_seq"] - r["first_seq"] == 21
        )
        assert s.get(ids[0])["kind"] == "decision" and s.get(ids[0])["title"] == "T"
        assert s.get(ids[1])["created_at"] == 1_600_000_000_000_000
        assert vector_count(s) == 22
        assert s.stats()["memories"] == 22
        assert [m["content"] for m in s.search("kafka", limit=100)].count("memory 3 about kafka") == 1
        # Resuming: lines whose id is stored are skipped, the others refused without the flag.
        again = write(
            tmp_path / "again.jsonl",
            [{"id": ids[0], "content": "with an id"}, {"id": ids[2], "content": "new"}],
        )
        with pytest.raises(ImportFailed, match="stored already"):
            s.import_jsonl(again)
        r2 = s.import_jsonl(again, skip_existing=True)
        assert (r2["imported"], r2["skipped_existing"]) == (1, 1)
        assert s.get(ids[2])["content"] == "new"


DEEP = "[" * 100_000 + "]" * 100_000
BAD_LINES: list[tuple[Any, str]] = [
    (b"\xff\xfe not utf-8", "not valid UTF-8"),
    ("not json", "not valid JSON"),
    ('{"content": "truncated', "not valid JSON"),
    ("[1, 2]", "must be a JSON object"),
    ('{"content": "a", "content": "b"}', "appears twice"),
    ('{"content": "x", "confidence": NaN}', "NaN is not a JSON number"),
    ('{"content": "x", "confidence": Infinity}', "not a JSON number"),
    (DEEP, "not valid JSON"),
    ({"title": "no content"}, "no content"),
    ({"content": ""}, "content"),
    ({"content": "   "}, "content"),
    ({"content": "x", "extra": 1}, "unknown field"),
    ({"content": "x", "id": "not-a-ulid"}, "ULID"),
    ({"content": "x", "id": 7}, "ULID"),
    ({"content": "x", "namespace": "../etc"}, "namespace"),
    ({"content": "x", "kind": "secret"}, "kind"),
    ({"content": "x", "tags": ["has space"]}, "tag"),
    ({"content": "x", "metadata": {"n": 2**70}}, "64"),
    ({"content": "x", "metadata": [1]}, "metadata"),
    ({"content": "x", "confidence": 2}, "confidence"),
    ({"content": "x\u0000y"}, "NUL"),
    ('{"content": "lone \\ud800 surrogate"}', "surrogate"),
    ({"content": "x" * (importer.MAX_CONTENT_BYTES + 1)}, "content"),
]


@pytest.mark.parametrize(("line", "match"), BAD_LINES, ids=[m for _, m in BAD_LINES])
def test_a_bad_line_is_reported_by_number_and_nothing_is_written(
    tmp_path: Path, line: Any, match: str
) -> None:
    home = new_home(tmp_path / "h")
    f = write(
        tmp_path / "in.jsonl", [{"content": "good one"}, {"content": "good two"}, line, {"content": "good"}]
    )
    with open_sub(home, embedder=FakeEmbedder()) as s:
        before = log_digest(home)
        with pytest.raises(ImportFailed) as info:
            s.import_jsonl(f)
        err = info.value
        assert err.exit_code == 65 and err.slug == "import_refused"
        assert err.details["bad_count"] == 1
        [bad] = err.details["bad_lines"]
        assert bad["line"] == 3
        assert match.lower() in bad["message"].lower(), bad
        assert log_digest(home) == before
        assert s.stats()["memories"] == 0


def test_every_bad_line_is_listed_and_an_oversized_line_is_not_held(tmp_path: Path) -> None:
    huge = b'{"content": "' + b"x" * (importer.MAX_LINE_BYTES + 10) + b'"}'
    rows: list[Any] = [{"content": "fine"}, huge, "nope", {"content": "fine"}, {"content": "x", "id": "bad"}]
    f = write(tmp_path / "in.jsonl", rows)
    ids = new_id()
    with open_sub(new_home(tmp_path / "h")) as s:
        with pytest.raises(ImportFailed) as info:
            s.import_jsonl(f)
        assert [b["line"] for b in info.value.details["bad_lines"]] == [2, 3, 5]
        assert "bytes" in info.value.details["bad_lines"][0]["message"]
        dup = write(tmp_path / "dup.jsonl", [{"content": "a", "id": ids}, {"content": "b", "id": ids}])
        with pytest.raises(ImportFailed, match="line 1 already"):
            s.import_jsonl(dup)
        many = write(tmp_path / "many.jsonl", ["x"] * (importer.MAX_REPORTED + 5))
        with pytest.raises(ImportFailed) as info:
            s.import_jsonl(many)
        assert len(info.value.details["bad_lines"]) == importer.MAX_REPORTED
        assert info.value.details["bad_count"] == importer.MAX_REPORTED + 5
        assert s.stats()["memories"] == 0


def test_governance_and_size_limits(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = new_home(tmp_path / "h")
    with open_sub(home) as s:
        s.set_policy("locked", write="none")
        f = write(tmp_path / "in.jsonl", [{"content": "ok"}, {"content": "no", "namespace": "locked/x"}])
        before = log_digest(home)
        with pytest.raises(ImportFailed) as info:
            s.import_jsonl(f)
        assert info.value.exit_code == 5 and info.value.details["bad_lines"][0]["line"] == 2
        assert log_digest(home) == before
        monkeypatch.setattr(importer, "MAX_IMPORT_BYTES", 10)
        with pytest.raises(UsageError, match="split the file"):
            s.import_jsonl(f)
        with pytest.raises(UsageError, match="cannot read"):
            s.import_jsonl(tmp_path / "missing.jsonl")


def test_an_embedder_with_bad_vectors_stops_the_import_before_its_batch(tmp_path: Path) -> None:
    home = new_home(tmp_path / "h")
    fake = FakeEmbedder()
    f = write(tmp_path / "in.jsonl", [{"content": f"m{i}"} for i in range(10)])
    with open_sub(home, embedder=fake) as s:
        s.store("recorded first")
        before = log_digest(home)
        fake.corrupt = lambda ts: np.full((len(ts), DIM), np.nan)
        with pytest.raises(EmbedderFailed, match="NaN"):
            s.import_jsonl(f)
        assert log_digest(home) == before
        fake.corrupt = None
        fake.unreachable = True
        r = s.import_jsonl(f, batch=4)
        assert (r["imported"], r["embedded"], r["pending"]) == (10, 0, 10)
        assert any("unreachable" in w for w in r.get("warnings", []))
        fake.unreachable = False
        assert s.embed_pending()["pending"] == 0
        assert vector_count(s) == 11


def test_a_deferred_policy_requests_atomisation_in_the_batch(tmp_path: Path) -> None:
    long = " ".join(f"Sentence number {i} says something specific about the outage." for i in range(40))
    f = write(
        tmp_path / "in.jsonl",
        [{"content": long, "namespace": "ops"}, {"content": "short", "namespace": "ops"}],
    )
    with open_sub(new_home(tmp_path / "h")) as s:
        s.set_policy(
            "ops",
            auto_atomise_mode="synchronous",
            curator="rules",
            auto_atomise_threshold_cl100k=80,
            auto_atomise_max_atom_tokens=50,
        )
        r = s.import_jsonl(f)
        assert r["atomisation_requested"] == 1
        assert s.stats()["atomisation"]["pending"] == 1
        done = s.drain_atomisations()
        assert len(done) == 1


def test_project_and_domains_are_read_as_a_store_reads_them_and_survive_export(tmp_path: Path) -> None:
    """The line's fields are the payload's: project (an alias made the registered name) and domains
    (checked against the vocabulary) come in, and `export` then `import` keeps them."""
    assert {"project", "domains"} <= set(importer.FIELDS)
    assert not {"touch_prev", "atom_of", "source_span", "status"} & set(importer.FIELDS)
    home = new_home(tmp_path / "h")
    with (home.root / "config.toml").open("a") as f:
        f.write('\n[knowledge]\ndomains = ["infra", "materials"]\n')
    src = write(
        tmp_path / "in.jsonl",
        [
            {"content": "the broker needs three replicas", "project": "KAFKA", "domains": ["infra"]},
            {"content": "no project, one domain", "domains": ["materials"]},
            {"content": "plain"},
        ],
    )
    with open_sub(home) as sub:
        sub.register_project("kafka-platform", aliases=["kafka"])
        assert sub.import_jsonl(src)["imported"] == 3
        got = {m["content"]: (m["project"], m["domains"]) for m in sub.list(project=None)}
        assert got == {
            "the broker needs three replicas": ("kafka-platform", ["infra"]),
            "no project, one domain": ("", ["materials"]),
            "plain": ("", []),
        }
        assert [m["content"] for m in sub.list(project="kafka")] == ["the broker needs three replicas"]
        sub.export_memories("jsonl", tmp_path / "out.jsonl")
    exported = [json.loads(x) for x in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert {(r.get("project"), tuple(r.get("domains", ()))) for r in exported} == {
        ("kafka-platform", ("infra",)),
        (None, ("materials",)),
        (None, ()),
    }
    other = new_home(tmp_path / "other")
    with (other.root / "config.toml").open("a") as f:
        f.write('\n[knowledge]\ndomains = ["infra", "materials"]\n')
    with open_sub(other) as sub:
        assert sub.import_jsonl(tmp_path / "out.jsonl")["imported"] == 3
        again = {m["content"]: (m["project"], m["domains"]) for m in sub.list(project=None)}
    assert again == got


def test_an_unknown_domain_or_a_bad_project_is_a_numbered_bad_line_and_nothing_is_written(
    tmp_path: Path,
) -> None:
    home = new_home(tmp_path / "h")
    with (home.root / "config.toml").open("a") as f:
        f.write('\n[knowledge]\ndomains = ["infra"]\n')
    src = write(
        tmp_path / "in.jsonl",
        [
            {"content": "fine", "domains": ["infra"]},
            {"content": "unknown domain", "domains": ["astrology"]},
            {"content": "not a project name", "project": "a\nb"},
            {"content": "wrong type", "project": 7},
        ],
    )
    before = log_digest(home)
    # Lines that do not parse are reported first; the checks against the home (domains, the
    # project registry, policies, hooks) run once every line parses.
    with open_sub(home) as sub, pytest.raises(ImportFailed) as info:
        sub.import_jsonl(src)
    assert [b["line"] for b in info.value.details["bad_lines"]] == [3, 4]
    write(src, [{"content": "fine", "domains": ["infra"]}, {"content": "unknown", "domains": ["astrology"]}])
    with open_sub(home) as sub, pytest.raises(ImportFailed) as info:
        sub.import_jsonl(src)
    [bad] = info.value.details["bad_lines"]
    assert bad["line"] == 2 and "astrology" in bad["message"]
    assert log_digest(home) == before


def _parsed_or_error(raw: bytes, *, shortcut: bool) -> Any:
    """What parse_line makes of `raw` (the payload's map without its random id, or the error),
    with the surrogate-escape shortcut on or forced off."""
    try:
        if shortcut:
            p = importer.parse_line(raw)
        else:
            p = importer.parse_record(json.loads(raw.decode()), unicode_checked=False)
    except Exception as exc:  # the error itself is what is compared
        return (type(exc).__name__, str(exc))
    return {k: v for k, v in p.to_data().items() if k != "id"}


@pytest.mark.parametrize(
    "raw",
    [
        rb'{"content": "lone \ud800 surrogate"}',
        rb'{"content": "low \udc00 alone"}',
        rb'{"content": "x", "metadata": {"k\udfff": 1}}',
        rb'{"content": "x", "metadata": {"a": ["deep", {"b": "\uDBFF"}]}}',
        rb'{"content": "x", "tags": ["\ud83d"]}',
        rb'{"content": "pair \ud83d\ude00 is fine", "title": "\ud83d\ude00"}',
        rb'{"content": "an escaped backslash \\ud800 is text"}',
        '{"content": "plain UTF-8 \u00e9\u4e2d\U0001f600", "metadata": {"\u00e9": ["\u00e9"]}}'.encode(),
    ],
)
def test_the_unicode_shortcut_gives_what_the_full_walk_gives(raw: bytes) -> None:
    """A line without a surrogate escape skips the model's walk over nested text: whatever the
    line, the result (payload or error message) is the one the walk gives."""
    assert _parsed_or_error(raw, shortcut=True) == _parsed_or_error(raw, shortcut=False)


def test_a_byte_order_mark_is_refused_as_json_loads_refuses_it() -> None:
    with pytest.raises(importer.BadInput) as info:
        importer.parse_line(b'\xef\xbb\xbf{"content": "x"}')
    assert "Unexpected UTF-8 BOM" in info.value.message


def test_a_bulk_import_compacts_the_index_once_after_its_last_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each batch's catch-up would compact (a tiny threshold); the import defers it to the last
    batch, and the tables are those a rebuild makes."""
    from mnemolog.projections.memory import fold as memory_fold
    from tests.projections.kit import logical_rows

    monkeypatch.setattr(memory_fold, "COMPACT_MIN_ROWS", 10)
    compactions: list[int] = []
    real = memory_fold.MemoryFold.compact
    monkeypatch.setattr(
        memory_fold.MemoryFold, "compact", lambda self: (compactions.append(1), real(self))[1]
    )
    home = new_home(tmp_path / "h")
    f = write(
        tmp_path / "in.jsonl", [{"content": f"memory number {i} about topic {i % 7}"} for i in range(25)]
    )
    with open_sub(home) as s:
        s.store("one before the import")
        compactions.clear()
        report = s.import_jsonl(f, batch=4, progress=False)
        assert report["batches"] == 7
        assert len(compactions) == 1
        with s.session() as ses:
            imported = logical_rows(ses.conn)
            delta = ses.conn.execute("SELECT count(*) FROM postings_delta").fetchone()
        assert delta == (0,)
        s.projections.rebuild()
        with s.session() as ses:
            assert logical_rows(ses.conn) == imported
