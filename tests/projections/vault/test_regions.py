"""Managed regions: a person's text outside them and their edits inside are never overwritten."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mnemolog.projections.vault import regions
from mnemolog.projections.vault.regions import RegionError, block, merge, parse

_person = st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\x00"), max_size=80).filter(
    lambda s: "mnemolog:" not in s
)


def doc(a: str = "old a\n", b: str = "old b\n") -> str:
    return f"# Title\nintro by hand\n{block('x.a', a)}between\n{block('x.b', b)}tail\n"


def test_regions_update_and_the_rest_stays() -> None:
    r = merge(doc(), {"x.a": "new a", "x.b": "old b\n"})
    assert r.updated == ["x.a"] and r.kept_edits == [] and r.missing == []
    assert r.text == f"# Title\nintro by hand\n{block('x.a', 'new a')}between\n{block('x.b', 'old b')}tail\n"
    assert merge(r.text, {"x.a": "new a", "x.b": "old b"}).text == r.text


def test_a_hand_edited_region_is_kept_and_reported() -> None:
    edited = doc().replace("old a\n", "old a, corrected by a person\n")
    r = merge(edited, {"x.a": "new a", "x.b": "new b"})
    assert r.kept_edits == ["x.a"] and r.updated == ["x.b"]
    assert "corrected by a person" in r.text and "new a" not in r.text
    assert regions.hand_edited(edited) == ["x.a"]


def test_a_deleted_region_is_not_put_back_and_an_empty_invitation_is_filled() -> None:
    text = "# T\nmine\n<!-- mnemolog:begin x.b -->\n<!-- mnemolog:end x.b -->\n"
    r = merge(text, {"x.a": "a", "x.b": "b"})
    assert r.missing == ["x.a"]
    assert r.text == "# T\nmine\n" + block("x.b", "b")


def test_regions_not_asked_for_are_left_as_they_are() -> None:
    assert merge(doc(), {}).text == doc()


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("<!-- mnemolog:end x -->\n", 1),
        ("<!-- mnemolog:begin x -->\n<!-- mnemolog:begin y -->\n", 2),
        (
            "<!-- mnemolog:begin x -->\n<!-- mnemolog:end x -->\n"
            "<!-- mnemolog:begin x -->\n<!-- mnemolog:end x -->",
            3,
        ),
        ("a\n<!-- mnemolog:begin x -->\nno end", 2),
        ("<!-- mnemolog:begin x -->\n<!-- mnemolog:end y -->\n", 2),
        ("<!-- mnemolog:begin X! -->\n", 1),
        ("text <!-- mnemolog:begin x --> inline\n", 1),
    ],
)
def test_unpaired_markers_refuse_the_merge(text: str, line: int) -> None:
    with pytest.raises(RegionError) as exc:
        merge(text, {"x": "new"})
    assert exc.value.line == line


def test_crlf_files_keep_their_line_end_after_a_region() -> None:
    text = "a\r\n" + block("x.a", "old").replace("\n", "\r\n") + "b\r\n"
    # The content (with CRLF) no longer matches the digest of the LF content: a person's file.
    assert merge(text, {"x.a": "new"}).kept_edits == ["x.a"]
    text = "a\r\n<!-- mnemolog:begin x.a -->\r\n<!-- mnemolog:end x.a -->\r\nb\r\n"
    out = merge(text, {"x.a": "new"}).text
    assert out.startswith("a\r\n<!-- mnemolog:begin x.a sha256=") and out.endswith("-->\r\nb\r\n")


@settings(max_examples=200, deadline=None)
@given(_person, _person, _person, st.text(max_size=60), st.text(max_size=60))
def test_text_outside_regions_survives_any_merge(pre: str, mid: str, post: str, a: str, b: str) -> None:
    pre, mid = pre + "\n", mid + "\n"
    text = pre + block("x.a", "first") + mid + block("x.b", "first") + post
    out = merge(text, {"x.a": a, "x.b": b}).text
    rs = parse(out)
    assert out[: rs[0].begin] == pre
    assert out[rs[0].end : rs[1].begin] == mid
    assert out[rs[1].end :] == post
    assert rs[0].content(out).rstrip("\n") == a.rstrip("\n") or a.endswith("\n")
    assert regions.hand_edited(out) == []


def test_content_that_quotes_a_marker_cannot_break_the_file() -> None:
    hostile = "- <!-- mnemolog:end x.a -->\n<!-- mnemolog:begin x.b -->\n"
    out = merge(doc(), {"x.a": hostile}).text
    assert [r.name for r in parse(out)] == ["x.a", "x.b"]
    assert merge(out, {"x.a": hostile}).text == out
