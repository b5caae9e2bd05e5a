"""The bytes of a context pack, as a pure function of its entries: what `context.built` commits to.

A pack is Markdown: one block per non-empty tier, in trust order, each a
`## ` header line, one list item per entry, and a blank line:

    ## Trusted project state (p06-polisher)
    - decision/vendor_path: Twyman-Green preferred
    <blank line>
    ## Domain knowledge
    - [materials] Zerodur CTE gradient dominates WFE at F/1.2
    <blank line>

A state entry renders as `- LABEL: TEXT`, a memory or a chunk as
`- [LABEL] TEXT`. Line ends in TEXT become LF and every line after the
first is indented by two spaces, so an entry stays one list item whatever
it holds; tabs and other characters are kept. A block's characters are the
sum of its lines', so the assembler can count a pack's size entry by entry.

The `context.built` event records every included entry (source, id, label,
text) in order; `render_recorded` rebuilds the pack from that record alone
and `check_recorded` compares its SHA-256 with the one the event signed.
`verify_packs` is what a forensic bundle's verifier does with the packs a
memory went into: re-render each, check its hash, and check the memory's
text in it against the memory as the bundle's own entries fold it at that
point. This module imports only the standard library and other
`mnemolog.eventlog` modules that obey the same rule, so the standalone
bundle verifier re-renders packs with nothing else installed.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Mapping, Sequence
from typing import Any, Final

from mnemolog.eventlog.bundle import memview
from mnemolog.eventlog.errors import VerificationError
from mnemolog.eventlog.format import sealing
from mnemolog.eventlog.format.entry import Entry
from mnemolog.eventlog.vocabulary.events import CONTEXT_BUILT, SEALED_FIELD

FORMAT: Final = "mnemolog/context-pack/v1"
#: The tiers in trust order (1 to 5).
TIERS: Final = ("state", "identity", "project", "domain", "chunks")
TITLES: Final = {
    "state": "Trusted project state",
    "identity": "Identity and preferences",
    "project": "Project memories",
    "domain": "Domain knowledge",
    "chunks": "Retrieved chunks",
}
#: Tiers whose header names the project in scope.
PROJECT_HEADERS: Final = frozenset({"state", "project"})
SOURCES: Final = ("state", "memory", "chunk")

Item = tuple[str, str, str]  # (source, label, text)


def _one_line(text: str) -> str:
    return " ".join(text.split())


def header(tier: str, project: str | None) -> str:
    """The header line of a tier's block (with its newline)."""
    title = TITLES[tier]
    if tier in PROJECT_HEADERS and project:
        title += f" ({_one_line(project)})"
    return f"## {title}\n"


def entry_line(source: str, label: str, text: str) -> str:
    """One entry as a list item (with its final newline)."""
    body = text.replace("\r\n", "\n").replace("\r", "\n").strip("\n").replace("\n", "\n  ")
    label = _one_line(label)
    if source == "state":
        return f"- {label}: {body}\n" if label else f"- {body}\n"
    return f"- [{label}] {body}\n" if label else f"- {body}\n"


def block_overhead(tier: str, project: str | None) -> str:
    """What a non-empty block adds besides its entries: the header and the closing blank line."""
    return header(tier, project) + "\n"


def render_block(tier: str, project: str | None, entries: Sequence[Item]) -> str:
    if not entries:
        return ""
    return header(tier, project) + "".join(entry_line(*e) for e in entries) + "\n"


def render_pack(project: str | None, blocks: Mapping[str, Sequence[Item]]) -> str:
    """The pack: the non-empty blocks in trust order."""
    return "".join(render_block(t, project, blocks.get(t, ())) for t in TIERS)


def pack_sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _shape(message: str, seq: int | None) -> VerificationError:
    return VerificationError(f"context.built: {message}", check="context.shape", seq=seq)


def recorded_entries(data: Mapping[str, Any], seq: int | None = None) -> dict[str, list[dict[str, Any]]]:
    """The included entries of a `context.built` payload by tier; a malformed record is refused."""
    tiers = data.get("tiers")
    names = (
        [t.get("name") if isinstance(t, Mapping) else None for t in tiers]
        if isinstance(tiers, list)
        else None
    )
    if names != list(TIERS):
        raise _shape(
            f"expected one record per tier in trust order ({', '.join(TIERS)}), found {names!r:.120}", seq
        )
    assert isinstance(tiers, list)
    out: dict[str, list[dict[str, Any]]] = {}
    for t in tiers:
        included = t.get("included")
        if not isinstance(included, list):
            raise _shape(f"tier {t['name']}: expected a list under 'included'", seq)
        for e in included:
            if (
                not isinstance(e, Mapping)
                or e.get("source") not in SOURCES
                or not isinstance(e.get("id"), str)
            ):
                raise _shape(f"tier {t['name']}: malformed entry {e!r:.80}", seq)
            if _is_gap(e):
                continue
            if not all(isinstance(e.get(k), str) for k in ("label", "text")):
                raise _shape(f"tier {t['name']}: malformed entry {e!r:.80}", seq)
        out[t["name"]] = [_gap(dict(e)) if _is_gap(e) else dict(e) for e in included]
    return out


