"""The archive guard table: what hides a memory from recall, search and list, and what does not.

Atomisation events are written straight to the log with the Substrate's writer
(the engine that normally writes them is tested elsewhere); the next session
catches up on them.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from mnemolog.substrate.api import Substrate
from tests.projections.kit import check_invariants, new_home, open_sub


def completed(sub: Substrate, mid: str, atoms: list[str]) -> None:
    sub.writer.append(
        "atomisation.completed",
        {
            "source_id": mid,
            "atom_ids": atoms,
            "curator": "rules",
            "input_tokens": 100,
            "output_tokens": 40,
            "atom_tokens": [20] * len(atoms),
            "max_atom_tokens": 200,
            "attempts": 1,
        },
    )


def atom_archived(sub: Substrate, mid: str) -> None:
    sub.writer.append("memory.archived", {"id": mid, "by": "atomisation", "atomised_into": 2})


def atoms_of(sub: Substrate, mid: str) -> list[str]:
    return [sub.store(f"zebra atom {i}", atom_of=mid, source_span=[0, 5])["id"] for i in range(2)]


Step = Callable[[Substrate, str], None]
OPERATOR: Step = lambda s, m: s.archive(m, reason="obsolete")  # noqa: E731
RESTORE: Step = lambda s, m: s.restore(m)  # noqa: E731
COMPLETED: Step = lambda s, m: completed(s, m, atoms_of(s, m))  # noqa: E731
COMPLETED_EMPTY: Step = lambda s, m: completed(s, m, [])  # noqa: E731
ATOM_ARCHIVED: Step = atom_archived

CASES: list[tuple[str, list[Step], bool]] = [
    ("untouched", [], True),
    ("operator archive hides", [OPERATOR], False),
    ("operator archive then restore", [OPERATOR, RESTORE], True),
    ("atomisation completed alone stays visible", [COMPLETED], True),
    ("atomisation archive signal alone stays visible", [ATOM_ARCHIVED], True),
    ("both atomisation signals hide", [COMPLETED, ATOM_ARCHIVED], False),
    ("both signals in the other order hide", [ATOM_ARCHIVED, COMPLETED], False),
    ("both signals then restore", [COMPLETED, ATOM_ARCHIVED, RESTORE], True),
    ("zero atoms is no atomisation", [COMPLETED_EMPTY, ATOM_ARCHIVED], True),
    ("re-atomised still hidden", [COMPLETED, ATOM_ARCHIVED, COMPLETED], False),
    ("operator and atomisation, restore clears both", [OPERATOR, COMPLETED, ATOM_ARCHIVED, RESTORE], True),
    ("restore then archive again", [OPERATOR, RESTORE, OPERATOR], False),
]


@pytest.mark.parametrize(("name", "steps", "visible"), CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("reopen", [False, True], ids=["same-session", "reopened"])
def test_guard(tmp_path: Path, name: str, steps: list[Step], visible: bool, reopen: bool) -> None:
    home = new_home(tmp_path / "home")
    sub = open_sub(home, long_lived=True)
    try:
        target = sub.store("zebra parent memory with several zebra facts", title="Zebra parent")["id"]
        control = sub.store("an unrelated zebra sighting")["id"]
        for step in steps:
            step(sub, target)
        if reopen:
            sub.close()
            sub = open_sub(home)
        reads: dict[str, Callable[..., list[dict[str, Any]]]] = {
            "recall": lambda **kw: sub.recall("zebra parent", limit=50, **kw),
            "search": lambda **kw: sub.search("zebra", limit=50, **kw),
            "list": lambda **kw: sub.list(limit=50, **kw),
        }
        for what, read in reads.items():
            shown = {r["id"] for r in read()}
            assert (target in shown) is visible, what
            assert control in shown, what
            every = {r["id"] for r in read(include_archived=True)}
            assert {target, control} <= every, what
        got = sub.get(target)  # get is never guarded
        assert got["id"] == target
        st = sub.stats()
        assert st["visible"] == st["memories"] - (0 if visible else 1)
        with sub.projections.session() as conn:
            check_invariants(conn)
    finally:
        sub.close()


def test_atoms_surface_in_place_of_their_atomised_parent(tmp_path: Path) -> None:
    with open_sub(new_home(tmp_path / "home"), long_lived=True) as sub:
        parent = sub.store("zebra migration notes: herds move north in spring, rivers are crossed")["id"]
        a1 = sub.store("zebra herds move north in spring", atom_of=parent)["id"]
        a2 = sub.store("zebra herds cross rivers", atom_of=parent)["id"]
        before = [r["id"] for r in sub.recall("zebra herds rivers")]
        assert parent in before
        completed(sub, parent, [a1, a2])
        atom_archived(sub, parent)
        after = [r["id"] for r in sub.recall("zebra herds rivers")]
        assert parent not in after and set(after) == {a1, a2}
        everything = [r["id"] for r in sub.recall("zebra herds rivers", include_archived=True)]
        assert set(everything) == {parent, a1, a2}
        # The parent still counts in the statistics: archiving it does not change atoms' scores.
        scores = {r["id"]: r["score"] for r in sub.recall("zebra herds rivers", include_archived=True)}
        assert {r["id"]: r["score"] for r in sub.recall("zebra herds rivers")} == {
            k: v for k, v in scores.items() if k != parent
        }
