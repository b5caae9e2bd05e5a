"""The writer refuses to build on a log it cannot vouch for (issue: verification that cannot be fooled).

Attack 1, truncation behind a live writer: acknowledged entries cut off at an
entry boundary while a long-lived writer runs. Attack 2, appending after
damage: a byte flipped in a segment or a checkpoint. Each is reproduced here
against the writer; every refusal is a VerificationError with check
`log_diverged` (or `checkpoint.signature`), and the refused writer never
signs a checkpoint over the log. Also: periodic checkpoints, checkpoint
listeners, the high-water mark, a rotation by another process, an index
that fails after the entries are durable, and an append racing close().
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path

import cbor2
import pytest

from mnemolog.eventlog.errors import SignerError, StorageError, VerificationError
from mnemolog.eventlog.store import group_commit
from mnemolog.eventlog.store.checkpoints import CheckpointPolicy, checkpoint_sizes, read_high_water
from mnemolog.eventlog.store.index import IndexWriter
from mnemolog.eventlog.store.log import Log
from mnemolog.eventlog.store.segments import list_segments
from mnemolog.eventlog.store.writer import Durability, LogWriter
from mnemolog.eventlog.verify.trust import TRUST_GENESIS
from mnemolog.eventlog.verify.verifier import verify_log
from tests.eventlog.logkit import StepClock, log_files, seeded_key, tree_hashes

KEY = seeded_key()
KEY2 = seeded_key("second", 9)


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    d = tmp_path / "log"
    LogWriter.create(d, KEY, clock=StepClock(), log_id=b"\x33" * 16)
    return d


def entry_ends(log_dir: Path) -> list[tuple[Path, int]]:
    """(segment, end offset) of every entry, in seq order."""
    with Log(log_dir) as log:
        out = []
        for s in range(log.size):
            loc = log.location(s)
            out.append((log_dir / f"{loc.segment:020d}.seg", loc.offset + loc.length))
        return out


def cut_after(log_dir: Path, keep: int) -> None:
    """Cut the log at an entry boundary, keeping entries 0..keep-1 (what an attacker does)."""
    seg, end = entry_ends(log_dir)[keep - 1]
    with open(seg, "r+b") as f:
        f.truncate(end)
    for first, path in list_segments(log_dir):
        if first > keep - 1 and path != seg:
            path.unlink()


def wait_for(cond: Callable[[], bool], what: str, limit: float = 30.0) -> None:
    deadline = time.monotonic() + limit
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.01)


def diverged(info: pytest.ExceptionInfo[VerificationError]) -> None:
    assert info.value.check == "log_diverged", (info.value.check, info.value.message)


# -- attack 1: truncation behind a live writer -----------------------------------------


@pytest.mark.parametrize("mode", ["fsync", "group"])
def test_a_live_writer_refuses_a_log_cut_behind_it(log_dir: Path, mode: str) -> None:
    w = LogWriter(log_dir, [KEY], durability=Durability(mode))  # type: ignore[arg-type]
    for i in range(6):
        w.append("note.added", {"i": i})
    cps_before = checkpoint_sizes(log_dir)
    cut_after(log_dir, 4)  # entries 4..6 were acknowledged and are gone
    with pytest.raises(VerificationError) as info:
        w.append("note.added", {"after": "cut"})
    diverged(info)
    with pytest.raises(VerificationError) as info:
        w.checkpoint()
    diverged(info)
    w.close()  # never signs over the short log
    assert checkpoint_sizes(log_dir) == cps_before
    with pytest.raises((VerificationError, StorageError)):
        w.append("note.added", {})  # closed, or diverged: either way, nothing is written


def test_a_live_writer_refuses_a_log_cut_and_regrown_by_another(log_dir: Path) -> None:
    live = LogWriter(log_dir, [KEY])
    for i in range(5):
        live.append("note.added", {"i": i, "who": "live"})
    cut_after(log_dir, 3)
    # Another writer (a CLI command) knows nothing and appends at the cut: the log is as long
    # as before, but it is not the log the live writer acknowledged.
    with LogWriter(log_dir, [KEY], checkpoint_on_close=False) as other:
        for i in range(4):
            other.append("note.added", {"i": i, "who": "other"})
    with pytest.raises(VerificationError) as info:
        live.append("note.added", {"again": True})
    diverged(info)
    assert "acknowledged" in info.value.message
    live.close()


def test_a_writer_refuses_a_log_shorter_than_its_newest_checkpoint(log_dir: Path) -> None:
    with LogWriter(log_dir, [KEY]) as w:
        for i in range(5):
            w.append("note.added", {"i": i})
    cut_after(log_dir, 4)
    before = tree_hashes(log_dir, skip=("index",))
    with pytest.raises(VerificationError) as info:
        LogWriter(log_dir, [KEY])
    diverged(info)
    assert info.value.expected == 6 and info.value.found == 4
    assert tree_hashes(log_dir, skip=("index",)) == before


def test_periodic_checkpoints_cover_acknowledged_entries(log_dir: Path) -> None:
    seen: list[bytes] = []
    policy = CheckpointPolicy(max_entries=3, max_seconds=3600)
    with LogWriter(log_dir, [KEY], checkpoint_policy=policy, checkpoint_listeners=[seen.append]) as w:
        for i in range(3):
            w.append("note.added", {"i": i})
        wait_for(lambda: 4 in checkpoint_sizes(log_dir), "a checkpoint after 3 entries")
        # Now the cut is caught by the log itself, whatever happens to the writer.
        w.append("note.added", {"i": 3})
    assert seen and seen[0] == (log_dir / "checkpoints" / f"{4:020d}").read_bytes()
    policy = CheckpointPolicy(max_entries=1000, max_seconds=0.05)
    with LogWriter(log_dir, [KEY], checkpoint_policy=policy, checkpoint_on_close=False) as w:
        w.append("note.added", {"lonely": True})
        wait_for(lambda: w.size in checkpoint_sizes(log_dir), "a checkpoint after max_seconds")
    verify_log(log_dir, policy=TRUST_GENESIS)


def test_the_periodic_checkpointer_stops_on_divergence(log_dir: Path) -> None:
    policy = CheckpointPolicy(max_entries=2, max_seconds=3600)
    w = LogWriter(log_dir, [KEY], checkpoint_policy=policy, checkpoint_on_close=False)
    w.append("note.added", {"i": 0})
    sizes = checkpoint_sizes(log_dir)
    cut_after(log_dir, 1)
    with pytest.raises(VerificationError):
        w.append("note.added", {"i": 1})
    w.close()
    assert checkpoint_sizes(log_dir) == sizes


# -- attack 2: appending after damage ----------------------------------------------------


def _flip_in_entry(log_dir: Path, seq: int) -> None:
    """Flip one byte inside the payload text of entry `seq` (its bytes still decode)."""
    with Log(log_dir) as log:
        loc = log.location(seq)
        raw = log.raw(seq)
    text = cbor2.loads(raw)["data"]["text"].encode()
    at = loc.offset + raw.index(text)
    seg = log_dir / f"{loc.segment:020d}.seg"
    b = bytearray(seg.read_bytes())
    b[at] ^= 0x01
    seg.write_bytes(bytes(b))


def _populate(log_dir: Path, n: int, *, checkpoint_on_close: bool = True) -> None:
    with LogWriter(log_dir, [KEY], checkpoint_on_close=checkpoint_on_close) as w:
        for i in range(n):
            w.append("note.added", {"text": f"entry number {i}"})


@pytest.mark.parametrize(
    "where",
    [
        "last entry",  # covered by the newest checkpoint
        "entry after the newest checkpoint",
        "middle entry, index lost",
        "newest checkpoint",
    ],
)
def test_a_writer_refuses_to_append_after_damage(log_dir: Path, where: str) -> None:
    _populate(log_dir, 6)
    if where == "last entry":
        _flip_in_entry(log_dir, 6)
    elif where == "entry after the newest checkpoint":
        _populate(log_dir, 3, checkpoint_on_close=False)
        _flip_in_entry(log_dir, 8)
    elif where == "middle entry, index lost":
        _flip_in_entry(log_dir, 3)
        shutil.rmtree(log_dir / "index")
    else:
        cp = log_dir / "checkpoints" / f"{7:020d}"
        b = bytearray(cp.read_bytes())
        b[-10] ^= 0x01
        cp.write_bytes(bytes(b))
    with pytest.raises(VerificationError):
        verify_log(log_dir, policy=TRUST_GENESIS)
    before = tree_hashes(log_dir, skip=("index",))
    with pytest.raises(VerificationError) as info:
        LogWriter(log_dir, [KEY])
    assert info.value.exit_code == 8
    assert info.value.check in ("log_diverged", "checkpoint.signature", "entry.prev", "segment.damage")
    assert tree_hashes(log_dir, skip=("index",)) == before


def test_damage_covered_by_the_newest_checkpoint_is_never_signed_over(log_dir: Path) -> None:
    """A flipped byte in an older entry, the index intact: the writer carries on from the true
    leaves (the checkpoint already commits to them) and every root it signs is the true root;
    `log verify` reports the damaged bytes."""
    _populate(log_dir, 6)
    with Log(log_dir) as log:
        true_root = log.root(7)
    _flip_in_entry(log_dir, 3)
    with LogWriter(log_dir, [KEY]) as w:
        cp, _ = w.checkpoint()
    assert (cp.size, cp.root) == (7, true_root)
    with pytest.raises(VerificationError) as info:
        verify_log(log_dir, policy=TRUST_GENESIS)
    assert info.value.seq == 3


def test_the_tail_is_rehashed_before_a_checkpoint_is_signed(log_dir: Path) -> None:
    w = LogWriter(log_dir, [KEY], checkpoint_on_close=False)
    for i in range(4):
        w.append("note.added", {"text": f"entry number {i}"})
    _flip_in_entry(log_dir, 2)  # same length, in place: no reload notices it
    with pytest.raises(VerificationError) as info:
        w.checkpoint()
    diverged(info)
    assert info.value.seq == 2
    w.close()
    assert checkpoint_sizes(log_dir) == [1]


def test_no_checkpoint_past_genesis_is_refused(log_dir: Path) -> None:
    _populate(log_dir, 3)
    for p in (log_dir / "checkpoints").iterdir():
        p.unlink()
    with pytest.raises(VerificationError) as info:
        LogWriter(log_dir, [KEY])
    diverged(info)
    with pytest.raises(VerificationError) as vinfo:
        verify_log(log_dir, policy=TRUST_GENESIS)
    assert vinfo.value.check == "checkpoint.missing"


# -- the high-water mark -----------------------------------------------------------------


def test_the_high_water_mark_follows_checkpoints_and_holds_the_log(log_dir: Path, tmp_path: Path) -> None:
    hw = tmp_path / "state" / "checkpoint"
    hw2 = tmp_path / "elsewhere" / "copy"
    with LogWriter(log_dir, [KEY], high_water=[hw, hw2]) as w:
        for i in range(5):
            w.append("note.added", {"i": i})
    mark = read_high_water(hw)
    assert mark is not None and mark.body().size == 6 and hw2.read_bytes() == mark.note
    # Roll log/ back entirely (segment and checkpoints): only the mark remembers.
    snapshot = tmp_path / "old"
    shutil.copytree(log_dir, snapshot)
    with LogWriter(log_dir, [KEY], high_water=[hw, hw2]) as w:
        w.append("note.added", {"i": 5})
    assert read_high_water(hw).body().size == 7  # type: ignore[union-attr]
    shutil.rmtree(log_dir)
    shutil.copytree(snapshot, log_dir)
    with pytest.raises(VerificationError) as info:
        LogWriter(log_dir, [KEY], high_water=[hw])
    diverged(info)
    with pytest.raises(VerificationError) as vinfo:
        verify_log(log_dir, high_water=[read_high_water(hw2)], policy=TRUST_GENESIS)  # type: ignore[list-item]
    assert vinfo.value.check == "high_water.size"
    verify_log(log_dir, policy=TRUST_GENESIS)  # without the mark, the old copy is a consistent log


def test_the_high_water_mark_never_moves_backwards(log_dir: Path, tmp_path: Path) -> None:
    hw = tmp_path / "hw"
    a = LogWriter(log_dir, [KEY], high_water=[hw], checkpoint_on_close=False)
    a.append("note.added", {"w": "a"})
    a.append("note.added", {"w": "a"})
    a.checkpoint()
    b = LogWriter(log_dir, [KEY], high_water=[hw], checkpoint_on_close=False)
    assert b.checkpoint()[0].size == 3  # the same size: nothing new
    a.close()
    b.close()
    from mnemolog.eventlog.store.checkpoints import write_high_water

    old = (log_dir / "checkpoints" / f"{1:020d}").read_bytes()
    assert write_high_water(hw, old, 1) is False
    assert read_high_water(hw).body().size == 3  # type: ignore[union-attr]


# -- listeners, rotation elsewhere, index failures ---------------------------------------


def test_checkpoint_listeners_get_every_note_and_cannot_break_the_writer(log_dir: Path) -> None:
    got: list[bytes] = []

    def broken(_: bytes) -> None:
        raise RuntimeError("witness down")

    with LogWriter(log_dir, [KEY], checkpoint_listeners=[broken, got.append]) as w:
        w.append("note.added", {})
        _, raw = w.checkpoint()
        w.append("note.added", {})
    assert got[0] == raw and len(got) == 2
    assert any("witness down" in m for m in w.warnings)


def test_a_long_lived_writer_follows_a_rotation_made_elsewhere(log_dir: Path) -> None:
    held = [KEY]
    server = LogWriter(log_dir, [KEY], key_loader=lambda: list(held), checkpoint_on_close=False)
    server.append("note.added", {"before": True})
    with LogWriter(log_dir, [KEY]) as cli:
        cli.rotate_key(KEY2)
    held.append(KEY2)  # the home now holds the new key
    r = server.append("note.added", {"after": True})
    assert server.key.kid == KEY2.kid
    server.close()
    with Log(log_dir) as log:
        assert log.entry(r.seq).kid == KEY2.kid
    verify_log(log_dir, policy=TRUST_GENESIS)


def test_a_writer_without_the_rotated_key_says_what_to_do(log_dir: Path) -> None:
    server = LogWriter(log_dir, [KEY], key_loader=lambda: [KEY], checkpoint_on_close=False)
    with LogWriter(log_dir, [KEY]) as cli:
        cli.rotate_key(KEY2)
    before = tree_hashes(log_dir, skip=("index",))
    with pytest.raises(SignerError) as info:
        server.append("note.added", {})
    assert "rotated by another process" in info.value.message and "restart" in info.value.message
    server.close()
    assert tree_hashes(log_dir, skip=("index",)) == before


@pytest.mark.parametrize("mode", ["fsync", "group"])
def test_an_index_failure_after_the_entries_are_durable_is_a_warning(
    log_dir: Path, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = IndexWriter.append
    calls = {"n": 0}

    def failing(self: IndexWriter, records: object) -> None:
        calls["n"] += 1
        if calls["n"] == 2:
            # Half a batch's nodes reach the disk, then the disk is full.
            os.write(self._wfd("tree-00"), b"\x00" * 17)
            raise OSError(28, "No space left on device")
        real(self, records)  # type: ignore[arg-type]

    monkeypatch.setattr(IndexWriter, "append", failing)
    with LogWriter(log_dir, [KEY], durability=Durability(mode)) as w:  # type: ignore[arg-type]
        r1 = w.append("note.added", {"i": 1})
        r2 = w.append("note.added", {"i": 2})  # the index write fails: still acknowledged
        r3 = w.append("note.added", {"i": 3})  # the index is rebuilt first
        assert [r.seq for r in (r1, r2, r3)] == [1, 2, 3]
        assert any("durable" in m and "index" in m for m in w.take_warnings())
    with Log(log_dir) as log:
        assert log.indexed == 4 and [e.seq for e in log.iter_entries()] == [0, 1, 2, 3]
    verify_log(log_dir, policy=TRUST_GENESIS)


def test_an_append_racing_close_is_refused_never_left_waiting(log_dir: Path) -> None:
    """The append passes its 'closed?' check, close() runs to the end, then the append queues:
    before the fix the queued batch had no committer and its waiter hung for good."""
    w = LogWriter(log_dir, [KEY], durability=Durability("group"), checkpoint_on_close=False)
    gc = w._group
    assert gc is not None
    at_gate, closed = threading.Event(), threading.Event()
    real_cond = gc._cond

    class Gate:
        """The condition variable, with the appending thread held just before it takes it."""

        def __enter__(self) -> bool:
            if threading.current_thread().name == "appender":
                at_gate.set()
                closed.wait(10)
            return real_cond.__enter__()

        def __exit__(self, *exc: object) -> None:
            real_cond.__exit__(*exc)

        def __getattr__(self, name: str) -> object:
            return getattr(real_cond, name)

    gc._cond = Gate()  # type: ignore[assignment]
    outcome: list[object] = []

    def appender() -> None:
        try:
            outcome.append(w.submit("note.added", {"late": True}))
        except StorageError as exc:
            outcome.append(exc)

    t = threading.Thread(target=appender, name="appender")
    t.start()
    assert at_gate.wait(10)
    w.close()
    closed.set()
    t.join(10)
    assert not t.is_alive()
    (res,) = outcome
    if isinstance(res, group_commit.Ticket):
        # Queued after the committer left: this wait would never end.
        assert res.done(), "an append was queued after close() and will never be committed"
    else:
        assert isinstance(res, StorageError) and "closed" in res.message


def test_appends_and_close_under_load_all_resolve(log_dir: Path) -> None:
    for _ in range(10):
        w = LogWriter(log_dir, [KEY], durability=Durability("group", max_entries=8, max_ms=1))
        tickets: list[group_commit.Ticket] = []
        stop = threading.Event()

        def pump(
            tickets: list[group_commit.Ticket] = tickets, w: LogWriter = w, stop: threading.Event = stop
        ) -> None:
            while not stop.is_set() and len(tickets) < 300:
                try:
                    tickets.append(w.submit("note.added", {"x": 1}))
                except StorageError:
                    return

        threads = [threading.Thread(target=pump) for _ in range(3)]
        for t in threads:
            t.start()
        time.sleep(0.005)
        w.close()
        stop.set()
        for t in threads:
            t.join(10)
        for tk in tickets:
            tk.result(timeout=10)
    verify_log(log_dir, policy=TRUST_GENESIS)
    assert log_files(log_dir)


def test_an_accepted_rollback_sets_mismatched_checkpoints_aside(log_dir: Path, tmp_path: Path) -> None:
    hw = tmp_path / "hw"
    with LogWriter(log_dir, [KEY], high_water=[hw]) as w:
        for i in range(6):
            w.append("note.added", {"i": i})
            w.checkpoint()
    cut_after(log_dir, 4)  # checkpoints 5..7 now cover entries the log lost
    with pytest.raises(VerificationError):
        LogWriter(log_dir, [KEY], high_water=[hw])
    with LogWriter(log_dir, [KEY], high_water=[hw], accept_rollback=True) as w:
        assert sorted(Path(p).name for p in w.set_aside) == [f"{n:020d}" for n in (5, 6, 7)]
        w.append("log.rollback_accepted", {"old_size": 7, "new_size": 4})
        w.checkpoint()
    assert checkpoint_sizes(log_dir) == [1, 2, 3, 4, 5]
    assert read_high_water(hw).body().size == 5  # type: ignore[union-attr]
    assert len(list((log_dir / "rolled-back").rglob("0*"))) == 3
    verify_log(log_dir, high_water=[read_high_water(hw)], policy=TRUST_GENESIS)  # type: ignore[list-item]
