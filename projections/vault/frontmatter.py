"""Markdown with YAML frontmatter: the byte format of every note and wiki page.

A file is `---\\n<yaml mapping>\\n---\\n<body>`. Parsing accepts safe YAML only
and bounds the work a hostile file can cause:

- at most MAX_FILE_BYTES (1 MiB) per file and MAX_FRONTMATTER_BYTES (64 KiB)
  of YAML, nesting at most MAX_DEPTH (16) levels;
- no anchors or aliases (the "billion laughs" bomb needs them), no merge
  keys, no duplicate keys, string keys only, no tags beyond the plain YAML
  types (no !!binary, !!set, !!python/...);
- the frontmatter must be a mapping (an empty block means {}).

A date written as YYYY-MM-DD that is a real calendar date loads as
`datetime.date`; anything else that YAML would call a timestamp (2026-02-30,
2026-1-5, 2026-05-06T10:00:00Z) stays the text it was, so the validator can
name it instead of the YAML library crashing on it.

Serialization is the one canonical form: keys in FIELD_ORDER, then unknown
keys sorted (nested mappings sorted too), dates as YYYY-MM-DD, block style,
one key per line, strings with line breaks or unprintable characters
double-quoted with escapes. For every document we serialize,
parse(serialize(d)) == d and serialize(parse(s)) == s.
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass
from datetime import date, datetime
from pathlib import Path
from typing import Any, Final

import yaml

from mnemolog.eventlog.errors import BadInput
from mnemolog.eventlog.store.fsio import FileTooLarge, NotRegularFile, read_regular

MAX_FILE_BYTES: Final = 1 << 20
MAX_FRONTMATTER_BYTES: Final = 64 << 10
MAX_DEPTH: Final = 16

FIELD_ORDER: Final = (
    "schema_version",
    "name",
    "description",
    "type",
    "captured",
    "last_seen",
    "sources",
    "provenance",
    "confidence",
    "pinned",
    "related",
    "expires_at",
    "supersedes",
    "superseded_by",
    "tags",
)
_RANK: Final = {k: i for i, k in enumerate(FIELD_ORDER)}
_DATE_RE = re.compile(r"\d{4}-\d{2}-\d{2}")
_DELIMITER = "---"


class FrontmatterError(BadInput):
    """A file whose frontmatter cannot be read safely (exit 65)."""

    slug = "bad_frontmatter"

    def __init__(self, message: str, *, file: str, field: str = "frontmatter") -> None:
        super().__init__(f"{file}: {field}: {message}", file=file, field=field)
        self.file = file
        self.field = field
        self.reason = message


@dataclass(frozen=True)
class Document:
    """One parsed file: the frontmatter mapping (unknown keys kept) and the body after it."""

    meta: dict[str, Any]
    body: str


# -- loading -----------------------------------------------------------------


class _Refused(Exception):
    """Raised inside the YAML loader; turned into FrontmatterError with the file name."""


class _Loader(yaml.SafeLoader):
    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        event = self.peek_event()  # type: ignore[no-untyped-call]
        line = event.start_mark.line + 2 if event.start_mark is not None else "?"
        if isinstance(event, yaml.AliasEvent):
            raise _Refused(f"aliases are not allowed (line {line})")
        if getattr(event, "anchor", None) is not None:
            raise _Refused(f"anchors are not allowed (line {line})")
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise _Refused(f"nesting deeper than {MAX_DEPTH} levels")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def _construct_mapping(loader: _Loader, node: yaml.MappingNode) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key_node, value_node in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            raise _Refused("merge keys (<<) are not allowed")
        key = loader.construct_object(key_node, deep=True)
        if not isinstance(key, str):
            raise _Refused(f"expected string keys, found {type(key).__name__} {key!r}")
        if key in out:
            raise _Refused(f"duplicate key {key!r} (line {key_node.start_mark.line + 2})")
        out[key] = loader.construct_object(value_node, deep=True)
    return out


def _construct_timestamp(loader: _Loader, node: yaml.ScalarNode) -> date | str:
    text = str(node.value)
    if _DATE_RE.fullmatch(text):
        try:
            return date.fromisoformat(text)
        except ValueError:
            pass
    return text


def _construct_float(loader: _Loader, node: yaml.ScalarNode) -> float:
    value = loader.construct_yaml_float(node)
    if not math.isfinite(value):
        raise _Refused(f"non-finite number {node.value!r}")
    return value


def _refuse_tag(loader: _Loader, node: yaml.Node) -> None:
    raise _Refused(f"YAML tag {node.tag} is not allowed")


_Loader.add_constructor("tag:yaml.org,2002:map", _construct_mapping)
_Loader.add_constructor("tag:yaml.org,2002:timestamp", _construct_timestamp)
_Loader.add_constructor("tag:yaml.org,2002:float", _construct_float)
for _tag in ("binary", "set", "omap", "pairs"):
    _Loader.add_constructor(f"tag:yaml.org,2002:{_tag}", _refuse_tag)


def _load_yaml(text: str, source: str) -> dict[str, Any]:
    loader = _Loader(text)
    try:
        data = loader.get_single_data()
    except _Refused as exc:
        raise FrontmatterError(str(exc), file=source) from None
    except yaml.MarkedYAMLError as exc:
        where = f" (line {exc.problem_mark.line + 2})" if exc.problem_mark else ""
        raise FrontmatterError(f"invalid YAML: {exc.problem}{where}", file=source) from None
    except yaml.YAMLError as exc:
        raise FrontmatterError(f"invalid YAML: {exc}", file=source) from None
    except RecursionError:
        raise FrontmatterError("YAML nested too deeply", file=source) from None
    finally:
        loader.dispose()
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise FrontmatterError(f"expected a mapping, found a {type(data).__name__}", file=source)
    return data


def parse(data: bytes | str, *, source: str = "<memory>") -> Document:
    """Split and load one file; raise FrontmatterError naming `source` on any defect."""
    if isinstance(data, bytes):
        if len(data) > MAX_FILE_BYTES:
            raise FrontmatterError(f"file is {len(data)} bytes, the limit is {MAX_FILE_BYTES}", file=source)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise FrontmatterError(
                f"expected UTF-8, found byte 0x{data[exc.start]:02x} at offset {exc.start}",
                file=source,
            ) from None
    else:
        text = data
        if len(text) > MAX_FILE_BYTES:
            raise FrontmatterError(
                f"file is {len(text)} characters, the limit is {MAX_FILE_BYTES}", file=source
            )
    # Hand-written files from some editors start with a byte order mark.
    text = text.removeprefix("\ufeff")
    first_end = text.find("\n")
    first = text if first_end < 0 else text[:first_end]
    if first.rstrip(" \t\r") != _DELIMITER:
        raise FrontmatterError(f"expected '---' on line 1, found {first[:40]!r}", file=source)
    if first_end < 0:
        raise FrontmatterError("no closing '---' (truncated frontmatter)", file=source)
    start = pos = first_end + 1
    limit = start + MAX_FRONTMATTER_BYTES
    while True:
        end = text.find("\n", pos)
        line = text[pos:] if end < 0 else text[pos:end]
        if line.rstrip(" \t\r") == _DELIMITER:
            yaml_text = text[start:pos]
            body = "" if end < 0 else text[end + 1 :]
            break
        if end < 0:
            raise FrontmatterError("no closing '---' (truncated frontmatter)", file=source)
        pos = end + 1
        if pos > limit:
            raise FrontmatterError(
                f"frontmatter exceeds {MAX_FRONTMATTER_BYTES} bytes without a closing '---'",
                file=source,
            )
    if len(yaml_text.encode("utf-8")) > MAX_FRONTMATTER_BYTES:
        raise FrontmatterError(f"frontmatter exceeds {MAX_FRONTMATTER_BYTES} bytes", file=source)
    return Document(_load_yaml(yaml_text, source), body)


def read_document(path: Path, *, source: str | None = None) -> Document:
    """Parse a file from disk, refusing anything but a regular file within the size limit.

    The size is checked on the open descriptor and the read is bounded, so a
    FIFO, a device or a file growing under us cannot hang or exhaust memory.
    """
    name = source if source is not None else str(path)
    try:
        data = read_regular(path, MAX_FILE_BYTES)
    except NotRegularFile:
        raise FrontmatterError("expected a regular file", file=name) from None
    except FileTooLarge as exc:
        raise FrontmatterError(f"file is {exc.strerror}: the limit is {MAX_FILE_BYTES}", file=name) from None
    except OSError as exc:
        raise FrontmatterError(f"cannot open: {exc.strerror}", file=name) from None
    return parse(data, source=name)


# -- dumping -----------------------------------------------------------------
#
# A small emitter of our own rather than yaml.dump: the bytes we write must not
# change with the PyYAML version or with whether libyaml is installed, and it is
# about ten times faster, which matters when rendering 100k notes.

_RESOLVER = yaml.resolver.Resolver()
_PLAIN_RE = re.compile(r"[A-Za-z0-9_/(][A-Za-z0-9 _./()+,-]*")
_ESCAPE_RE = re.compile(r'[\x00-\x1f\x7f-\x9f\\"\u2028\u2029\ufeff\ufffe\uffff]')
_ESCAPES: Final = {
    "\0": "\\0",
    "\a": "\\a",
    "\b": "\\b",
    "\t": "\\t",
    "\n": "\\n",
    "\v": "\\v",
    "\f": "\\f",
    "\r": "\\r",
    "\x1b": "\\e",
    '"': '\\"',
    "\\": "\\\\",
    "\x85": "\\N",
    "\u2028": "\\L",
    "\u2029": "\\P",
}


def _escape(m: re.Match[str]) -> str:
    ch = m.group(0)
    return _ESCAPES.get(ch) or (f"\\x{ord(ch):02x}" if ord(ch) < 0x100 else f"\\u{ord(ch):04x}")


# Keys and enum values repeat in every file; the resolver check is the costly part.
@functools.lru_cache(maxsize=1 << 16)
def _str(text: str) -> str:
    plain = (
        _PLAIN_RE.fullmatch(text) is not None
        and not text.endswith(" ")
        and _RESOLVER.resolve(yaml.ScalarNode, text, (True, False))  # type: ignore[no-untyped-call]
        == "tag:yaml.org,2002:str"
    )
    return text if plain else '"' + _ESCAPE_RE.sub(_escape, text) + '"'


def _scalar(value: Any) -> str:
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        text = repr(value)
        # YAML 1.1 floats need a dot: 1e+16 would load back as a string.
        if "." not in text and "e" in text:
            text = text.replace("e", ".0e", 1)
        return text
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, str):
        return _str(value)
    if value == []:
        return "[]"
    if value == {}:
        return "{}"
    raise TypeError(type(value).__name__)  # unreachable after _canonical


def _is_block(value: Any) -> bool:
    return isinstance(value, list | dict) and bool(value)


def _emit_map(meta: dict[str, Any], indent: int, out: list[str]) -> None:
    pad = " " * indent
    for key, value in meta.items():
        if not _is_block(value):
            out.append(f"{pad}{_str(key)}: {_scalar(value)}")
        elif isinstance(value, dict):
            out.append(f"{pad}{_str(key)}:")
            _emit_map(value, indent + 2, out)
        else:
            out.append(f"{pad}{_str(key)}:")
            _emit_seq(value, indent, out)


def _emit_seq(items: list[Any], indent: int, out: list[str]) -> None:
    pad = " " * indent
    for item in items:
        if not _is_block(item):
            out.append(f"{pad}- {_scalar(item)}")
            continue
        nested: list[str] = []
        if isinstance(item, dict):
            _emit_map(item, indent + 2, nested)
        else:
            _emit_seq(item, indent + 2, nested)
        # Compact form: the first nested line shares the line of its dash.
        nested[0] = f"{pad}- {nested[0][indent + 2 :]}"
        out.extend(nested)


def _canonical(value: Any, where: str) -> Any:
    """Check a value is one we can write and read back equal; sort nested mappings."""
    if value is None or isinstance(value, bool | int | str):
        if isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                raise BadInput(f"{where}: string is not encodable as UTF-8") from None
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise BadInput(f"{where}: expected a finite number, found {value!r}")
        return value
    if isinstance(value, datetime):
        raise BadInput(f"{where}: expected a date, found the datetime {value.isoformat()}")
    if isinstance(value, date):
        return value
    if isinstance(value, list | tuple):
        return [_canonical(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for k in sorted(value, key=_key_text(where)):
            out[k] = _canonical(value[k], f"{where}.{k}")
        return out
    raise BadInput(f"{where}: cannot write a {type(value).__name__} as frontmatter")


def _key_text(where: str) -> Any:
    def key(k: Any) -> str:
        if not isinstance(k, str):
            raise BadInput(f"{where}: expected string keys, found {type(k).__name__} {k!r}")
        _canonical(k, where)
        return k

    return key


def ordered(meta: dict[str, Any]) -> dict[str, Any]:
    """`meta` in the canonical key order: FIELD_ORDER first, then the rest sorted."""
    keys = sorted(meta, key=_key_text("frontmatter"))
    keys.sort(key=lambda k: _RANK.get(k, len(_RANK)))
    return {k: _canonical(meta[k], k) for k in keys}


def serialize(doc: Document) -> str:
    """The canonical text of a document."""
    lines: list[str] = []
    meta = ordered(doc.meta)
    if meta:
        _emit_map(meta, 0, lines)
    else:
        lines.append("{}")
    return f"{_DELIMITER}\n" + "\n".join(lines) + f"\n{_DELIMITER}\n{doc.body}"


def serialize_bytes(doc: Document) -> bytes:
    return serialize(doc).encode("utf-8")
