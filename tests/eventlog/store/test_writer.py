"""LogWriter: durability modes, batches, rolls, torn tails, damage, the index, key rotation."""

from __future__ import annotations

import itertools
import os
import shutil
import threading
from pathlib import Path
from typing import Any

import cbor2
import pytest

from mnemolog.eventlog.errors import DecodeError, LockTimeout, SignerError, StorageError, VerificationError
from mnemolog.eventlog.format import merkle
from mnemolog.eventlog.format.entry import make_entry
from mnemolog.eventlog.store import writer as W
from mnemolog.eventlog.store.index import Index
from mnemolog.eventlog.store.log import Log
from mnemolog.eventlog.store.segments import list_segments
from mnemolog.eventlog.store.writer import Durability, LogWriter
from mnemolog.eventlog.verify.trust import TRUST_GENESIS
from mnemolog.eventlog.verify.verifier import verify_log
from tests.eventlog.logkit import StepClock, log_files, make_log, seeded_key, tree_hashes

KEY = seeded_key()
KEY2 = seeded_key("second", 9)


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    d = tmp_path / "log"
    LogWriter.create(d, KEY, clock=StepClock(), log_id=b"\x22" * 16)
    return d


def test_create(log_dir: Path) -> None:
    with Log(log_dir) as log:
        g = log.genesis
        assert g.type == "log.created" and g.seq == 0 and g.prev == bytes(32) and g.kid == KEY.kid
        assert g.data == {
            "log_id": b"\x22" * 16,
            "public_key": KEY.public_key,
            "key_name": KEY.name,
            "created_at": g.ts,
        }
        assert log.checkpoint_sizes() == [1]
        cp, _ = log.latest_checkpoint()
        assert cp.root == g.leaf and cp.origin == "mnemolog/" + "22" * 16
    with pytest.raises(StorageError):
        LogWriter.create(log_dir, KEY)
    with pytest.raises(StorageError):
        LogWriter(log_dir.parent / "nothing", [KEY])


@pytest.mark.parametrize("mode", ["fsync", "group"])
def test_appends_and_receipts(log_dir: Path, mode: str) -> None:
    clock = StepClock(2_000_000_000_000_000)
    with LogWriter(log_dir, [KEY], durability=Durability(mode), clock=clock) as w:  # type: ignore[arg-type]
        receipts = [w.append("note.added", {"i": i}) for i in range(20)]
        receipts += w.append_many([("note.added", {"i": 20 + i}, 2) for i in range(5)])
        assert w.append_many([]) == []
        assert w.size == 26
    assert [r.seq for r in receipts] == list(range(1, 26))
    assert all(a.ts < b.ts for a, b in itertools.pairwise(receipts))
    with Log(log_dir) as log:
        assert [log.leaf(r.seq) for r in receipts] == [r.leaf for r in receipts]
        assert [e.tv for e in log.iter_entries(21)] == [2] * 5
        assert log.checkpoint_sizes() == [1, 26]
    verify_log(log_dir, policy=TRUST_GENESIS)


