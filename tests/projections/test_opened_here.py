"""The fold of a batch its own writer just sealed takes the sealed values instead of opening the
boxes again, and only for the bytes that writer signed (projections.fold.FoldPass `opened`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mnemolog.eventlog.format import sealing
from mnemolog.projections import engine
from tests.projections.kit import logical_rows, new_home, open_sub


def test_the_values_kept_are_what_the_boxes_open_to_and_a_rebuild_agrees(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = new_home(tmp_path / "h")
    src = tmp_path / "in.jsonl"
    lines = [
        {"content": f"note {i} héllo wörld", "title": f"t{i}", "tags": ["a", f"b{i}"], "metadata": {"n": i}}
        for i in range(30)
    ]
    src.write_text("".join(json.dumps(x) + "\n" for x in lines))
    handed: dict[int, tuple[bytes, dict[str, Any]]] = {}
    real = engine.Projections.catch_up

    def spy(self: engine.Projections, conn: Any, **kw: Any) -> int:
        handed.update(kw.get("opened_here") or {})
        return real(self, conn, **kw)

    monkeypatch.setattr(engine.Projections, "catch_up", spy)
    with open_sub(home) as sub:
        sub.import_jsonl(src, progress=False, batch=7)
        sub.store("one more", title="x", tags=["c"])
        with sub.session() as s:
            caught_up = logical_rows(s.conn)
        log, keys = sub.log, sub.keys
        assert len(handed) == 31
        for seq, (leaf, values) in handed.items():
            e = log.entry(seq)
            assert e.leaf == leaf
            assert sealing.open_payload(e.type, e.data, keys.get) == sealing.opened_with(e.data, values)
        sub.projections.rebuild()
        with sub.session() as s:
            assert logical_rows(s.conn) == caught_up


def test_values_are_taken_only_for_the_bytes_signed_here(tmp_path: Path) -> None:
    """A receipt whose leaf is not the entry's (other bytes at that seq) is ignored: the box is opened."""
    home = new_home(tmp_path / "h")
    with open_sub(home) as sub:
        mid = sub.store("the real content")["id"]
        sub.store("second")
        with sub.session() as s:
            row = s.conn.execute("SELECT stored_seq FROM memories WHERE id = ?", [mid]).fetchone()
        assert row is not None
        seq = int(row[0])
        entry = sub.log.entry(seq)
        values = {"content": "what this writer sealed"}
        for leaf, expect in ((b"\0" * 32, "the real content"), (entry.leaf, "what this writer sealed")):
            with sub.projections.store.session(fresh=True) as conn:
                sub.projections._reset(conn)
                sub.projections.catch_up(conn, opened_here={seq: (leaf, values)})
                got = conn.execute("SELECT content FROM memories WHERE id = ?", [mid]).fetchone()
                assert got is not None and got[0] == expect
