"""The frontmatter byte format: canonical round trips and refusal of hostile input."""

from __future__ import annotations

import os
from datetime import date
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings

from mnemolog.eventlog.errors import BadInput
from mnemolog.projections.vault import frontmatter as fm

from .strategies import bodies, metas


@settings(max_examples=300)
@given(metas, bodies)
def test_parse_inverts_serialize(meta: dict[str, Any], body: str) -> None:
    doc = fm.Document(meta, body)
    text = fm.serialize(doc)
    back = fm.parse(text.encode("utf-8"))
    assert back == doc
    # ...and the text is the canonical one: serializing again gives the same bytes.
    assert fm.serialize(back) == text


def test_known_keys_in_seed_order_then_unknown_sorted() -> None:
    meta = {
        "zeta": 1,
        "tags": ["a"],
        "alpha": 2,
        "superseded_by": None,
        "supersedes": None,
        "expires_at": None,
        "pinned": False,
        "confidence": "low",
        "sources": ["observation"],
        "last_seen": date(2026, 1, 2),
        "captured": date(2026, 1, 1),
        "type": "user",
        "description": "d",
        "name": "n",
        "schema_version": 1,
    }
    keys = [line.split(":")[0] for line in fm.serialize(fm.Document(meta, "")).splitlines()[1:-1]]
    keys = [k for k in keys if not k.startswith("-")]
    assert keys == [
        "schema_version",
        "name",
        "description",
        "type",
        "captured",
        "last_seen",
        "sources",
        "confidence",
        "pinned",
        "expires_at",
        "supersedes",
        "superseded_by",
        "tags",
        "alpha",
        "zeta",
    ]


def test_exact_bytes_of_a_note() -> None:
    doc = fm.Document(
        {
            "schema_version": 1,
            "name": "Debt: priority order",
            "description": "Pay the highest rate first",
            "type": "feedback",
            "captured": date(2026, 5, 6),
            "last_seen": date(2026, 5, 7),
            "sources": ["conversation_2026-05-06"],
            "confidence": "high",
            "tags": ["debt", "yes"],
        },
        "Body.\n",
    )
    assert fm.serialize(doc) == (
        "---\n"
        "schema_version: 1\n"
        'name: "Debt: priority order"\n'
        "description: Pay the highest rate first\n"
        "type: feedback\n"
        "captured: 2026-05-06\n"
        "last_seen: 2026-05-07\n"
        "sources:\n"
        "- conversation_2026-05-06\n"
        "confidence: high\n"
        "tags:\n"
        "- debt\n"
        '- "yes"\n'
        "---\n"
        "Body.\n"
    )


def test_dates_load_as_dates_and_impossible_ones_stay_text() -> None:
    doc = fm.parse("---\na: 2026-02-28\nb: 2026-02-30\nc: 2026-1-5\nd: 2026-05-06T10:00:00Z\n---\n")
    assert doc.meta == {
        "a": date(2026, 2, 28),
        "b": "2026-02-30",
        "c": "2026-1-5",
        "d": "2026-05-06T10:00:00Z",
    }


def test_body_is_everything_after_the_closing_line() -> None:
    doc = fm.parse("---\na: 1\n---\n\n# Title\n---\nmore\n")
    assert doc.body == "\n# Title\n---\nmore\n"
    assert fm.parse("---\na: 1\n---").body == ""
    assert fm.parse("---\n---\nbody").meta == {}


