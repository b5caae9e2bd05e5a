"""What a long-lived process keeps between packs (`projections.standing`) follows every change.

The project registry, the project's state and the superseded memories are
kept while no memory-changing entry is folded, and the copies of the BM25
index and of the chunks' index follow a pack's own record without a
statement. After each kind of change that alters them (a document ingested
and changed, a state set or invalidated, an alias registered, a supersedes
link), a pack built by a warm process equals the pack a process that keeps
nothing builds; and recorded packs in between (entries that change no
memory and no chunk) keep nothing stale.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from mnemolog.projections import standing
from tests.projections.kit import FakeClock, new_home, open_sub

QUERY = "spindle warm-up procedure"


def cold(home: Path, project: str) -> dict[str, Any]:
    standing.forget()
    with open_sub(home, clock=FakeClock()) as s:
        return s.build_context(QUERY, project=project, record=False)


def test_a_warm_process_builds_the_packs_a_cold_one_builds(tmp_path: Path) -> None:
    home = tmp_path / "home"
    new_home(home)
    with open_sub(home, long_lived=True, worker=False, clock=FakeClock()) as sub:
        sub.register_project("p07-spindle")
        old = sub.store("the spindle warm-up procedure takes ten minutes", project="p07-spindle")["id"]
        new = sub.store("the spindle warm-up procedure takes five minutes", project="p07-spindle")["id"]
        for i in range(3):
            sub.store(f"a global note on spindle warm-up number {i}")
        doc = tmp_path / "docs" / "spindle.md"
        doc.parent.mkdir()

        def ingest(text: str) -> None:
            doc.write_text(f"# Spindle\n\n## Warm-up\n{text}\n")
            sub.ingest([doc.parent], project="p07-spindle")

        changes: list[Callable[[], Any]] = [
            lambda: ingest("The spindle warm-up procedure runs at low speed."),
            lambda: ingest("The spindle warm-up procedure runs at half speed for ten minutes."),
            lambda: sub.set_state("p07-spindle", "status", "phase", "design review"),
            lambda: sub.set_state("p07-spindle", "status", "phase", "build"),
            lambda: sub.alias_project("p07-spindle", "spindle"),
            lambda: sub.link(new, old, "supersedes"),
            lambda: sub.invalidate_state("p07-spindle", "status", "phase", reason="moved on"),
        ]
        seen: list[str] = []
        for change in [lambda: None, *changes]:
            change()
            for project in ("p07-spindle", "spindle"):
                sub.build_context(QUERY, project=project)  # recorded: changes no memory
                warm = sub.build_context(QUERY, project=project, record=False)
                other = cold(home, project)
                del warm["now"], other["now"]  # each process's own clock
                assert warm == other
                seen.append(warm["text"])
        # The changes showed: the state's values, then none; the superseded memory marked.
        assert any("design review" in t for t in seen) and any("build" in t for t in seen)
        assert any("low speed" in t for t in seen) and any("half speed" in t for t in seen)
        assert "build" not in seen[-1] and "design review" not in seen[-1]
