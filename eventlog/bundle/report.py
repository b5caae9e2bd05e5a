"""What a verified forensic bundle is reported as: `BundleReport`, as JSON and as text."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class BundleReport:
    file: str = ""
    memory_id: str = ""
    include_chain: bool = True
    origin: str = ""
    tree_size: int = 0
    root: str = ""
    checkpoint_key: str = ""
    trust: dict[str, Any] = field(default_factory=dict)
    entries: int = 0
    key_entries: int = 0
    seqs: list[int] = field(default_factory=list)
    memories: list[str] = field(default_factory=list)
    unstored: list[str] = field(default_factory=list)
    envelopes: dict[str, Any] = field(default_factory=dict)
    files: list[dict[str, Any]] = field(default_factory=list)
    checks: list[str] = field(default_factory=list)
    witnesses: dict[str, Any] | None = None
    completeness: dict[str, Any] | None = None  # None: a v1 bundle, which proves no completeness
    packs: list[dict[str, Any]] = field(default_factory=list)  # context packs re-rendered and checked
    # Memories whose content stayed sealed (forgotten, or a bundle without their keys): id -> fields.
    sealed: dict[str, list[str]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        extra: dict[str, Any] = {"completeness": self.completeness}
        if self.witnesses is not None:
            extra["witnesses"] = self.witnesses
        if self.sealed:
            extra["sealed"] = self.sealed
        return {
            **extra,
            "file": self.file,
            "memory_id": self.memory_id,
            "include_chain": self.include_chain,
            "origin": self.origin,
            "tree_size": self.tree_size,
            "root": self.root,
            "checkpoint_key": self.checkpoint_key,
            "trust": self.trust,
            "entries": self.entries,
            "key_entries": self.key_entries,
            "seqs": self.seqs,
            "memories": self.memories,
            "unstored": self.unstored,
            "envelopes": self.envelopes,
            "files": self.files,
            "checks": self.checks,
            "packs": self.packs,
        }

    def text(self) -> str:
        trust = self.trust
        if trust.get("pinned"):
            anchor = f"pinned key {trust['key']} (in the key history from seq {trust['epoch_from_seq']})"
        else:
            anchor = f"genesis key of the bundle {trust.get('key')} (NOT pinned: use --trusted-key)"
        chain = "with its atomisation chain" if self.include_chain else "without the atomisation chain"
        lines = [
            f"ok: forensic bundle {self.file + ' ' if self.file else ''}verified",
            f"memory      {self.memory_id} ({chain})",
            f"memories    {', '.join(self.memories)}",
            f"log         {self.origin}",
            f"checkpoint  size {self.tree_size}, root {self.root}",
            f"signed by   {self.checkpoint_key}",
            f"trust       {anchor}",
            f"entries     {self.entries} selected + {self.key_entries} key history, each canonical, "
            "signed under the key history and proven in the tree",
            f"seqs        {', '.join(str(s) for s in self.seqs)}",
            f"files       {len(self.files) + 1} (manifest included), sizes and SHA-256 as signed",
            "checks      " + ", ".join(self.checks),
        ]
        for p in self.packs:
            quoted = ", ".join(p["memories_checked"]) or "none of these memories"
            lines.append(
                f"pack        {p['pack_id']} (seq {p['seq']}) re-rendered, SHA-256 {p['sha256']} as signed; "
                f"quotes {quoted} as the entries before it say"
            )
        c = self.completeness
        if c is not None and c["complete"]:
            lines.append(
                f"complete    as of tree size {c['as_of_tree_size']}: every entry about these memories "
                f"among the first {c['as_of_tree_size']} is here (heads committed by entry "
                f"{c['heads_seq']}, back-chains unbroken)"
            )
        elif c is not None:
            partial = ", ".join(f"{m} from seq {s}" for m, s in c["proven_from"].items() if s)
            lines.append(
                f"complete    as of tree size {c['as_of_tree_size']} only from where back-chains begin: "
                f"{partial} (older entries predate back-chains)"
            )
        else:
            lines.append("complete    not proven: a v1 bundle carries no committed heads")
        if c is not None and c.get("uncovered_entries"):
            n, size = c["uncovered_entries"], c["tree_size"]
            lines.append(
                f"outside     {n} signed entr{'y' if n == 1 else 'ies'} of the checkpoint's tree "
                f"(seqs {c['as_of_tree_size']}..{size - 1} but the heads entry {c['heads_seq']}) "
                "lie outside the completeness claim: any of them may be about these memories and "
                "missing here"
            )
        if self.witnesses is not None:
            names = ", ".join(c["name"] for c in self.witnesses["cosignatures"])
            lines.append(
                f"witnessed   {len(self.witnesses['cosignatures'])} cosignature(s) ({names}); "
                f"{self.witnesses['min']} required"
            )
        if self.unstored:
            lines.append(f"note        the chain names ids the log never stored: {', '.join(self.unstored)}")
        return "\n".join(lines)
