"""Pack assembly: five tiers in trust order under one budget, as a pure function of plain rows.

Inputs are rows the caller has already fetched: the project's state entries,
candidate memories with their recall scores, candidate chunks with theirs,
the query, the project in scope, the clock and a `PackConfig`. The output
is a `Pack`: the rendered text (`mnemolog.eventlog.bundle.packview`), its SHA-256,
every included entry with its tier, id, score and size, every trimmed entry
with the reason, and every candidate that could not enter with the reason.

The rules, in order:

1. **Exclusion.** A memory enters only when its status is `active`, it is
   not archived, its `expires_at` is not at or before `now`, and its
   project is empty or the project in scope. A memory of a personal domain
   (`personal_domains`) enters only a pack that asks for the personal scope
   (`personal`), and such a pack has no project in scope and takes no chunk
   of a project. A state entry enters only when it is active and belongs to
   the project in scope.
2. **Tiers.** `state`: the project's state entries, by category (status,
   decision, requirement, contact, milestone, fact, config, then others by
   name) and key. `identity`: pinned memories first (always wanted), then
   global memories of the identity kinds. `project`: memories of the
   project in scope (none without a project). `domain`: the other global
   memories. `chunks`: document chunks, any project.
3. **Ranking.** Within a ranked tier a row's relevance is its score divided
   by the tier's highest score (0-1). Domain knowledge adds `domain_weight`
   for each of its domains the query evokes (the domain's name or one of
   its words appears in the query); a chunk of the project in scope is
   multiplied by `1 + project_boost`. Project memories, domain knowledge
   and chunks need a relevance above zero, or (memories) to be a recall
   hit for the query; identity memories do not (they are always loaded
   when they fit). Ties break by id.
4. **Shares and flow-down.** Each tier may fill its share of the budget
   plus whatever the tiers before it left unused; an entry that does not
   fit is trimmed (`tier_share`) and smaller ones after it still may.
   State entries and pinned notes are taken even beyond their share.
5. **Trim.** While the pack is over budget (only required entries can put
   it there, or token counts that do not add up exactly), the lowest-ranked
   entry of the first non-empty tier in the trim order is removed
   (`over_budget`): chunks, then domain knowledge, project memories,
   identity, and project state last.

A block's size is its header, its entries and a blank line, so in
characters the sizes add up exactly; in tokens the whole text is measured
at the end and trimming continues until it fits. The same rows, query,
project, clock and configuration give the same bytes, whatever the order
of the rows.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

from mnemolog.eventlog.bundle import packview
from mnemolog.eventlog.bundle.packview import TIERS
from mnemolog.eventlog.vocabulary.knowledge import STATE_CATEGORIES
from mnemolog.projections.context.config import PackConfig

Measure = Callable[[str], int]

TIER_NUMBER: Final = {t: i + 1 for i, t in enumerate(TIERS)}
SCORE_DIGITS: Final = 6


@dataclass(frozen=True)
class StateRow:
    """One trusted project-state entry (category/key = value)."""

    project: str
    category: str
    key: str
    value: str
    id: str = ""
    active: bool = True

    @property
    def entry_id(self) -> str:
        return self.id or f"{self.project}/{self.category}/{self.key}"


@dataclass(frozen=True)
class MemoryRow:
    """A candidate memory; `score` is its recall score for the query (0 when not matched)."""

    id: str
    kind: str
    content: str
    project: str = ""
    domains: tuple[str, ...] = ()
    status: str = "active"
    archived: bool = False
    pinned: bool = False
    expires_at: int | None = None  # µs since the epoch
    score: float = 0.0
    # Recall returned it for the query: relevant even at the lowest fused score (0 after
    # hybrid recall's min-max normalisation), which says "least related", not "unrelated".
    hit: bool = False


@dataclass(frozen=True)
class ChunkRow:
    """A candidate document chunk with its recall score."""

    id: str
    text: str
    document: str
    heading_path: tuple[str, ...] = ()
    project: str = ""
    score: float = 0.0
    # The chunk ranking found it relevant (a word in common, or close in meaning): relevant
    # even at the lowest fused score, as a memory recall returned is.
    hit: bool = False


@dataclass(frozen=True)
class PackEntry:
    tier: str
    source: str  # state | memory | chunk
    id: str
    label: str
    text: str
    score: float | None
    chars: int
    cost: int
    required: bool = False

    def to_json(self, with_text: bool = False) -> dict[str, Any]:
        out: dict[str, Any] = {
            "tier": TIER_NUMBER[self.tier],
            "source": self.source,
            "id": self.id,
            "label": self.label,
            "score": _round(self.score),
            "chars": self.chars,
            "cost": self.cost,
        }
        if with_text:
            out["text"] = self.text
        return out


@dataclass(frozen=True)
class Trimmed:
    tier: str
    source: str
    id: str
    score: float | None
    chars: int
    cost: int
    reason: str  # tier_share | over_budget

    def to_json(self) -> dict[str, Any]:
        return {
            "tier": TIER_NUMBER[self.tier],
            "source": self.source,
            "id": self.id,
            "score": _round(self.score),
            "chars": self.chars,
            "cost": self.cost,
            "reason": self.reason,
        }


@dataclass(frozen=True)
class Excluded:
    source: str
    id: str
    # superseded | invalid | candidate | ... | archived | expired | other_project | personal | not_relevant
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {"source": self.source, "id": self.id, "reason": self.reason}


@dataclass(frozen=True)
class TierResult:
    name: str
    share: int
    allocated: int
    used: int
    entries: tuple[PackEntry, ...]
    trimmed: tuple[Trimmed, ...]

    def to_json(self, with_text: bool = False) -> dict[str, Any]:
        return {
            "tier": TIER_NUMBER[self.name],
            "name": self.name,
            "share": self.share,
            "allocated": self.allocated,
            "used": self.used,
            "included" if with_text else "entries": [e.to_json(with_text) for e in self.entries],
            "trimmed": [t.to_json() for t in self.trimmed],
        }


@dataclass(frozen=True)
class Pack:
    query: str
    project: str | None
    now: int
    config: PackConfig
    tiers: tuple[TierResult, ...]
    excluded: tuple[Excluded, ...]
    text: str
    sha256: str
    cost: int
    domain_terms_sha256: str = field(default="")

    @property
    def chars(self) -> int:
        return len(self.text)

    def entries(self) -> list[PackEntry]:
        return [e for t in self.tiers for e in t.entries]

    def head(self) -> dict[str, Any]:
        return {
            "format": packview.FORMAT,
            "query": self.query,
            "project": self.project,
            "now": self.now,
            "budget": self.config.budget,
            "unit": self.config.unit,
            "config": {**self.config.to_json(), "domain_terms_sha256": self.domain_terms_sha256},
            "sha256": self.sha256,
            "chars": self.chars,
            "cost": self.cost,
        }

    def to_json(self) -> dict[str, Any]:
        """What `context build --json` prints: every entry, every trimmed one, the text."""
        return {
            **self.head(),
            "tiers": [t.to_json() for t in self.tiers],
            "excluded": [x.to_json() for x in self.excluded],
            "text": self.text,
        }

    def record(self) -> dict[str, Any]:
        """The `context.built` payload (less its id): enough to re-render the pack byte for byte."""
        out = {**self.head(), "tiers": [t.to_json(with_text=True) for t in self.tiers]}
        if out["project"] is None:
            del out["project"]
        return out


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, SCORE_DIGITS)


# -- relevance ---------------------------------------------------------------

_WORD = re.compile(r"[^\W_]+")


def _norm(word: str) -> str:
    w = word.lower()
    if len(w) > 3 and w.endswith("s") and not w.endswith(("ss", "us", "is")):
        w = w[:-1]
    return w


def words(text: str) -> set[str]:
    """The normalised words of a text: lowercase runs of letters and digits, plurals folded."""
    return {_norm(w) for w in _WORD.findall(text)}


def evoked_domains(query: str, domain_terms: dict[str, tuple[str, ...]]) -> set[str]:
    """Domains whose name or one of whose terms (every word of it) appears in the query."""
    q = words(query)
    out = set()
    for domain, terms in domain_terms.items():
        for phrase in (domain, *terms):
            ws = words(phrase)
            if ws and ws <= q:
                out.add(domain)
                break
    return out


def _domain_hits(domains: Iterable[str], evoked: set[str]) -> int:
    return sum(1 for d in set(domains) if d in evoked or d.lower() in evoked)


# -- assembly ----------------------------------------------------------------


@dataclass
class _Cand:
    tier: str
    source: str
    id: str
    label: str
    text: str
    score: float | None
    rank: tuple[Any, ...]
    required: bool = False
    line: str = ""
    chars: int = 0
    cost: int = 0


_Row = TypeVar("_Row", MemoryRow, ChunkRow)


def _dedupe(rows: Iterable[_Row]) -> list[_Row]:
    """One row per id (the best scored; equal scores: a fixed choice), sorted by id."""
    best: dict[str, _Row] = {}
    for r in rows:
        have = best.get(r.id)
        if have is None or (r.score, repr(r)) > (have.score, repr(have)):
            best[r.id] = r
    return [best[k] for k in sorted(best)]


def _top(scores: Iterable[float]) -> float:
    return max((s for s in scores if s > 0), default=0.0)


def _category_rank(category: str) -> tuple[int, str]:
    try:
        return (STATE_CATEGORIES.index(category), "")
    except ValueError:
        return (len(STATE_CATEGORIES), category)


def _classify(
    query: str,
    project: str | None,
    now: int,
    cfg: PackConfig,
    state: Sequence[StateRow],
    memories: Sequence[MemoryRow],
    chunks: Sequence[ChunkRow],
) -> tuple[dict[str, list[_Cand]], list[Excluded]]:
    tiers: dict[str, list[_Cand]] = {t: [] for t in TIERS}
    excluded: list[Excluded] = []
    seen_state: set[str] = set()
    for s in sorted(state, key=lambda r: (r.entry_id, repr(r))):
        sid = s.entry_id
        if sid in seen_state:
            continue
        seen_state.add(sid)
        if not s.active:
            excluded.append(Excluded("state", sid, "invalid"))
        elif project is None or s.project != project:
            excluded.append(Excluded("state", sid, "other_project"))
        else:
            rank = (_category_rank(s.category), s.key, sid)
            tiers["state"].append(
                _Cand("state", "state", sid, f"{s.category}/{s.key}", s.value, None, rank, required=True)
            )
    placed: list[tuple[str, MemoryRow]] = []
    for m in _dedupe(memories):
        if m.status != "active":
            excluded.append(Excluded("memory", m.id, m.status or "inactive"))
        elif m.archived:
            excluded.append(Excluded("memory", m.id, "archived"))
        elif m.expires_at is not None and m.expires_at <= now:
            excluded.append(Excluded("memory", m.id, "expired"))
        elif m.project and m.project != project:
            excluded.append(Excluded("memory", m.id, "other_project"))
        elif not cfg.personal and is_personal(m.domains, cfg.personal_domains):
            # Private to the person: only a pack that asks for the personal scope holds it.
            excluded.append(Excluded("memory", m.id, "personal"))
        elif m.pinned or (not m.project and m.kind in cfg.identity_kinds):
            placed.append(("identity", m))
        elif m.project:
            placed.append(("project", m))
        else:
            placed.append(("domain", m))
    evoked = evoked_domains(query, dict(cfg.domain_terms))
    for tier in ("identity", "project", "domain"):
        rows = [m for t, m in placed if t == tier]
        top = _top(m.score for m in rows)
        for m in rows:
            rel = m.score / top if top > 0 and m.score > 0 else 0.0
            if tier == "domain":
                rel += cfg.domain_weight * _domain_hits(m.domains, evoked)
            if tier != "identity" and rel <= 0 and not m.hit:
                excluded.append(Excluded("memory", m.id, "not_relevant"))
                continue
            label = ", ".join(sorted(set(m.domains))) if tier == "domain" and m.domains else m.kind
            mrank = (not m.pinned, -rel, m.id)
            tiers[tier].append(_Cand(tier, "memory", m.id, label, m.content, rel, mrank, required=m.pinned))
    crows = _dedupe(chunks)
    top = _top(c.score for c in crows)
    for c in crows:
        if cfg.personal and c.project:
            # A personal pack holds no project data, chunks of a project included.
            excluded.append(Excluded("chunk", c.id, "other_project"))
            continue
        rel = c.score / top if top > 0 and c.score > 0 else 0.0
        if project and c.project == project:
            rel *= 1.0 + cfg.project_boost
        if rel <= 0 and not c.hit:
            excluded.append(Excluded("chunk", c.id, "not_relevant"))
            continue
        label = " › ".join((c.document, *c.heading_path))
        tiers["chunks"].append(_Cand("chunks", "chunk", c.id, label, c.text, rel, (-rel, c.id)))
    for cands in tiers.values():
        cands.sort(key=lambda c: c.rank)
    excluded.sort(key=lambda x: (x.source, x.id))
    return tiers, excluded


def is_personal(domains: Sequence[str], personal_domains: Sequence[str]) -> bool:
    """Whether a memory of these domains is in the personal scope (letter case does not matter)."""
    wanted = set(personal_domains)
    return any(d.lower() in wanted for d in domains)


def _shares(cfg: PackConfig) -> dict[str, int]:
    """Whole units per tier, cumulatively rounded so they add up to floor(budget * total)."""
    out = {}
    acc = 0.0
    prev = 0
    for t in TIERS:
        acc += cfg.shares[t]
        cum = int(cfg.budget * acc + 1e-9)
        out[t] = cum - prev
        prev = cum
    return out


def domain_terms_digest(cfg: PackConfig) -> str:
    data = json.dumps({k: list(v) for k, v in cfg.domain_terms.items()}, sort_keys=True).encode()
    return hashlib.sha256(data).hexdigest()


def assemble(
    query: str,
    project: str | None,
    *,
    now: int,
    config: PackConfig,
    state: Sequence[StateRow] = (),
    memories: Sequence[MemoryRow] = (),
    chunks: Sequence[ChunkRow] = (),
    measure: Measure = len,
) -> Pack:
    """Build the pack for `query` (see the module docstring for every rule)."""
    project = project or None
    cfg = config
    cands, excluded = _classify(query, project, now, cfg, state, memories, chunks)
    for cs in cands.values():
        for c in cs:
            c.line = packview.entry_line(c.source, c.label, c.text)
            c.chars = len(c.line)
            c.cost = c.chars if measure is len else measure(c.line)
    overhead = {t: measure(packview.block_overhead(t, project)) for t in TIERS}
    shares = _shares(cfg)
    chosen: dict[str, list[_Cand]] = {t: [] for t in TIERS}
    trimmed: dict[str, list[Trimmed]] = {t: [] for t in TIERS}
    allocated: dict[str, int] = {}
    carry = 0
    for t in TIERS:
        avail = shares[t] + carry
        allocated[t] = avail
        used = 0
        for c in cands[t]:
            extra = c.cost + (overhead[t] if not chosen[t] else 0)
            if c.required or used + extra <= avail:
                chosen[t].append(c)
                used += extra
            else:
                trimmed[t].append(_trim(c, "tier_share"))
        carry = max(0, avail - used)

    def size() -> int:
        return sum(sum(c.cost for c in chosen[t]) + overhead[t] for t in TIERS if chosen[t])

    def trim_one() -> bool:
        for t in cfg.trim_order:
            if chosen[t]:
                trimmed[t].append(_trim(chosen[t].pop(), "over_budget"))
                return True
        return False

    while size() > cfg.budget and trim_one():
        pass
    text = _render(project, chosen)
    total = len(text) if measure is len else measure(text)
    while total > cfg.budget and trim_one():
        text = _render(project, chosen)
        total = len(text) if measure is len else measure(text)
    results = []
    for t in TIERS:
        used = sum(c.cost for c in chosen[t]) + (overhead[t] if chosen[t] else 0)
        results.append(
            TierResult(
                name=t,
                share=shares[t],
                allocated=allocated[t],
                used=used,
                entries=tuple(
                    PackEntry(t, c.source, c.id, c.label, c.text, c.score, c.chars, c.cost, c.required)
                    for c in chosen[t]
                ),
                trimmed=tuple(trimmed[t]),
            )
        )
    return Pack(
        query=query,
        project=project,
        now=now,
        config=cfg,
        tiers=tuple(results),
        excluded=tuple(excluded),
        text=text,
        sha256=packview.pack_sha256(text),
        cost=total,
        domain_terms_sha256=domain_terms_digest(cfg),
    )


def _trim(c: _Cand, reason: str) -> Trimmed:
    return Trimmed(c.tier, c.source, c.id, c.score, c.chars, c.cost, reason)


def _render(project: str | None, chosen: dict[str, list[_Cand]]) -> str:
    return "".join(
        packview.header(t, project) + "".join(c.line for c in chosen[t]) + "\n" for t in TIERS if chosen[t]
    )
