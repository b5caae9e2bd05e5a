"""A document's bytes into text: the encodings `ingest` accepts, in the order it tries them.

1. A byte order mark decides: UTF-32 (LE/BE), UTF-8, UTF-16 (LE/BE). The
   bytes must then decode under that encoding, or the file is refused: a
   BOM that lies is not guessed around.
2. Without a BOM, strict UTF-8.
3. Then each fallback encoding in order (default: `cp1252`, the Windows
   superset of Latin-1 that most legacy text files are in), accepted only
   when the result reads as text: no C0 control characters but tab, line
   feed, form feed, vertical tab and carriage return.

Whatever the encoding, a NUL character means the file is not text (a binary
file decodes as UTF-16 or cp1252 all too easily) and is refused. Line ends
become LF (CRLF and lone CR), the BOM is dropped. Pure functions; the
error names the path it was given.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from mnemolog.eventlog.errors import BadInput
from mnemolog.projections.context.chunker import normalise_newlines

DEFAULT_FALLBACKS: Final = ("cp1252",)

_BOMS: Final = (
    (codecs.BOM_UTF32_LE, "utf-32-le"),
    (codecs.BOM_UTF32_BE, "utf-32-be"),
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)
_CONTROL = re.compile(r"[\x00-\x08\x0e-\x1f\x7f]")


class DocumentRefused(BadInput):
    """A file ingest will not read (not a regular file, too large, not text); exit 65."""

    slug = "document_refused"


class DocumentEncodingError(DocumentRefused):
    """Bytes that no documented encoding turns into text."""

    slug = "document_encoding"


@dataclass(frozen=True)
class Decoded:
    text: str
    encoding: str


def check_fallbacks(names: Sequence[str]) -> tuple[str, ...]:
    """Fallback encoding names as Python spells them; unknown names are a ValueError."""
    out = []
    for name in names:
        if not isinstance(name, str):
            raise ValueError(f"an encoding name must be text, found {name!r}")
        try:
            out.append(codecs.lookup(name).name)
        except LookupError:
            raise ValueError(f"unknown encoding {name!r}") from None
    return tuple(out)


def _refuse(path: str, message: str, **details: object) -> DocumentEncodingError:
    return DocumentEncodingError(f"{path}: {message}", file=path, **details)


def decode_document(data: bytes, path: str, fallbacks: Sequence[str] = DEFAULT_FALLBACKS) -> Decoded:
    """The text of a file's bytes, or DocumentEncodingError naming `path` and what failed."""
    for bom, name in _BOMS:
        if data.startswith(bom):
            try:
                text = data[len(bom) :].decode(name)
            except UnicodeDecodeError as exc:
                raise _refuse(
                    path,
                    f"starts with a {name} byte order mark but is not {name} "
                    f"(bad bytes at offset {exc.start + len(bom)})",
                    encoding=name,
                    offset=exc.start + len(bom),
                ) from None
            return _checked(text, name, path)
    try:
        return _checked(data.decode("utf-8"), "utf-8", path)
    except UnicodeDecodeError as exc:
        first_bad = exc.start
    tried = ["utf-8"]
    for name in check_fallbacks(fallbacks):
        tried.append(name)
        try:
            text = data.decode(name)
        except UnicodeDecodeError:
            continue
        if "\x00" in text or _CONTROL.search(text):
            continue
        return Decoded(normalise_newlines(text), name)
    raise _refuse(
        path,
        f"is not UTF-8 (a bad byte at offset {first_bad}) and does not read as text in "
        f"{', '.join(tried[1:]) or 'any fallback encoding'}; convert it to UTF-8",
        offset=first_bad,
        tried=tried,
    )


def _checked(text: str, name: str, path: str) -> Decoded:
    nul = text.find("\x00")
    if nul >= 0:
        raise _refuse(path, f"holds a NUL character at character {nul}: not a text file", encoding=name)
    return Decoded(normalise_newlines(text), name)
