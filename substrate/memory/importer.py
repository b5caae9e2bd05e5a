"""Bulk import: memories from a JSON Lines file, all checked before any is written.

One JSON object per line, with the fields of a store:

    {"content": "...", "namespace": "team/x", "kind": "decision", "title": "...",
     "tags": ["a"], "confidence": 0.9, "source": "...", "metadata": {...},
     "created_at": 1700000000000000, "last_seen": ..., "id": "<ULID>",
     "project": "alpha", "domains": ["infra"]}

The fields are the `memory.stored` payload's, less what only the writer or an
atomisation sets (FIELDS), so `export` writes what `import` reads. A project
(a name or alias) is made the registered name and domains are checked against
the home's vocabulary, as a store does.

`content` is required; `id` (a ULID) makes a re-run resumable: with
`skip_existing`, lines whose id the home already holds are skipped.

The file is read and every line checked first: JSON, the fields, every limit
a store has, ids repeated in the file or already stored, the namespaces'
write policy and the pre_store hooks. Any bad line and nothing is written;
the report names each bad line by its number (up to MAX_REPORTED of them).
Then the texts are embedded, a batch at a time, into the embedding cache
(nothing in the log yet: an embedder that answers with bad vectors stops
the import before its batch is written), and each batch is appended as one
group (one signature pass, one sync) and folded in bulk (the search index
is compacted once, after the last batch). An import that is
interrupted leaves whole batches: every memory written is complete, with its
vector, and a re-run with ids and `skip_existing` continues where it
stopped.

The parsed file is held in memory until it is written, so a file is limited
to MAX_IMPORT_BYTES; split larger ones.
"""

from __future__ import annotations

import functools
import json
import os
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Final, NotRequired, TypedDict

from mnemolog.eventlog.errors import BadInput, MnemologError, UsageError
from mnemolog.eventlog.format.codec import is_plain
from mnemolog.eventlog.progress import Progress
from mnemolog.eventlog.store.fsio import NotRegularFile, open_regular
from mnemolog.projections.embedding import vectors
from mnemolog.projections.memory import queries
from mnemolog.substrate.events.limits import MAX_CONTENT_BYTES, MAX_METADATA_BYTES
from mnemolog.substrate.hooks import GovernanceRefused, HookChain, HookEvent
from mnemolog.substrate.ids import looks_like_id, new_id
from mnemolog.substrate.memory.governance import ResolvedPolicy
from mnemolog.substrate.session import Session, Sessions

if TYPE_CHECKING:
    from mnemolog.substrate.embedding.service import Embedding
    from mnemolog.substrate.events import MemoryStored, Payload

    FIELDS: tuple[str, ...]

__all__ = [
    "FIELDS",
    "ImportFailed",
    "ImportReport",
    "check_records",
    "import_jsonl",
    "parse_record",
    "write_checked",
]

#: What a store's payload carries that a line may not: the back-chain (the writer's), the
#: atom fields (an atomisation's) and the status (the import's: active, or candidate).
NOT_FROM_A_LINE: Final = frozenset({"touch_prev", "atom_of", "source_span", "status"})


@functools.cache
def line_fields() -> tuple[str, ...]:
    """The fields of a line (FIELDS): the `memory.stored` payload's, so a new capture field
    reaches import and export by construction. Read from the model when first asked for."""
    from mnemolog.substrate.events import MemoryStored

    return tuple(f for f in MemoryStored.model_fields if f not in NOT_FROM_A_LINE)


def __getattr__(name: str) -> Any:
    if name == "FIELDS":  # the payload models load with the first import, not with this module
        return line_fields()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


#: Given the checking session, what makes a line's project and domains the home's (an alias
#: canonicalised, the domains checked against its vocabulary); identity unless a caller passes one.
Normalise = Callable[[Session], Callable[["MemoryStored"], "MemoryStored"]]
#: A line holds one memory: its content and metadata at their limits, JSON-escaped, and the rest.
MAX_LINE_BYTES: Final = 6 * (MAX_CONTENT_BYTES + MAX_METADATA_BYTES) + 64 * 1024
MAX_IMPORT_BYTES: Final = 512 * 1024 * 1024
MAX_REPORTED: Final = 100
BATCH: Final = 2000


class BadLine(TypedDict):
    line: int
    error: str
    message: str


class ImportReport(TypedDict):
    """What an import did; `warnings` (post-hook failures, an unreachable embedder) when there were any."""

    file: str
    lines: int
    imported: int
    skipped_existing: int
    batches: int
    embedded: int
    pending: int
    atomisation_requested: int
    first_seq: int | None
    last_seq: int | None
    warnings: NotRequired[list[str]]


