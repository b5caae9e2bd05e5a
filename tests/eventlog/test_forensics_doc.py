"""docs/forensics.md and each bundle's VERIFY.md stay exact: format strings, § references, cosignatures.

The witness cosignature worked example in docs/forensics.md §10 is rebuilt
here from the code; every "§N" that a document in docs/ or a string in the
code cites of docs/format.md or docs/forensics.md must name a heading that
exists; VERIFY.md quotes the format its bundle's manifest carries.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mnemolog.eventlog.bundle import format as bundle_format
from mnemolog.eventlog.format.note import parse_note
from mnemolog.eventlog.witness.cosignature import (
    CosignerKey,
    CosignerVerifier,
    add_signature_lines,
    cosignatures,
    signed_message,
)
from tests.eventlog.test_format_doc import _example

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
FORENSICS = DOCS / "forensics.md"
WITNESS = CosignerKey(bytes(range(0x20, 0x40)), "witness.example")
TS = 1_700_000_100


def cosigned_example() -> tuple[str, bytes, bytes]:
    """The format.md §11 checkpoint cosigned by the example witness: (body text, message, note)."""
    _, _, cp = _example()
    text = parse_note(cp, "example").text
    note = add_signature_lines(cp, [WITNESS.cosign(text, TS)], 100)
    assert note is not None
    return text, signed_message(text, TS), note


def cosignature_block() -> str:
    """The text of the doc's `<!-- example: cosignature -->` block."""
    _, message, note = cosigned_example()
    v = WITNESS.verifier
    return (
        "```text\n"
        f"witness vkey   {v.vkey()}\n"
        f"key hash       {v.key_hash.hex()}\n"
        f"timestamp      {TS} (8 bytes: {TS.to_bytes(8, 'big').hex()})\n"
        "```\n\n"
        "The signed message (every line ends in a newline, the last one included):\n\n"
        "<!-- example: cosignature-message -->\n"
        f"```text\n{message.decode()}```\n\n"
        "The cosigned checkpoint file (the log key's line, then the witness's):\n\n"
        "<!-- example: cosigned-checkpoint -->\n"
        f"```text\n{note.decode()}```\n"
    )


def _doc() -> str:
    return FORENSICS.read_text("utf-8")


def test_the_cosignature_example_is_the_codes() -> None:
    text = _doc()
    start = text.index("<!-- example: cosignature -->\n") + len("<!-- example: cosignature -->\n")
    assert text[start:].startswith(cosignature_block()), "regenerate with cosignature_block()"


def test_the_cosignature_example_checks_by_the_doc_steps() -> None:
    text, message, note = cosigned_example()
    import base64
    import hashlib

    import nacl.signing

    vkey = WITNESS.verifier.vkey()
    name, _, b64 = vkey.split("+", 2)
    raw = base64.b64decode(b64)
    assert raw[0] == 0x04
    pk = raw[1:]
    khash = hashlib.sha256(name.encode() + b"\n\x04" + pk).digest()[:4]
    lines = note.decode().split("\n\n", 1)[1].splitlines()
    mine = [base64.b64decode(ln.split(" ")[2]) for ln in lines if ln.split(" ")[1] == name]
    assert len(mine) == 1 and len(mine[0]) == 76 and mine[0][:4] == khash
    t = int.from_bytes(mine[0][4:12], "big")
    assert t == TS
    rebuilt = f"cosignature/v1\ntime {t}\n".encode() + text.encode()
    assert rebuilt == message
    nacl.signing.VerifyKey(pk).verify(rebuilt, mine[0][12:])
    # The same line read by the code, also with the key given as a plain Ed25519 (0x01) vkey.
    got = cosignatures(parse_note(note, "x"), [CosignerVerifier.from_vkey(vkey)])
    assert [c.timestamp for c in got] == [TS]