def test_hand_written_crlf_and_bom_are_read() -> None:
    doc = fm.parse("\ufeff---\r\nname: x\r\n---\r\nbody\r\n".encode())
    assert doc.meta == {"name": "x"}
    assert doc.body == "body\r\n"


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "expected '---' on line 1"),
        ("name: x\n", "expected '---' on line 1"),
        ("---", "no closing '---'"),
        ("---\nname: x\n", "no closing '---'"),
        ("---\nname: [x\n---\n", "invalid YAML"),
        ("---\n- a\n- b\n---\n", "expected a mapping, found a list"),
        ("---\njust text\n---\n", "expected a mapping, found a str"),
        ("---\na: 1\na: 2\n---\n", "duplicate key 'a'"),
        ("---\n1: x\n---\n", "expected string keys"),
        ("---\n? [a]\n: x\n---\n", "expected string keys"),
        ("---\na: &x [1]\nb: *x\n---\n", "anchors are not allowed"),
        ("---\na: *x\n---\n", "aliases are not allowed"),
        ("---\n<<: {a: 1}\n---\n", "merge keys"),
        ("---\na: !!binary aGk=\n---\n", "binary is not allowed"),
        ("---\na: !!set {x}\n---\n", "set is not allowed"),
        ("---\na: !!python/object:os.system {}\n---\n", "invalid YAML"),
        ("---\na: .nan\n---\n", "non-finite"),
        ("---\na: .inf\n---\n", "non-finite"),
        ("---\na: 1\n---\nb: 2\n---\n", None),  # a second block is body, not a document
        ("---\n" + "a: " + "[" * 40 + "]" * 40 + "\n---\n", "nesting deeper"),
        ("---\na: 1\n--- \n", None),
    ],
)
def test_malformed_and_hostile_frontmatter(text: str, reason: str | None) -> None:
    if reason is None:
        assert isinstance(fm.parse(text).meta, dict)
        return
    with pytest.raises(fm.FrontmatterError) as info:
        fm.parse(text.encode("utf-8"), source="agent/memory/x.md")
    assert reason in info.value.reason
    assert info.value.exit_code == 65
    assert str(info.value).startswith("agent/memory/x.md: frontmatter: ")


def test_billion_laughs_is_refused_before_expansion() -> None:
    lines = ['a0: &a0 "lol"']
    for i in range(1, 10):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]")
    with pytest.raises(fm.FrontmatterError, match="anchors are not allowed"):
        fm.parse("---\n" + "\n".join(lines) + "\n---\n")


def test_invalid_utf8_names_the_offset() -> None:
    with pytest.raises(fm.FrontmatterError, match=r"byte 0xff at offset 10"):
        fm.parse(b"---\nname: \xff\n---\n")


def test_oversized_file_and_frontmatter_are_refused() -> None:
    with pytest.raises(fm.FrontmatterError, match="limit is"):
        fm.parse(b"---\n---\n" + b"x" * fm.MAX_FILE_BYTES)
    big = "---\n" + "".join(f"k{i}: {'v' * 60}\n" for i in range(1200)) + "---\n"
    with pytest.raises(fm.FrontmatterError, match="frontmatter exceeds"):
        fm.parse(big)
    unterminated = "---\n" + "k: v\n" * 20000
    with pytest.raises(fm.FrontmatterError, match="without a closing"):
        fm.parse(unterminated)


def test_truncation_at_every_byte_is_refused_or_reads_the_same_meta() -> None:
    full = fm.serialize_bytes(
        fm.Document({"schema_version": 1, "name": "é\nx", "tags": ["a", {"b": [1]}]}, "body")
    )
    closing = full.index(b"\n---\n") + 4  # from here on the closing line is complete
    for cut in range(len(full)):
        if cut < closing:
            with pytest.raises(fm.FrontmatterError):
                fm.parse(full[:cut])
        else:
            assert fm.parse(full[:cut]).meta == fm.parse(full).meta


@pytest.mark.parametrize("value", [float("nan"), float("inf"), b"bytes", {1, 2}, object(), "\ud800"])
def test_serialize_refuses_values_it_cannot_read_back(value: Any) -> None:
    with pytest.raises(BadInput):
        fm.serialize(fm.Document({"x": value}, ""))


def test_serialize_refuses_datetimes_and_non_string_keys() -> None:
    from datetime import datetime

    with pytest.raises(BadInput, match="datetime"):
        fm.serialize(fm.Document({"x": datetime(2026, 1, 1, 10)}, ""))
    with pytest.raises(BadInput, match="string keys"):
        fm.serialize(fm.Document({"x": {1: "a"}}, ""))


def test_read_document_refuses_non_regular_files(tmp_path: Path) -> None:
    fifo = tmp_path / "note.md"
    os.mkfifo(fifo)
    with pytest.raises(fm.FrontmatterError, match="regular file"):
        fm.read_document(fifo)
    with pytest.raises(fm.FrontmatterError, match="regular file"):
        fm.read_document(tmp_path)
    with pytest.raises(fm.FrontmatterError, match="cannot open"):
        fm.read_document(tmp_path / "missing.md")


def test_read_document_refuses_oversized_file_by_size(tmp_path: Path) -> None:
    big = tmp_path / "big.md"
    with open(big, "wb") as fh:
        fh.truncate(fm.MAX_FILE_BYTES + 1)
    with pytest.raises(fm.FrontmatterError, match="limit is"):
        fm.read_document(big)