class ImportFailed(MnemologError):
    """Bad lines: nothing was written. `details.bad_lines` lists them (line, error, message)."""

    exit_code = 65
    slug = "import_refused"

    def __init__(self, path: Path, bad: list[BadLine], total_bad: int) -> None:
        first = bad[0]
        super().__init__(
            f"{path}: {total_bad} bad line(s), nothing imported; line {first['line']}: {first['message']}",
            file=str(path),
            bad_lines=bad,
            bad_count=total_bad,
        )
        # A policy or a hook that refuses is governance (5); anything else is bad data (65).
        if all(b["error"] == GovernanceRefused.slug for b in bad):
            self.exit_code = GovernanceRefused.exit_code  # type: ignore[misc]


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise ValueError(f"key {k!r} appears twice")
        out[k] = v
    return out


#: One decoder for every line (json.loads would build one per call): constants (NaN,
#: Infinity) and repeated keys refused.
_DECODER: Final = json.JSONDecoder(parse_constant=_no_constants, object_pairs_hook=_unique_keys)
#: Where a JSON text can hold a surrogate: strict UTF-8 decoding never yields one, so only a
#: \uD800-\uDFFF escape can (one that stands in a valid pair is checked too, to be simple).
_SURROGATE_ESCAPE: Final = re.compile(rb"\\u[dD][89a-fA-F]")


def parse_line(raw: bytes, status: str = "active") -> MemoryStored:
    """One line as a store's payload, or BadInput/UsageError saying what is wrong with it."""
    if len(raw) > MAX_LINE_BYTES:
        raise BadInput(f"the line is {len(raw)} bytes; a memory's line is at most {MAX_LINE_BYTES}")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadInput(f"not valid UTF-8 at byte {exc.start}") from exc
    try:
        if text.startswith("\ufeff"):  # what json.loads says of it
            raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", text, 0)
        obj = _DECODER.decode(text)
    except (json.JSONDecodeError, ValueError, RecursionError) as exc:
        raise BadInput(f"not valid JSON: {exc}") from exc
    # A line without a surrogate escape holds no lone surrogate anywhere: the model's walk over
    # every nested text is spared (a line with one takes it, and gets its error).
    return parse_record(obj, status, unicode_checked=_SURROGATE_ESCAPE.search(raw) is None)


def parse_record(obj: Any, status: str = "active", *, unicode_checked: bool = False) -> MemoryStored:
    """One parsed line (or a format mapper's record) as a store's payload with `status`.

    `unicode_checked`: the caller has shown that no text in `obj` holds a lone surrogate.
    """
    if not isinstance(obj, dict):
        raise BadInput(f"a line must be a JSON object, found {type(obj).__name__}")
    from mnemolog.substrate.events import MemoryStored
    from mnemolog.substrate.events.base import UNICODE_CHECKED

    fields = line_fields()
    unknown = sorted(set(obj) - set(fields))
    if unknown:
        raise BadInput(f"unknown field(s) {unknown}; a line has {', '.join(fields)}", field=unknown[0])
    if "content" not in obj:
        raise BadInput("no content", field="content")
    mid = obj.get("id")
    if mid is not None and (not isinstance(mid, str) or not looks_like_id(mid)):
        raise BadInput(f"id must be a ULID (26 characters of Crockford base32); found {mid!r}", field="id")
    p = MemoryStored.model_validate(
        {
            "id": mid or new_id(),
            "namespace": obj.get("namespace", "default"),
            "kind": obj.get("kind", "observation"),
            "title": obj.get("title") or None,
            "content": obj["content"],
            "tags": obj.get("tags") or [],
            "confidence": obj.get("confidence"),
            "source": obj.get("source"),
            "metadata": obj.get("metadata"),
            "created_at": obj.get("created_at"),
            "last_seen": obj.get("last_seen"),
            "project": obj.get("project", ""),
            "domains": obj.get("domains") or [],
            "status": status,
            "occurred_at": obj.get("occurred_at"),
        },
        context={UNICODE_CHECKED: True} if unicode_checked else None,
    )
    # What the log's encoder would refuse (an integer beyond 64 bits, nesting too deep) is
    # refused here, before any batch is written.
    is_plain(p.to_data(), "$.data")
    return p