def test_verify_md_quotes_the_bundles_format() -> None:
    for fmt in bundle_format.FORMATS:
        md = bundle_format.verify_md("m", True, "mnemolog/00", 3, 2, fmt).decode()
        assert f"(format `{fmt}`)" in md
        others = set(bundle_format.FORMATS) - {fmt}
        assert not any(f"(format `{o}`)" in md for o in others)
    # What the exporter writes today is the newest format, and the doc says so.
    assert bundle_format.FORMATS[-1] == bundle_format.FORMAT_V4
    assert f'`"{bundle_format.FORMAT_V4}"` (what the exporter writes' in _doc()


def test_verify_md_explains_cosignatures() -> None:
    md = bundle_format.verify_md("m", True, "mnemolog/00", 3, 2).decode()
    for needle in ("cosignature/v1", "0x0a || 0x04", "76 bytes", "--witness-key", "--min-witnesses"):
        assert needle in md, needle


# -- § references ----------------------------------------------------------------------


def headings(doc: Path) -> dict[str, str]:
    """Section number -> heading title, for the `## N. Title` headings of a doc."""
    out = {}
    for m in re.finditer(r"^##+ (\d+[a-z]?)\. (.+)$", doc.read_text("utf-8"), re.M):
        out[m.group(1)] = m.group(2)
    return out


# A citation of a doc, then its section number(s): "format.md §8", "[format.md](format.md) §8",
# "format.md of mnemolog, §13", "[context.md](context.md) §4 and §6".
CITE = re.compile(r"([a-z]+)\.md\)?(?: of mnemolog,)? ((?:§\d+[a-z]?(?:, | and | or |–)?)+)")


def _cited(text: str) -> list[tuple[str, str]]:
    return [(m.group(1), n) for m in CITE.finditer(text) for n in re.findall(r"§(\d+[a-z]?)", m.group(2))]


def _texts() -> dict[str, str]:
    """Every doc, the README, and the source of the code, tests and benchmarks."""
    out = {str(p.relative_to(REPO)): p.read_text("utf-8") for p in sorted(DOCS.glob("*.md"))}
    for sub in ("eventlog", "substrate", "cli", "projections", "curators", "tests", "bench"):
        for p in sorted((REPO / sub).rglob("*.py")):
            out[str(p.relative_to(REPO))] = p.read_text("utf-8")
    out["README.md"] = (REPO / "README.md").read_text("utf-8")
    return out


def test_every_cited_section_exists() -> None:
    known = {p.stem: headings(p) for p in DOCS.glob("*.md")}
    bad, n = [], 0
    for where, text in _texts().items():
        for doc, number in _cited(text):
            n += 1
            if doc in known and number not in known[doc]:
                bad.append((where, doc, number))
    assert n > 20 and not bad, bad
    # A bare "§N" in a doc cites the doc itself (RFC and CBOR section numbers aside).
    for doc, sections in known.items():
        t = CITE.sub("", (DOCS / f"{doc}.md").read_text("utf-8"))
        t = re.sub(r"RFC \d{4} §[\d.]+|§4\.2\.1", "", t)
        own = set(re.findall(r"§(\d+[a-z]?)", t))
        assert own <= set(sections), (doc, sorted(own - set(sections)))


@pytest.mark.parametrize(
    ("where", "number", "words"),
    [
        ("eventlog/bundle/format.py", "13", "committed heads"),
        ("eventlog/bundle/format.py", "12", "Cosignatures"),
        ("eventlog/verify/verifier.py", "8", "What verification checks"),
        ("eventlog/format/entry.py", "2", "Entries"),
        ("eventlog/verify/backchain.py", "3a", "Completeness"),
    ],
)
def test_code_citations_name_the_right_section(where: str, number: str, words: str) -> None:
    doc = "forensics" if number == "3a" else "format"
    assert words in headings(DOCS / f"{doc}.md")[number]
    assert f"§{number}" in (REPO / where).read_text("utf-8")
