"""Test data for forensic bundles: a home holding an atomised memory, written by hand.

The atomisation engine is someone else's; these helpers write the same
events it does (atoms with atom_of and source_span, derives_from links,
atomisation.completed, the atomisation archive signal), so bundle tests do
not depend on it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from mnemolog.substrate.api import Substrate
from mnemolog.substrate.events import LinkCreated, MemoryStored
from mnemolog.substrate.home import Home, init_home

PARENT_TEXT = (
    "The deploy pipeline runs nightly at 02:00 UTC. "
    "Rollbacks need two approvals from the on-call rota. "
    "Staging mirrors production data with a one-day lag."
)


class FakeClock:
    """Microseconds that advance by one millisecond per reading: timestamps are reproducible."""

    def __init__(self, start: int = 1_700_000_000_000_000) -> None:
        self.now = start

    def __call__(self) -> int:
        self.now += 1000
        return self.now


@dataclass
class Atomised:
    home: Home
    parent: str
    atoms: list[str]
    other: str
    seqs: dict[str, list[int]] = field(default_factory=dict)


def make_home(root: Path, clock: FakeClock | None = None) -> Home:
    init_home(root, "test-key", clock=clock or FakeClock())
    return Home(root)


def atomise_by_hand(sub: Substrate, parent_id: str, text: str, pieces: list[str]) -> list[str]:
    """Store atoms of `parent_id`, link them, complete and archive as the engine would."""
    atoms: list[str] = []
    with sub.session() as s:
        for i, piece in enumerate(pieces):
            start = text.index(piece)
            payload = MemoryStored.new(
                piece, atom_of=parent_id, source_span=[start, start + len(piece)], title=f"atom {i}"
            )
            s.write_memory(payload, atom_index=i)
            atoms.append(payload.id)
        for a in atoms:
            s.write_link(LinkCreated(src=a, dst=parent_id, relation="derives_from"))
        sub.writer.append(
            "atomisation.completed",
            {
                "source_id": parent_id,
                "atom_ids": atoms,
                "curator": "rules",
                "input_tokens": 40,
                "output_tokens": 30,
                "atom_tokens": [10] * len(atoms),
                "max_atom_tokens": 200,
                "attempts": 1,
            },
        )
        sub.writer.append(
            "memory.archived", {"id": parent_id, "by": "atomisation", "atomised_into": len(atoms)}
        )
        s.catch_up()
    return atoms


def filler(sub: Substrate, n: int, prefix: str = "noise") -> list[str]:
    """n unrelated memories: entries a sparse bundle must leave out."""
    return [sub.store(f"{prefix} memory number {i} about nothing in particular")["id"] for i in range(n)]


def atomised_home(root: Path, *, noise: int = 3) -> Atomised:
    """A home with noise, a parent atomised into three atoms, an update, a link and more noise."""
    home = make_home(root)
    with Substrate.open(home, long_lived=False, clock=FakeClock(1_700_000_100_000_000)) as sub:
        filler(sub, noise, "before")
        parent = sub.store(PARENT_TEXT, title="deploy notes", tags=["ops"], metadata={"team": "infra"})["id"]
        filler(sub, noise, "between")
        sub.update(parent, confidence=0.75, metadata={"reviewed": True})
        other = sub.store("An unrelated memory that links to the deploy notes")["id"]
        sub.link(other, parent, "related_to")
        pieces = [p.strip() + "." for p in PARENT_TEXT.split(".") if p.strip()]
        atoms = atomise_by_hand(sub, parent, PARENT_TEXT, pieces)
        filler(sub, noise, "after")
        sub.update(atoms[0], tags=["ops", "schedule"])
    return Atomised(home, parent, atoms, other)


def members_of(data: bytes) -> dict[str, bytes]:
    """The members of a bundle archive (through the strict reader)."""
    import io

    from mnemolog.eventlog.bundle.tarball import read_tar

    return read_tar(io.BytesIO(data), len(data))


def rotated_home(root: Path) -> tuple[Home, str, list[str]]:
    """A home whose key rotates between a parent's store and its atomisation."""
    home = make_home(root)
    with Substrate.open(home, long_lived=False, clock=FakeClock(1_700_000_200_000_000)) as sub:
        filler(sub, 2, "early")
        parent = sub.store(PARENT_TEXT, title="rotated")["id"]
        home.rotate_key(sub.writer)
        pieces = [p.strip() + "." for p in PARENT_TEXT.split(".") if p.strip()]
        atoms = atomise_by_hand(sub, parent, PARENT_TEXT, pieces[:2])
        home.rotate_key(sub.writer)
        sub.update(parent, confidence=0.5)
    return home, parent, atoms