def _lines(f: BinaryIO, limit: int, path: Path) -> Iterator[tuple[int, bytes]]:
    """(line number, bytes without the newline); blank lines are skipped.

    Bounded reads, and at most `limit` bytes in all: a file that grows while
    it is read is refused rather than followed.
    """
    n = 0
    total = 0
    while True:
        raw = f.readline(MAX_LINE_BYTES + 2)
        if not raw:
            return
        total += len(raw)
        n += 1
        if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
            # Too long: report it and skip to the end of the line without holding it.
            while raw and not raw.endswith(b"\n"):
                raw = f.readline(1 << 20)
                total += len(raw)
                if total > limit:
                    raise _too_large(path, total, limit)
            yield n, b"\0" * (MAX_LINE_BYTES + 1)
            continue
        if total > limit:
            raise _too_large(path, total, limit)
        line = raw.rstrip(b"\r\n")
        if line.strip():
            yield n, line


@dataclass
class _Checked:
    payloads: list[tuple[int, MemoryStored]] = field(default_factory=list)
    bad: list[BadLine] = field(default_factory=list)
    bad_count: int = 0
    lines: int = 0
    skipped: int = 0

    def fail(self, line: int, exc: MnemologError) -> None:
        self.bad_count += 1
        if len(self.bad) < MAX_REPORTED:
            self.bad.append({"line": line, "error": exc.slug, "message": exc.message})


def _too_large(path: Path, size: int, limit: int = MAX_IMPORT_BYTES) -> UsageError:
    return UsageError(
        f"{path} is {size} bytes; an import reads at most {limit} (split the file)",
        file=str(path),
    )


def check_file(
    path: Path,
    sessions: Sessions,
    hooks: HookChain,
    *,
    skip_existing: bool,
    normalise: Normalise | None = None,
) -> _Checked:
    """Read and check every line; nothing is written."""
    try:
        # The read guard: a FIFO would block the open and /dev/zero would never end.
        f = open_regular(path)
    except NotRegularFile as exc:
        raise UsageError(
            f"{path} is {exc.kind}: an import reads a regular file (JSON Lines)", file=str(path)
        ) from exc
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}", file=str(path)) from exc
    out = _Checked()
    with f:
        size = os.fstat(f.fileno()).st_size
        if size > MAX_IMPORT_BYTES:
            raise _too_large(path, size)
        lines = ((n, functools.partial(parse_line, raw)) for n, raw in _lines(f, MAX_IMPORT_BYTES, path))
        _gather(out, lines, "line")
    return _check_stored(out, sessions, hooks, skip_existing=skip_existing, normalise=normalise)


def check_records(
    records: list[dict[str, Any]],
    sessions: Sessions,
    hooks: HookChain,
    *,
    skip_existing: bool,
    status: str = "active",
    normalise: Normalise | None = None,
) -> _Checked:
    """Check records a format mapper made (numbered from 1) as the lines of a file are; nothing is written."""
    out = _Checked(lines=len(records))
    _gather(
        out, ((n, functools.partial(parse_record, obj, status)) for n, obj in enumerate(records, 1)), "record"
    )
    return _check_stored(out, sessions, hooks, skip_existing=skip_existing, normalise=normalise)


def _gather(out: _Checked, numbered: Iterable[tuple[int, Callable[[], MemoryStored]]], unit: str) -> None:
    """Parse each numbered item into `out`: its payload, or why it is refused (a repeated id too)."""
    first: dict[str, int] = {}
    for n, parse in numbered:
        out.lines = max(out.lines, n)
        try:
            p = parse()
        except MnemologError as exc:
            out.fail(n, exc)
            continue
        if p.id in first:
            out.fail(n, BadInput(f"id {p.id} is on {unit} {first[p.id]} already", field="id"))
            continue
        first[p.id] = n
        out.payloads.append((n, p))


def _check_stored(
    out: _Checked,
    sessions: Sessions,
    hooks: HookChain,
    *,
    skip_existing: bool,
    normalise: Normalise | None = None,
) -> _Checked:
    """The checks against the home: project and domains, ids stored already, write policies, hooks."""
    if out.bad_count:
        return out
    with sessions.session() as s:
        existing = queries.existing_ids(s.conn, [p.id for _, p in out.payloads])
        policies: dict[str, ResolvedPolicy] = {}
        kept: list[tuple[int, MemoryStored]] = []
        made = normalise(s) if normalise is not None else None
        for n, given in out.payloads:
            p = given
            if made is not None and (given.project or given.domains):
                try:
                    p = made(given)
                except MnemologError as exc:
                    out.fail(n, exc)
                    continue
            if p.id in existing:
                if skip_existing:
                    out.skipped += 1
                    continue
                out.fail(
                    n, BadInput(f"id {p.id} is stored already (use --skip-existing to resume)", field="id")
                )
                continue
            policy = policies.get(p.namespace) or policies.setdefault(p.namespace, s.policy(p.namespace))
            try:
                s.check_write(policy, p.namespace)
                if hooks:  # the payload's map is built for a hook only
                    hooks.pre(HookEvent("pre_store", p.namespace, p.to_data(), None))
            except MnemologError as exc:
                out.fail(n, exc)
                continue
            kept.append((n, p))
        out.payloads = kept
    return out