def test_group_commit_batches_syncs(log_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    syncs = []
    real = os.fdatasync
    monkeypatch.setattr(os, "fdatasync", lambda fd: (syncs.append(fd), real(fd))[1])
    with LogWriter(log_dir, [KEY], durability=Durability("group", max_entries=64, max_ms=50)) as w:
        tickets = [w.submit("note.added", {"i": i}) for i in range(640)]
        receipts = [t.result(timeout=30) for t in tickets]
        assert all(t.done() for t in tickets)
    assert [r.seq for r in receipts] == list(range(1, 641))
    assert 10 <= len(syncs) < 640 // 4
    verify_log(log_dir, policy=TRUST_GENESIS)


def test_group_commit_from_many_threads(log_dir: Path) -> None:
    out: list[int] = []
    lock = threading.Lock()
    with LogWriter(log_dir, [KEY], durability=Durability("group", max_entries=16, max_ms=2)) as w:

        def worker(t: int) -> None:
            for i in range(60):
                r = w.append("note.added", {"t": t, "i": i})
                with lock:
                    out.append(r.seq)

        threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert sorted(out) == list(range(1, 481))
    verify_log(log_dir, policy=TRUST_GENESIS)


def test_timestamps_never_go_backwards(log_dir: Path) -> None:
    times = iter([5_000_000, 4_000_000, 4_500_000, 6_000_000])
    with LogWriter(log_dir, [KEY], clock=lambda: next(times)) as w:
        ts = [w.append("note.added", {}).ts for _ in range(3)]
        w.checkpoint_on_close = False
    first = Log(log_dir).genesis.ts
    assert ts[0] >= first and ts == sorted(ts)


@pytest.mark.parametrize(
    ("type_", "data", "tv"),
    [
        ("Bad.Type", {}, 1),
        ("note", {}, 1),
        ("note.added", {1: "int key"}, 1),
        ("note.added", {"x": float("nan")}, 1),
        ("note.added", {"x": {1, 2}}, 1),
        ("note.added", ["not", "a", "map"], 1),
        ("note.added", {}, -1),
        ("note.added", {}, True),
    ],
)
@pytest.mark.parametrize("mode", ["fsync", "group"])
def test_bad_appends_fail_in_the_caller(log_dir: Path, mode: str, type_: str, data: Any, tv: Any) -> None:
    before = tree_hashes(log_dir)
    with LogWriter(log_dir, [KEY], durability=Durability(mode), checkpoint_on_close=False) as w:  # type: ignore[arg-type]
        with pytest.raises(DecodeError):
            w.append(type_, data, tv)
        assert w.size == 1
    assert tree_hashes(log_dir, skip=("index",)) == {
        k: v for k, v in before.items() if not k.startswith("index")
    }


def test_closed_writer_refuses(log_dir: Path) -> None:
    w = LogWriter(log_dir, [KEY], durability=Durability("group"))
    w.close()
    w.close()
    with pytest.raises(StorageError):
        w.submit("note.added", {})
    w2 = LogWriter(log_dir, [KEY])
    w2.close()
    with pytest.raises(StorageError):
        w2.append("note.added", {})


def test_segment_rolls(tmp_path: Path) -> None:
    d = tmp_path / "log"
    make_log(d, entries=60, segment_bytes=1500)
    segs = list_segments(d)
    assert len(segs) >= 7
    with Log(d) as log:
        assert log.size == 61
        assert [first for first, _ in segs] == [
            next(e.seq for e in log.iter_entries() if log.location(e.seq).segment == first)
            for first, _ in segs
        ]
        assert [e.seq for e in log.iter_entries()] == list(range(61))
    # Reopening continues the last segment until it is full.
    with LogWriter(d, [KEY], segment_bytes=1500) as w:
        w.append("note.added", {"again": True})
    assert verify_log(d, processes=1, policy=TRUST_GENESIS).segments >= len(segs)


def _partial_entry(log_dir: Path, cut: int) -> bytes:
    with Log(log_dir) as log:
        last = log.entry(log.size - 1)
        n = log.size
    e = make_entry(
        seq=n, ts=last.ts + 1, type_="note.added", tv=1, data={"x": "y" * 40}, prev=last.leaf, signer=KEY
    )
    return e.raw[:cut]


def test_torn_tail_is_cut_saved_and_reported(log_dir: Path) -> None:
    with LogWriter(log_dir, [KEY]) as w:
        for i in range(3):
            w.append("note.added", {"i": i})
    seg = log_dir / "00000000000000000000.seg"
    good = seg.read_bytes()
    tail = _partial_entry(log_dir, 57)
    seg.write_bytes(good + tail)
    # Readers and verify see the complete entries; verify reports the tail, it does not fail.
    with Log(log_dir) as log:
        assert log.size == 4
    r = verify_log(log_dir, policy=TRUST_GENESIS)
    assert r.torn_tail == {"segment": seg.name, "offset": len(good), "bytes": 57}
    with LogWriter(log_dir, [KEY]) as w:
        assert len(w.recovered) == 1
        t = w.recovered[0]
        assert (t.segment, t.offset, t.length) == (seg.name, len(good), 57)
        assert Path(t.saved_to).read_bytes() == tail
        assert "torn tail of 57 bytes" in t.describe()
        assert seg.read_bytes() == good
        w.append("note.added", {"after": True})
    assert "cut 57 bytes" in (log_dir / "recovery.log").read_text()
    assert verify_log(log_dir, policy=TRUST_GENESIS).torn_tail is None
    with LogWriter(log_dir, [KEY]) as w:
        assert w.recovered == []


@pytest.mark.parametrize(
    "junk",
    [
        b"\x00\x01garbage",
        b"\xa9\x61v\x01\x62ts\x1b" + b"\xff" * 8 + b"\x62tv\x5b" + b"\x7f" * 8,  # a huge length header
        b"\xa9\xc1\x01",  # a tag: never written
        b"\xa9\x61v\x01\x62ts\x9f",  # an indefinite array: never written
    ],
)
def test_damage_is_never_cut(log_dir: Path, junk: bytes) -> None:
    with LogWriter(log_dir, [KEY]) as w:
        w.append("note.added", {})
    seg = log_dir / "00000000000000000000.seg"
    seg.write_bytes(seg.read_bytes() + junk)
    before = tree_hashes(log_dir)
    with pytest.raises(VerificationError) as ei:
        LogWriter(log_dir, [KEY])
    assert ei.value.check == "segment.damage"
    with pytest.raises(VerificationError):
        verify_log(log_dir, policy=TRUST_GENESIS)
    assert tree_hashes(log_dir) == before
    assert not (log_dir / "torn").exists()


def test_damage_in_the_middle_refuses_to_append(log_dir: Path) -> None:
    with LogWriter(log_dir, [KEY]) as w:
        for i in range(4):
            w.append("note.added", {"i": i})
    shutil.rmtree(log_dir / "index")  # so the writer reads every entry
    seg = log_dir / "00000000000000000000.seg"
    b = bytearray(seg.read_bytes())
    b[len(b) // 2] ^= 0xFF
    seg.write_bytes(bytes(b))
    before = tree_hashes(log_dir)
    with pytest.raises(VerificationError):
        LogWriter(log_dir, [KEY])
    after = tree_hashes(log_dir, skip=("index",))
    assert after == {k: v for k, v in before.items() if not k.startswith("index")}


def test_an_entry_claiming_to_run_past_the_end_is_not_a_torn_tail(log_dir: Path) -> None:
    """A length changed inside a checkpointed entry must not get later entries cut off."""
    with LogWriter(log_dir, [KEY]) as w:
        for i in range(3):
            w.append("note.added", {"text": "a" * 20 + str(i)})
    shutil.rmtree(log_dir / "index")
    seg = log_dir / "00000000000000000000.seg"
    b = seg.read_bytes()
    i = b.index(b"\x75" + b"a" * 20)  # the 21-char text "aaa...0": head 0x75
    seg.write_bytes(b[:i] + b"\x78\xff" + b[i + 1 :])  # now claims 255 bytes
    before = tree_hashes(log_dir)
    with pytest.raises(VerificationError) as ei:
        LogWriter(log_dir, [KEY])
    assert ei.value.check in ("log.truncated", "segment.damage")
    assert tree_hashes(log_dir, skip=("index",)) == {
        k: v for k, v in before.items() if not k.startswith("index")
    }
    with pytest.raises(VerificationError):
        verify_log(log_dir, policy=TRUST_GENESIS)


def test_truncated_log_refuses_to_append(log_dir: Path) -> None:
    with LogWriter(log_dir, [KEY]) as w:
        for i in range(4):
            w.append("note.added", {"i": i})
    seg = log_dir / "00000000000000000000.seg"
    with Log(log_dir) as log:
        end = log.location(2).offset + log.location(2).length
    seg.write_bytes(seg.read_bytes()[:end])
    shutil.rmtree(log_dir / "index")
    with pytest.raises(VerificationError) as ei:
        LogWriter(log_dir, [KEY])
    assert ei.value.check == "log_diverged"


@pytest.mark.parametrize(
    "damage", ["deleted", "scrambled", "truncated", "torn_record", "wrong_tree", "shuffled"]
)
def test_the_writer_rebuilds_a_lost_or_damaged_index(tmp_path: Path, damage: str) -> None:
    d = tmp_path / "log"
    make_log(d, entries=40, segment_bytes=2000)
    idx = d / "index"
    good = {p.name: p.read_bytes() for p in idx.iterdir()}
    if damage == "deleted":
        shutil.rmtree(idx)
    elif damage == "scrambled":
        for p in idx.iterdir():
            p.write_bytes(os.urandom(p.stat().st_size))
    elif damage == "truncated":
        (idx / "loc").write_bytes(good["loc"][: 20 * 17])
    elif damage == "torn_record":
        (idx / "loc").write_bytes(good["loc"][:-7])
    elif damage == "wrong_tree":
        t = bytearray(good["tree-02"])
        t[5] ^= 1
        (idx / "tree-02").write_bytes(bytes(t))
    else:
        loc = good["loc"]
        (idx / "loc").write_bytes(loc[20:40] + loc[:20] + loc[40:])
    # Readers work without a trustworthy index: entries, roots and proofs.
    with Log(d) as log:
        assert log.size == 41
        assert [e.seq for e in log.iter_entries()] == list(range(41))
        assert log.entry(1).seq == 1 and log.entry(40).seq == 40
        cp, _ = log.latest_checkpoint()
        assert log.root(41) == cp.root
        for s in (0, 3, 17, 40):
            merkle.verify_inclusion(s, 41, merkle.hash_leaf(log.raw(s)), log.inclusion_proof(s, 41), cp.root)
        root5 = merkle.root_of([merkle.hash_leaf(log.raw(i)) for i in range(5)])
        merkle.verify_consistency(5, 41, root5, cp.root, log.consistency_proof(5, 41))
    # The writer rebuilds it, and keeps it right from then on.
    with LogWriter(d, [KEY], segment_bytes=2000) as w:
        w.append("note.added", {"more": 1})
    # What the writer does not read (an inner tree node no root needs, a location
    # record other than the last) it does not notice: readers check those as they go.
    if damage not in ("wrong_tree", "shuffled"):
        assert (idx / "loc").read_bytes()[: len(good["loc"])] == good["loc"]
        assert (idx / "tree-00").read_bytes()[: len(good["tree-00"])] == good["tree-00"]
        assert (idx / "tree-02").read_bytes()[: len(good["tree-02"])] == good["tree-02"]
        with Log(d) as log:
            assert log.indexed == 42
    with Log(d) as log:
        assert [e.seq for e in log.iter_entries()] == list(range(42)) and log.entry(2).seq == 2
    verify_log(d, policy=TRUST_GENESIS)


def test_key_rotation(log_dir: Path) -> None:
    with LogWriter(log_dir, [KEY]) as w:
        w.append("note.added", {"before": 1})
        r = w.rotate_key(KEY2)
        assert w.key is KEY2
        w.append("note.added", {"after": 1})
        with pytest.raises(SignerError):
            w.rotate_key(KEY2)
    with Log(log_dir) as log:
        rot = log.entry(r.seq)
        assert rot.type == "key.rotated" and rot.kid == KEY.kid
        assert rot.data["public_key"] == KEY2.public_key and rot.data["key_name"] == "second"
        assert log.entry(r.seq + 1).kid == KEY2.kid
        assert [ep.first_seq for ep in log.key_history()] == [0, r.seq + 1]
        assert log.key_at(r.seq).kid == KEY.kid and log.key_at(r.seq + 1).kid == KEY2.kid
    # Only the new key can write now; the old one is refused.
    with pytest.raises(SignerError):
        LogWriter(log_dir, [KEY])
    with LogWriter(log_dir, [KEY, KEY2]) as w:
        assert w.key is KEY2
    assert verify_log(log_dir, policy=TRUST_GENESIS).keys == 2


def test_rotation_in_group_mode_splits_batches(log_dir: Path) -> None:
    with LogWriter(log_dir, [KEY], durability=Durability("group", max_entries=100, max_ms=20)) as w:
        tickets = [w.submit("note.added", {"i": i}) for i in range(30)]
        w.rotate_key(KEY2)
        tickets += [w.submit("note.added", {"i": i}) for i in range(30)]
        [t.result() for t in tickets]
    with Log(log_dir) as log:
        kids = [e.kid for e in log.iter_entries(1)]
    assert kids == [KEY.kid] * 31 + [KEY2.kid] * 30
    verify_log(log_dir, policy=TRUST_GENESIS)


def test_checkpoint_is_idempotent_per_size(log_dir: Path) -> None:
    with LogWriter(log_dir, [KEY]) as w:
        w.append("note.added", {})
        cp1, raw1 = w.checkpoint()
        cp2, raw2 = w.checkpoint()
        assert (cp1, raw1) == (cp2, raw2) and cp1.size == 2
    with LogWriter(log_dir, [KEY]) as w:
        pass  # nothing appended: no new checkpoint
    assert Log(log_dir).checkpoint_sizes() == [1, 2]


def test_lock_timeout(log_dir: Path) -> None:
    from mnemolog.eventlog.store.lock import FileLock

    other = FileLock(log_dir / ".lock", 1.0)
    held = threading.Event()
    release = threading.Event()

    def hold() -> None:
        with other:
            held.set()
            release.wait(10)

    t = threading.Thread(target=hold)
    t.start()
    held.wait(5)
    try:
        # A FileLock in another thread of this process is exclusive too (its own thread lock).
        with pytest.raises(LockTimeout):
            LogWriter(log_dir, [KEY], lock_timeout=0.2)
    finally:
        release.set()
        t.join()


def test_write_failure_acknowledges_nothing(log_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    w = LogWriter(log_dir, [KEY])
    w.append("note.added", {"ok": 1})

    def boom(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fdatasync", boom)
    with pytest.raises(StorageError):
        w.append("note.added", {"lost": 1})
    monkeypatch.undo()
    r = w.append("note.added", {"ok": 2})
    assert r.seq == 2
    w.close()
    with Log(log_dir) as log:
        assert [e.data for e in log.iter_entries(1)] == [{"ok": 1}, {"ok": 2}]
    verify_log(log_dir, policy=TRUST_GENESIS)


def test_index_file_layout(tmp_path: Path) -> None:
    d = tmp_path / "log"
    make_log(d, entries=9, rotate_to=KEY2, rotate_after=3)
    idx = Index(d)
    assert idx.count() == 11
    assert idx.key_seqs(100) == [0, 4]
    assert sorted(p.name for p in (d / "index").iterdir()) == [
        "keys",
        "loc",
        *[f"tree-{i:02d}" for i in range(4)],
    ]
    with Log(d) as log:
        for s in range(11):
            loc = idx.location(s)
            assert cbor2.loads(log.raw(s))["seq"] == s
            assert (loc.segment, loc.length) == (0, len(log.raw(s)))
    idx.close()


def test_checkpoint_names_and_files(tmp_path: Path) -> None:
    d = tmp_path / "log"
    make_log(d, entries=3, checkpoint_every=1)
    names = [p.name for p in log_files(d) if p.parent.name == "checkpoints"]
    assert names == [f"{n:020d}" for n in (1, 2, 3, 4)]


def test_writer_state_is_reloaded_when_another_writer_appended(log_dir: Path) -> None:
    a = LogWriter(log_dir, [KEY], checkpoint_on_close=False)
    b = LogWriter(log_dir, [KEY], checkpoint_on_close=False, segment_bytes=10)
    assert a.append("note.added", {"w": "a"}).seq == 1
    assert b.append("note.added", {"w": "b"}).seq == 2  # rolls: b's segment limit is tiny
    assert a.append("note.added", {"w": "a"}).seq == 3  # a notices b's new segment
    assert b.append("note.added", {"w": "b"}).seq == 4
    a.close()
    b.close()
    assert verify_log(log_dir, policy=TRUST_GENESIS).entries == 5
    assert len(list_segments(log_dir)) >= 2


def test_durability_settings_are_checked() -> None:
    with pytest.raises(StorageError):
        Durability("sometimes")  # type: ignore[arg-type]
    with pytest.raises(StorageError):
        Durability("group", max_entries=0)


def test_system_clock_is_microseconds() -> None:
    import time

    assert abs(W.system_clock() - time.time() * 1e6) < 5e6
