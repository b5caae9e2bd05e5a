"""Reading documents for `ingest`: which files are taken, and the I/O that reads them safely.

`discover(paths, globs)` expands the paths given to `ingest` into files:
a file given by name is taken as it is (its symlink followed); a directory
is walked (files in order of their path under it), taking the files whose name matches one of the
globs, never following symlinks (a link inside a tree is skipped, so a
tree cannot loop or leave itself) and skipping hidden names (`.git/`,
`.env`). `read_document(path)` refuses, without blocking or reading more
than the limit:

- anything that is not a regular file (a FIFO, a device such as
  /dev/zero, a socket, a directory): `not_regular`;
- a file over the size limit: `too_large` (the size is checked on the open
  descriptor and the read stops one byte past the limit, so a file that
  grows while read is caught too);
- bytes that no documented encoding turns into text
  (`projections.context.decode`): `document_encoding`.

Every refusal is a `DocumentRefused` naming the path and what was found.
"""

from __future__ import annotations

import fnmatch
import hashlib
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from mnemolog.eventlog.store.fsio import FileTooLarge, NotRegularFile, read_regular
from mnemolog.projections.context.decode import DEFAULT_FALLBACKS, DocumentRefused, decode_document

DEFAULT_GLOBS: Final = ("*.md", "*.markdown", "*.txt")
DEFAULT_MAX_FILE_BYTES: Final = 1 << 20


@dataclass(frozen=True)
class Found:
    """A file `discover` found: its absolute path, the name shown in packs, and the root it came from."""

    path: str
    name: str
    root: str


@dataclass(frozen=True)
class Skipped:
    path: str
    reason: str  # symlink | hidden | not_regular


@dataclass(frozen=True)
class DocumentText:
    path: str
    size: int
    sha256: str
    encoding: str
    text: str


def _not_regular(path: str, what: str) -> DocumentRefused:
    return DocumentRefused(
        f"{path}: is {what}, not a regular file; only regular files are ingested",
        file=path,
        reason="not_regular",
        found=what,
    )


def _too_large(path: str, size: int, limit: int) -> DocumentRefused:
    return DocumentRefused(
        f"{path}: is {size} bytes, over the ingest limit of {limit} bytes; skipped",
        file=path,
        reason="too_large",
        expected=limit,
        found=size,
    )


def read_bytes(path: str, max_bytes: int) -> bytes:
    """The bytes of a regular file of at most `max_bytes`, or DocumentRefused."""
    try:
        return read_regular(path, max_bytes)
    except FileNotFoundError:
        raise DocumentRefused(f"{path}: no such file", file=path, reason="missing") from None
    except NotRegularFile as exc:
        raise _not_regular(path, exc.kind) from None
    except FileTooLarge as exc:
        raise _too_large(path, exc.size, max_bytes) from None
    except OSError as exc:
        raise DocumentRefused(
            f"{path}: cannot read: {exc.strerror}", file=path, reason="unreadable"
        ) from None


def read_document(
    path: str, *, max_bytes: int = DEFAULT_MAX_FILE_BYTES, fallbacks: Sequence[str] = DEFAULT_FALLBACKS
) -> DocumentText:
    """A document's text with the size and SHA-256 of its bytes, or DocumentRefused."""
    data = read_bytes(path, max_bytes)
    decoded = decode_document(data, path, fallbacks)
    return DocumentText(path, len(data), hashlib.sha256(data).hexdigest(), decoded.encoding, decoded.text)


def matches(name: str, globs: Sequence[str]) -> bool:
    """Whether a file's base name matches one of the globs (case-sensitively, like a shell)."""
    return any(fnmatch.fnmatchcase(name, g) for g in globs)


def _walk(root: Path, globs: Sequence[str], found: list[Found], skipped: list[Skipped]) -> None:
    base = str(root)
    here: list[Found] = []
    for dirpath, dirnames, filenames in os.walk(base, followlinks=False):
        keep = []
        for d in sorted(dirnames):
            full = os.path.join(dirpath, d)
            if d.startswith("."):
                continue
            if os.path.islink(full):
                skipped.append(Skipped(full, "symlink"))
                continue
            keep.append(d)
        dirnames[:] = keep
        for f in sorted(filenames):
            full = os.path.join(dirpath, f)
            if f.startswith(".") or not matches(f, globs):
                continue
            if os.path.islink(full):
                skipped.append(Skipped(full, "symlink"))
                continue
            here.append(Found(full, os.path.relpath(full, base), base))
    found.extend(sorted(here, key=lambda f: f.name))


def discover(
    paths: Iterable[str | os.PathLike[str]], globs: Sequence[str] = DEFAULT_GLOBS
) -> tuple[list[Found], list[Skipped]]:
    """The files `ingest` reads for these paths, each once, in a stable order; and what it skipped.

    A path that does not exist is refused (DocumentRefused, reason `missing`).
    """
    found: list[Found] = []
    skipped: list[Skipped] = []
    for p in paths:
        given = Path(p)
        try:
            resolved = given.resolve(strict=True)
        except (FileNotFoundError, RuntimeError):
            raise DocumentRefused(
                f"{given}: no such file or directory", file=str(given), reason="missing"
            ) from None
        except OSError as exc:
            raise DocumentRefused(f"{given}: {exc.strerror}", file=str(given), reason="unreadable") from None
        if resolved.is_dir():
            _walk(resolved, globs, found, skipped)
        else:
            # Named on the command line: taken whatever its name; read_document checks what it is.
            found.append(Found(str(resolved), resolved.name, str(resolved.parent)))
    seen: set[str] = set()
    unique = []
    for f in found:
        if f.path not in seen:
            seen.add(f.path)
            unique.append(f)
    return unique, skipped