def import_jsonl(
    path: Path,
    sessions: Sessions,
    embedding: Embedding,
    hooks: HookChain,
    plan: Any,
    *,
    skip_existing: bool = False,
    batch: int = BATCH,
    progress: bool | None = None,
    normalise: Normalise | None = None,
) -> tuple[ImportReport, list[str]]:
    """Import a JSON Lines file (see the module docstring); returns the report and post-hook warnings.

    `plan(policy, payload) -> (mode, action, extra events)` is the atomiser's
    plan for a store: deferred requests go into the batch; a synchronous
    policy is run as deferred here (a bulk path does not call a curator per line).
    """
    checked = check_file(path, sessions, hooks, skip_existing=skip_existing, normalise=normalise)
    if checked.bad_count:
        raise ImportFailed(path, checked.bad, checked.bad_count)
    return write_checked(path, checked, sessions, embedding, hooks, plan, batch=batch, progress=progress)


def write_checked(
    path: Path,
    checked: _Checked,
    sessions: Sessions,
    embedding: Embedding,
    hooks: HookChain,
    plan: Any,
    *,
    batch: int = BATCH,
    progress: bool | None = None,
) -> tuple[ImportReport, list[str]]:
    """Write what check_file or check_records accepted, in batches (see import_jsonl)."""
    payloads = [p for _, p in checked.payloads]
    report: ImportReport = {
        "file": str(path),
        "lines": checked.lines,
        "imported": 0,
        "skipped_existing": checked.skipped,
        "batches": 0,
        "embedded": 0,
        "pending": 0,
        "atomisation_requested": 0,
        "first_seq": None,
        "last_seq": None,
    }
    warnings: list[str] = []
    prog = Progress("importing", len(payloads), enabled=progress)
    with sessions.session() as s:
        rec = embedding.choice(s)
    try:
        for lo in range(0, len(payloads), batch):
            part = payloads[lo : lo + batch]
            unreachable = False
            if rec is not None and rec.embeds:
                # Before the session: embedding a batch must not hold the projection lock.
                from mnemolog.curators.embedding.embedder import EmbedderFailed
                from mnemolog.substrate.embedding.service import embed_text_of

                texts = [embed_text_of(p) for p in part]
                try:
                    embedding.embed_into_cache(rec, {vectors.text_sha(t): t for t in texts})
                except EmbedderFailed as exc:
                    if exc.reason == "bad_vectors":
                        raise
                    unreachable = True
                    warnings.append(f"embedding: {exc.message}; these memories wait for their vectors")
            from mnemolog.substrate.events import AtomisationRequested

            with sessions.session() as s:
                policies: dict[str, ResolvedPolicy] = {}
                extra: list[Payload] = []
                for p in part:
                    policy = policies.get(p.namespace) or policies.setdefault(
                        p.namespace, s.policy(p.namespace)
                    )
                    _mode, action, more = plan(policy, p)
                    if action == "synchronous":
                        more = [
                            AtomisationRequested(
                                source_id=p.id,
                                curator=str(policy["curator"]),
                                max_atom_tokens=int(policy["auto_atomise_max_atom_tokens"]),
                                max_retries=policy.retries_for("deferred"),
                            )
                        ]
                    extra += more
                report["atomisation_requested"] += len(extra)
                if unreachable:
                    s.skip_embedding.update(dict.fromkeys((p.id for p in part), "pending"))
                # The index is compacted after the last batch only: once per import, instead
                # of a rewrite of the whole main index after every batch.
                s.defer_settle = lo + batch < len(payloads)
                receipts = s.append_many([*part, *extra])
                for p in part:
                    out = s.embedded.get(p.id)
                    if out == "embedded":
                        report["embedded"] += 1
                    elif out == "pending":
                        report["pending"] += 1
                if hooks:
                    for p in part:
                        m = s.get(p.id)
                        if m is not None:
                            warnings += hooks.post(HookEvent("post_store", p.namespace, dict(m), None))
                warnings += s.warnings
            report["imported"] += len(part)
            report["batches"] += 1
            if report["first_seq"] is None:
                report["first_seq"] = receipts[0].seq
            report["last_seq"] = receipts[len(part) - 1].seq
            prog.advance(len(part))
    finally:
        prog.close()
    return report, warnings
