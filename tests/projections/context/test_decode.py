"""Document decoding: byte order marks, UTF-8, the fallback encodings, and what is refused."""

from __future__ import annotations

import codecs

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mnemolog.projections.context.decode import (
    DocumentEncodingError,
    check_fallbacks,
    decode_document,
)


def test_utf8_with_and_without_bom() -> None:
    assert decode_document("café\r\nx".encode(), "a.md").text == "café\nx"
    d = decode_document(codecs.BOM_UTF8 + "café".encode(), "a.md")
    assert (d.text, d.encoding) == ("café", "utf-8")


@pytest.mark.parametrize("name", ["utf-16-le", "utf-16-be", "utf-32-le", "utf-32-be"])
def test_bom_decides_utf16_and_utf32(name: str) -> None:
    bom = {
        "utf-16-le": codecs.BOM_UTF16_LE,
        "utf-16-be": codecs.BOM_UTF16_BE,
        "utf-32-le": codecs.BOM_UTF32_LE,
        "utf-32-be": codecs.BOM_UTF32_BE,
    }[name]
    d = decode_document(bom + "Zerodur ✓\r\n# Heading".encode(name), "x.md")
    assert (d.text, d.encoding) == ("Zerodur ✓\n# Heading", name)


def test_cp1252_fallback_and_its_absence() -> None:
    data = "Résumé – naïve".encode("cp1252")
    d = decode_document(data, "legacy.txt")
    assert (d.text, d.encoding) == ("Résumé – naïve", "cp1252")
    with pytest.raises(DocumentEncodingError) as exc:
        decode_document(data, "legacy.txt", fallbacks=())
    assert "legacy.txt" in exc.value.message and exc.value.exit_code == 65
    assert exc.value.details["offset"] == 1


def test_binary_is_refused_with_the_path() -> None:
    png = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256))
    with pytest.raises(DocumentEncodingError) as exc:
        decode_document(png, "/data/img.md")
    assert exc.value.details["file"] == "/data/img.md"
    assert exc.value.slug == "document_encoding"


def test_nul_in_valid_utf8_is_not_text() -> None:
    with pytest.raises(DocumentEncodingError, match="NUL"):
        decode_document(b"text\x00more", "n.md")
    # UTF-16 without a BOM is ASCII with NULs between: refused, not garbled.
    with pytest.raises(DocumentEncodingError):
        decode_document("plain".encode("utf-16-le"), "u.md")


def test_a_lying_bom_is_refused() -> None:
    with pytest.raises(DocumentEncodingError, match="byte order mark") as exc:
        decode_document(codecs.BOM_UTF8 + b"ok \xff\xfe bad", "bom.md")
    assert exc.value.details["offset"] == 6
    with pytest.raises(DocumentEncodingError):
        decode_document(codecs.BOM_UTF16_LE + b"\x00\xd8", "odd.md")  # lone surrogate


def test_control_characters_make_a_fallback_fail() -> None:
    # Invalid UTF-8 (0xff) plus a C0 control: cp1252 would decode it, but it is not text.
    with pytest.raises(DocumentEncodingError):
        decode_document(b"\xff\x01\x02abc", "c.txt")


def test_fallbacks_are_checked() -> None:
    assert check_fallbacks(["latin-1", "CP1252"]) == ("iso8859-1", "cp1252")
    with pytest.raises(ValueError, match="unknown encoding"):
        check_fallbacks(["no-such-codec"])
    with pytest.raises(ValueError):
        check_fallbacks([1])  # type: ignore[list-item]


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\x00")))
def test_any_utf8_text_round_trips_modulo_line_ends(text: str) -> None:
    d = decode_document(text.encode(), "p.md")
    assert d.text == text.replace("\r\n", "\n").replace("\r", "\n")
    assert d.encoding == "utf-8"


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=256))
def test_arbitrary_bytes_decode_or_are_refused_by_name(data: bytes) -> None:
    try:
        d = decode_document(data, "fuzz.md")
    except DocumentEncodingError as exc:
        assert exc.details["file"] == "fuzz.md"
    else:
        assert "\x00" not in d.text and "\r" not in d.text
