"""The Log reader: entries, the tail past the index, key history, roots, proofs, checkpoints."""

from __future__ import annotations

import itertools
import shutil
from pathlib import Path

import pytest

from mnemolog.eventlog.errors import HomeMissing, NotFound, VerificationError
from mnemolog.eventlog.format import merkle
from mnemolog.eventlog.store.index import HASH, KEYREC, LOC
from mnemolog.eventlog.store.log import Log
from mnemolog.eventlog.store.writer import LogWriter
from tests.eventlog.logkit import make_log, seeded_key

KEY = seeded_key()
KEY2 = seeded_key("second", 9)


@pytest.fixture(scope="module")
def rotated_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("log") / "log"
    make_log(d, entries=30, rotate_to=KEY2, rotate_after=20, segment_bytes=1500, checkpoint_every=7)
    return d


def _leaves(log: Log) -> list[bytes]:
    return [merkle.hash_leaf(log.raw(s)) for s in range(log.size)]


def test_no_log(tmp_path: Path) -> None:
    with pytest.raises(HomeMissing):
        Log(tmp_path / "missing")


def test_entries(rotated_log: Path) -> None:
    with Log(rotated_log) as log:
        assert log.size == log.indexed == 32
        es = list(log.iter_entries())
        assert [e.seq for e in es] == list(range(32))
        assert [e.seq for e in log.iter_entries(5, 9)] == [5, 6, 7, 8]
        assert list(log.iter_entries(40)) == []
        for e in es:
            assert log.entry(e.seq) == e
            assert log.leaf(e.seq) == e.leaf == merkle.hash_leaf(log.raw(e.seq))
            assert all(a.leaf == b.prev for a, b in itertools.pairwise(es))
        for bad in (32, 100, -1):
            with pytest.raises(NotFound):
                log.entry(bad)
        assert log.log_id == b"\x11" * 16 and log.origin == "mnemolog/" + "11" * 16


def test_key_history(rotated_log: Path) -> None:
    with Log(rotated_log) as log:
        hist = log.key_history()
        assert [(h.first_seq, h.event_seq, h.key.kid) for h in hist] == [(0, 0, KEY.kid), (22, 21, KEY2.kid)]
        assert log.key_at(21).kid == KEY.kid and log.key_at(22).kid == KEY2.kid
        assert len(log.key_history(below=21)) == 1


def test_roots_and_proofs_match_a_memory_tree(rotated_log: Path) -> None:
    with Log(rotated_log) as log:
        mem = merkle.MemoryTree(_leaves(log))
        for n in range(33):
            assert log.root(n) == mem.root(n)
        for n in (1, 7, 17, 32):
            for s in range(n):
                assert log.inclusion_proof(s, n) == merkle.inclusion_proof(s, n, mem.subtree)
            for m in range(1, n + 1):
                assert log.consistency_proof(m, n) == merkle.consistency_proof(m, n, mem.subtree)
        for bad in ((0, 0), (5, 3), (0, 33)):
            with pytest.raises(NotFound):
                log.inclusion_proof(*bad)
        with pytest.raises(NotFound):
            log.consistency_proof(0, 5)
        with pytest.raises(NotFound):
            log.root(33)


def test_checkpoints(rotated_log: Path) -> None:
    with Log(rotated_log) as log:
        sizes = log.checkpoint_sizes()
        assert sizes[0] == 1 and sizes[-1] == 32
        cp, raw = log.latest_checkpoint()
        assert cp.size == 32 and cp.root == log.root(32) and raw == log.checkpoint_bytes(32)
        assert b"\xe2\x80\x94 second " in raw  # signed by the key in force at size 32
        with pytest.raises(NotFound):
            log.checkpoint_bytes(2)


def test_a_tampered_latest_checkpoint_is_refused(rotated_log: Path, tmp_path: Path) -> None:
    d = tmp_path / "log"
    shutil.copytree(rotated_log, d)
    p = d / "checkpoints" / f"{32:020d}"
    p.write_bytes(p.read_bytes().replace(b"\n32\n", b"\n31\n"))
    with Log(d) as log, pytest.raises(VerificationError):
        log.latest_checkpoint()


def test_the_tail_past_the_index(rotated_log: Path, tmp_path: Path) -> None:
    d = tmp_path / "log"
    shutil.copytree(rotated_log, d)
    with Log(d) as log:
        want = [log.entry(s) for s in range(32)]
        roots = [log.root(n) for n in range(33)]
    # Keep only 10 entries in the index: the rest (with the rotation) are read from the segments.
    idx = d / "index"
    (idx / "loc").write_bytes((idx / "loc").read_bytes()[: 10 * LOC.size])
    (idx / "keys").write_bytes((idx / "keys").read_bytes()[: 1 * KEYREC.size])
    (idx / "tree-00").write_bytes((idx / "tree-00").read_bytes()[: 10 * HASH])
    with Log(d) as log:
        assert (log.indexed, log.size) == (10, 32)
        assert [log.entry(s) for s in range(32)] == want
        assert [e.seq for e in log.iter_entries(8)] == list(range(8, 32))
        assert [h.first_seq for h in log.key_history()] == [0, 22]
        assert [log.root(n) for n in range(33)] == roots
        mem = merkle.MemoryTree(_leaves(log))
        assert log.inclusion_proof(25, 32) == merkle.inclusion_proof(25, 32, mem.subtree)
        assert log.consistency_proof(9, 30) == merkle.consistency_proof(9, 30, mem.subtree)


def test_refresh_sees_appends(tmp_path: Path) -> None:
    d = tmp_path / "log"
    make_log(d, entries=2)
    log = Log(d)
    assert log.size == 3
    with LogWriter(d, [KEY]) as w:
        w.append("note.added", {"late": True})
        assert log.size == 3
        assert log.refresh() == 4
        assert log.entry(3).data == {"late": True}
    log.close()