def _is_gap(e: Mapping[str, Any]) -> bool:
    # An entry whose quoted text stayed sealed (its memory or document was forgotten, or no
    # key was given): eventlog.sealing leaves the list of its closed fields under `sealed`.
    closed = e.get(SEALED_FIELD)
    return isinstance(closed, list) and bool(closed)


def _gap(e: dict[str, Any]) -> dict[str, Any]:
    return {**e, "label": GAP_LABEL, "text": f"{e['source']} {e['id']} was erased", "gap": True}


#: The label of an entry re-rendered as a gap: `- [forgotten] memory ID was erased`.
GAP_LABEL: Final = "forgotten"


def gaps(data: Mapping[str, Any], seq: int | None = None) -> list[dict[str, str]]:
    """The entries of a recorded pack that re-render as gaps (source, id, tier), in pack order."""
    return [
        {"tier": t, "source": e["source"], "id": e["id"]}
        for t, es in recorded_entries(data, seq).items()
        for e in es
        if e.get("gap")
    ]


def render_recorded(data: Mapping[str, Any], seq: int | None = None) -> str:
    """The pack a `context.built` payload describes, rendered from the payload alone."""
    if data.get("format") != FORMAT:
        raise _shape(f"expected format {FORMAT!r}, found {data.get('format')!r:.80}", seq)
    project = data.get("project")
    if project is not None and not isinstance(project, str):
        raise _shape("project must be text or absent", seq)
    entries = recorded_entries(data, seq)
    blocks = {t: [(e["source"], e["label"], e["text"]) for e in es] for t, es in entries.items()}
    return render_pack(project, blocks)


def check_recorded(data: Mapping[str, Any], seq: int | None = None) -> str:
    """Re-render a recorded pack and check it against the SHA-256 the event carries; the text.

    A pack with gaps (`gaps`) cannot hash to what was signed: it is
    re-rendered with the gaps marked and returned unchecked; callers say so.
    """
    text = render_recorded(data, seq)
    if gaps(data, seq):
        return text
    want = data.get("sha256")
    got = pack_sha256(text)
    if want != got:
        raise VerificationError(
            f"context pack of entry {seq}: the re-rendered pack hashes to {got}, the event says {want!r:.80}",
            check="context.sha256",
            seq=seq,
            expected=want,
            found=got,
        )
    return text


def memory_ids(data: Mapping[str, Any]) -> list[str]:
    """The memory ids a `context.built` payload included, in pack order, without duplicates.

    Tolerant of malformed payloads (it feeds `touched_ids`, which must be total).
    """
    out: list[str] = []
    tiers = data.get("tiers")
    for t in tiers if isinstance(tiers, list) else []:
        included = t.get("included") if isinstance(t, Mapping) else None
        for e in included if isinstance(included, list) else []:
            if isinstance(e, Mapping) and e.get("source") == "memory":
                mid = e.get("id")
                if isinstance(mid, str) and mid and mid not in out:
                    out.append(mid)
    return out


def verify_packs(
    entries: Sequence[Entry], memory_ids: Collection[str], keys: sealing.KeyLookup | None = None
) -> list[dict[str, Any]]:
    """Check every `context.built` among `entries` (in seq order); a report per pack, else raise.

    Each pack is re-rendered from its payload and its SHA-256 compared with
    the one it signed (`context.sha256`). Every memory of `memory_ids` the
    pack quotes must have, as the entries before the pack fold it, exactly
    the quoted text (`context.source`): the pack cannot have shown a model
    something the memory never said. Sealed packs are opened with `keys`; a pack
    that stays sealed (forgotten, or no key given) is reported as such, unchecked.
    """
    wanted = set(memory_ids)
    out: list[dict[str, Any]] = []
    for e in entries:
        if e.type != CONTEXT_BUILT:
            continue
        data = memview.opened(e, keys)
        if not isinstance(data, dict):
            raise _shape("the payload is not a map", e.seq)
        check_recorded(data, e.seq)
        holes = gaps(data, e.seq)
        quoted = {
            x["id"]: x["text"]
            for es in recorded_entries(data, e.seq).values()
            for x in es
            if x["source"] == "memory" and x["id"] in wanted and not x.get("gap")
        }
        if quoted:
            views = memview.fold_views((x for x in entries if x.seq < e.seq), quoted, keys=keys)
            for mid, text in sorted(quoted.items()):
                if views.get(mid, {}).get("sealed"):
                    continue  # forgotten since, or no key given: nothing to compare the quote with
                have = views.get(mid, {}).get("content")
                if have != text:
                    raise VerificationError(
                        f"context pack at seq {e.seq} quotes memory {mid} as {text!r:.60}, but the "
                        f"entries before it make it {have!r:.60}",
                        check="context.source",
                        seq=e.seq,
                        expected=have,
                        found=text,
                    )
        out.append(
            {
                "seq": e.seq,
                "pack_id": data.get("pack_id"),
                "sha256": data.get("sha256"),
                "memories_checked": sorted(quoted),
                **({"gaps": holes, "sha256_checked": False} if holes else {}),
            }
        )
    return out
