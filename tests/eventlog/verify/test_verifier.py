"""`verify_log`: every single-byte and single-entry change anywhere in a small log is caught.

The small log has two segments, a key rotation and three checkpoints (one
signed by the rotated key). Every byte position of every segment and
checkpoint file is changed (two ways), dropped, duplicated and swapped with
its neighbour; every entry is dropped, duplicated and swapped; each result
must fail verification with a VerificationError (never another exception),
in full and in hashes-only mode, whatever state the index is in.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import cbor2
import pytest

from mnemolog.eventlog.errors import VerificationError
from mnemolog.eventlog.store.segments import split_items
from mnemolog.eventlog.store.writer import Durability
from mnemolog.eventlog.verify import hinted as VH
from mnemolog.eventlog.verify import pool as VP
from mnemolog.eventlog.verify import verifier as V
from mnemolog.eventlog.verify.trust import TRUST_GENESIS, PinnedKey
from mnemolog.eventlog.verify.verifier import verify_log
from tests.eventlog.logkit import log_files, make_log, seeded_key, tree_hashes
from tests.support.cli import Cli

ROTATED = seeded_key("rotated-key", 8)


@pytest.fixture(scope="module")
def small_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("small") / "log"
    make_log(d, entries=4, rotate_to=ROTATED, rotate_after=2, segment_bytes=500, checkpoint_every=2)
    files = log_files(d)
    assert [f.name for f in files if f.suffix == ".seg"] == [
        "00000000000000000000.seg",
        "00000000000000000003.seg",
    ]
    assert len(files) == 5
    r = verify_log(d, processes=1, policy=TRUST_GENESIS)
    assert (r.entries, r.keys, r.checkpoints, r.index_hint) == (6, 2, 3, "used")
    return d


def byte_mutations(data: bytes) -> Iterator[tuple[str, bytes]]:
    for i in range(len(data)):
        yield f"flip1@{i}", data[:i] + bytes([data[i] ^ 0x01]) + data[i + 1 :]
        yield f"flipff@{i}", data[:i] + bytes([data[i] ^ 0xFF]) + data[i + 1 :]
        yield f"drop@{i}", data[:i] + data[i + 1 :]
        yield f"dup@{i}", data[: i + 1] + data[i:]
        if i + 1 < len(data) and data[i] != data[i + 1]:
            yield f"swap@{i}", data[:i] + data[i + 1 : i + 2] + data[i : i + 1] + data[i + 2 :]


def must_fail(log_dir: Path, what: str, **kw: object) -> VerificationError:
    kw.setdefault("processes", 1)
    try:
        verify_log(log_dir, **{"policy": TRUST_GENESIS, **kw})  # type: ignore[arg-type]
    except VerificationError as exc:
        return exc
    except Exception as exc:  # pragma: no cover - the point of the test
        raise AssertionError(f"{what}: {type(exc).__name__} instead of a VerificationError: {exc}") from exc
    raise AssertionError(f"{what}: verification passed")


@pytest.mark.slow
def test_every_byte_change_is_detected(small_log: Path, tmp_path: Path) -> None:
    d = tmp_path / "log"
    shutil.copytree(small_log, d)
    checks: dict[str, int] = {}
    n = 0
    for f in log_files(d):
        original = f.read_bytes()
        rel = f"{f.parent.name}/{f.name}"
        for label, mutated in byte_mutations(original):
            f.write_bytes(mutated)
            exc = must_fail(d, f"{rel} {label}")
            checks[exc.check] = checks.get(exc.check, 0) + 1
            exc2 = must_fail(d, f"{rel} {label} (hashes only)", hashes_only=True)
            assert exc2.check
            n += 1
        f.write_bytes(original)
    verify_log(d, processes=1, policy=TRUST_GENESIS)
    assert n > 9000
    # The failures are named, and many different checks fire.
    assert {"entry.decode", "entry.signature", "checkpoint.decode", "checkpoint.signature"} <= set(checks)


def _segment_items(path: Path) -> list[bytes]:
    buf = path.read_bytes()
    split = split_items(buf)
    assert split.tail is None
    return [buf[s:e] for s, e, _ in split.items]


def test_every_entry_drop_duplicate_swap_is_detected(small_log: Path, tmp_path: Path) -> None:
    d = tmp_path / "log"
    shutil.copytree(small_log, d)
    segs = [f for f in log_files(d) if f.suffix == ".seg"]
    cases = 0
    for si, seg in enumerate(segs):
        items = _segment_items(seg)
        original = seg.read_bytes()
        variants: list[tuple[str, list[bytes]]] = []
        for k in range(len(items)):
            variants.append((f"drop {k}", items[:k] + items[k + 1 :]))
            variants.append((f"dup {k}", items[: k + 1] + items[k:]))
            if k + 1 < len(items):
                variants.append((f"swap {k}", [*items[:k], items[k + 1], items[k], *items[k + 2 :]]))
        variants.append(("reverse", items[::-1]))
        for label, new in variants:
            seg.write_bytes(b"".join(new))
            must_fail(d, f"{seg.name} {label}")
            must_fail(d, f"{seg.name} {label} (hashes only)", hashes_only=True)
            cases += 1
        seg.write_bytes(original)
        if si + 1 < len(segs):
            # Swap the last entry of this segment with the first of the next.
            nxt = segs[si + 1]
            nxt_items, nxt_original = _segment_items(nxt), nxt.read_bytes()
            seg.write_bytes(b"".join([*items[:-1], nxt_items[0]]))
            nxt.write_bytes(b"".join([items[-1], *nxt_items[1:]]))
            must_fail(d, "swap across segments")
            seg.write_bytes(original)
            nxt.write_bytes(nxt_original)
    assert cases >= 16
    verify_log(d, processes=1, policy=TRUST_GENESIS)


def test_segment_files_dropped_renamed_or_merged(small_log: Path, tmp_path: Path) -> None:
    d = tmp_path / "log"
    shutil.copytree(small_log, d)
    seg0, seg3 = d / "00000000000000000000.seg", d / "00000000000000000003.seg"
    b0, b3 = seg0.read_bytes(), seg3.read_bytes()
    # The layout of entries into segments is not signed: one segment holding all is fine.
    seg3.unlink()
    seg0.write_bytes(b0 + b3)
    verify_log(d, processes=1, policy=TRUST_GENESIS)
    # A truncated log (the last segment gone) is caught by the checkpoint that covers it.
    seg0.write_bytes(b0)
    assert must_fail(d, "last segment dropped").check == "log.truncated"
    seg3.write_bytes(b3)
    # Misnamed segments.
    seg3.rename(d / "00000000000000000004.seg")
    assert must_fail(d, "misnamed segment").check == "segments.name"
    (d / "00000000000000000004.seg").rename(seg3)
    (d / "00000000000000000006.seg").write_bytes(b"")
    verify_log(
        d, processes=1, policy=TRUST_GENESIS
    )  # an empty last segment (a roll, then a crash) is harmless
    (d / "00000000000000000006.seg").unlink()
    (d / "00000000000000000009.seg").write_bytes(b3)
    assert must_fail(d, "stray segment").check == "segments.name"
    (d / "00000000000000000009.seg").unlink()
    seg0.unlink()
    assert must_fail(d, "first segment gone").check == "segments.name"


def test_truncation_is_detected_against_the_last_checkpoint(small_log: Path, tmp_path: Path) -> None:
    d = tmp_path / "log"
    shutil.copytree(small_log, d)
    seg3 = d / "00000000000000000003.seg"
    items = _segment_items(seg3)
    for keep in range(len(items)):
        seg3.write_bytes(b"".join(items[:keep]))
        exc = must_fail(d, f"kept {keep} entries of the last segment")
        assert exc.check == "log.truncated" and exc.expected == 6 and exc.found == 3 + keep
        assert must_fail(d, "hashes only", hashes_only=True).check == "log.truncated"
    # Cut mid-entry: a torn tail, and still short of the checkpoint.
    seg3.write_bytes(b"".join(items)[:-7])
    assert must_fail(d, "torn").check == "log.truncated"


def test_checkpoint_files(small_log: Path, tmp_path: Path) -> None:
    d = tmp_path / "log"
    shutil.copytree(small_log, d)
    cps = d / "checkpoints"
    (cps / "00000000000000000003").rename(cps / "00000000000000000004")
    assert must_fail(d, "renamed checkpoint").check in (
        "checkpoint.size",
        "checkpoint.root",
        "checkpoint.signer",
    )
    (cps / "00000000000000000004").rename(cps / "00000000000000000003")
    # A checkpoint signed by the key of another size: size 6 needs the rotated key.
    (cps / "00000000000000000006").write_bytes((cps / "00000000000000000003").read_bytes())
    must_fail(d, "swapped checkpoint")
    shutil.copytree(small_log / "checkpoints", cps, dirs_exist_ok=True)
    (cps / "notes.txt").write_text("hello")
    assert must_fail(d, "stray file").check == "checkpoint.name"
    (cps / "notes.txt").unlink()
    (cps / ".00000000000000000007.123.tmp").write_bytes(b"partial")  # an interrupted atomic write
    verify_log(d, processes=1, policy=TRUST_GENESIS)
    (cps / "00000000000000000000").write_bytes(b"")
    assert must_fail(d, "size 0").check == "checkpoint.size"


@pytest.mark.parametrize("index_state", ["deleted", "empty", "scrambled", "shifted", "foreign"])
def test_the_index_is_only_a_hint(small_log: Path, tmp_path: Path, index_state: str) -> None:
    d = tmp_path / "log"
    shutil.copytree(small_log, d)
    idx = d / "index"
    rng = random.Random(index_state)
    if index_state == "deleted":
        shutil.rmtree(idx)
    elif index_state == "empty":
        for p in idx.iterdir():
            p.write_bytes(b"")
    elif index_state == "scrambled":
        for p in idx.iterdir():
            p.write_bytes(bytes(rng.randrange(256) for _ in range(p.stat().st_size)))
    elif index_state == "shifted":
        loc = idx / "loc"
        loc.write_bytes(loc.read_bytes()[20:] + loc.read_bytes()[:20])
    else:
        other = tmp_path / "other"
        make_log(other, entries=7)
        shutil.rmtree(idx)
        shutil.copytree(other / "index", idx)
    before = tree_hashes(d)
    r = verify_log(d, processes=1, policy=TRUST_GENESIS)
    assert r.entries == 6 and r.index_hint in ("absent", "disagreed", "used")
    if index_state != "empty":
        assert r.index_hint != "used"
    # And tampering is still found, whatever the hint says.
    seg = d / "00000000000000000003.seg"
    b = seg.read_bytes()
    seg.write_bytes(b[:100] + bytes([b[100] ^ 1]) + b[101:])
    must_fail(d, f"tampered with index {index_state}")
    must_fail(d, f"tampered with index {index_state}", use_index_hint=False)
    seg.write_bytes(b)
    assert tree_hashes(d) == before  # verify never writes


def test_cli_reports_exit_code_8(cli: Cli, small_log: Path, tmp_path: Path) -> None:
    from tests.eventlog.logkit import seeded_key as key

    home = tmp_path / "home"
    (home / "keys").mkdir(parents=True)
    shutil.copytree(small_log, home / "log")
    # A log the home holds no key of is a foreign log, whatever its bytes say.
    foreign = cli(home, "log", "verify")
    assert foreign.code == 8 and "check=trust.genesis_key" in foreign.stderr, foreign.stderr
    (home / "keys" / "genesis.pub").write_text(key().verifier.vkey() + "\n")
    ok = cli(home, "log", "verify")
    assert ok.code == 0, ok.stderr
    assert "trust anchor: home" in ok.stdout
    rng = random.Random(8)
    files = log_files(home / "log")
    for f in rng.sample(files, 3):
        original = f.read_bytes()
        i = rng.randrange(len(original))
        f.write_bytes(original[:i] + bytes([original[i] ^ 0x20]) + original[i + 1 :])
        for as_json in (False, True):
            p = cli(home, "log", "verify", json=as_json)
            assert p.code == 8, (f.name, i, p.stdout, p.stderr)
            out = p.stdout if as_json else p.stderr
            assert "check" in out
        f.write_bytes(original)


# -- the first failure, by lowest seq, whichever strategy runs -------------------


BIG = 6000


@pytest.fixture(autouse=True)
def small_thresholds(monkeypatch: pytest.MonkeyPatch) -> None:
    """Worker pools and many chunks on a log of a few thousand entries (the defaults want more)."""
    monkeypatch.setattr(VH, "PARALLEL_MIN_ENTRIES", 1000)
    monkeypatch.setattr(VH, "CHUNK_ENTRIES", 300)
    monkeypatch.setattr(V, "SEQ_CHUNK_ENTRIES", 300)
    monkeypatch.setattr(V, "SERIAL_BELOW", 16)


@pytest.fixture(scope="module")
def big_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("big") / "log"
    make_log(
        d,
        entries=BIG,
        rotate_to=ROTATED,
        rotate_after=2000,
        segment_bytes=150_000,
        checkpoint_every=1500,
        durability=Durability("group"),
        payload=lambda i: {"i": i, "pad": "x" * (i % 50)},
    )
    return d


def _entry_span(log_dir: Path, seq: int) -> tuple[Path, int, int]:
    """(segment, start, end) of entry `seq`, found without the index."""
    from mnemolog.eventlog.store.segments import list_segments

    segs = list_segments(log_dir)
    for i, (first, path) in enumerate(segs):
        nxt = segs[i + 1][0] if i + 1 < len(segs) else None
        if seq >= first and (nxt is None or seq < nxt):
            items = split_items(path.read_bytes()).items
            s, e, _ = items[seq - first]
            return path, s, e
    raise AssertionError(seq)


def _corrupt_signature(log_dir: Path, seq: int) -> None:
    path, s, e = _entry_span(log_dir, seq)
    buf = bytearray(path.read_bytes())
    m = cbor2.loads(bytes(buf[s:e]))
    at = bytes(buf[s:e]).index(m["sig"]) + s
    buf[at + 10] ^= 1
    path.write_bytes(bytes(buf))


def _break_chain(log_dir: Path, seq: int) -> None:
    path, s, e = _entry_span(log_dir, seq)
    buf = bytearray(path.read_bytes())
    m = cbor2.loads(bytes(buf[s:e]))
    at = bytes(buf[s:e]).index(m["prev"]) + s
    buf[at] ^= 1
    path.write_bytes(bytes(buf))


STRATEGIES = [
    {"processes": 1},
    {"processes": 2},
    {"processes": 2, "use_index_hint": False},
    {"processes": 1, "use_index_hint": False},
]


@pytest.mark.slow
def test_big_log_verifies_the_same_every_way(big_log: Path) -> None:
    roots = set()
    for kw in [*STRATEGIES, {"hashes_only": True}, {"hashes_only": True, "use_index_hint": False}]:
        r = verify_log(big_log, policy=TRUST_GENESIS, **kw)  # type: ignore[arg-type]
        assert r.entries == BIG + 2 and r.keys == 2
        roots.add(r.root)
        if kw.get("use_index_hint", True):
            assert r.index_hint == "used" and r.hinted == BIG + 2
    assert len(roots) == 1
    r = verify_log(big_log, processes=2, policy=TRUST_GENESIS)
    assert r.processes == 2 and r.segments > 5


@pytest.mark.slow
@pytest.mark.parametrize(
    ("damage", "want_seq", "want_check"),
    [
        ([("sig", 3000), ("chain", 4500)], 3000, "entry.signature"),
        ([("sig", 4500), ("chain", 3100)], 3100, "entry.prev"),
        ([("sig", 5900)], 5900, "entry.signature"),
        ([("sig", 1999), ("sig", 2001)], 1999, "entry.signature"),
        ([("sig", 2002)], 2002, "entry.signature"),
        ([("chain", 2)], 2, "entry.prev"),
    ],
)
def test_first_failure_by_lowest_seq(
    big_log: Path, tmp_path: Path, damage: list[tuple[str, int]], want_seq: int, want_check: str
) -> None:
    d = tmp_path / "log"
    shutil.copytree(big_log, d)
    for kind, seq in damage:
        (_corrupt_signature if kind == "sig" else _break_chain)(d, seq)
    for kw in STRATEGIES:
        exc = must_fail(d, f"{damage} {kw}", **kw)
        assert (exc.seq, exc.check) == (want_seq, want_check), kw


def test_pool_start_method_is_chosen_safely() -> None:
    pool = VP.make_pool(2)
    assert pool is not None
    try:
        assert pool.submit(os.getpid).result() != os.getpid()
    finally:
        pool.shutdown()
    assert VP.thread_count() >= 1


def test_verify_from_a_script_read_from_stdin(big_log: Path) -> None:
    """A __main__ that forkserver cannot re-import must not break verification."""
    code = (
        "import threading, time\n"
        "threading.Thread(target=time.sleep, args=(5,), daemon=True).start()\n"  # no fork with threads
        "from pathlib import Path\n"
        "from mnemolog.eventlog.verify.trust import TRUST_GENESIS\n"
        "from mnemolog.eventlog.verify.verifier import verify_log\n"
        f"r = verify_log(Path({str(big_log)!r}), processes=2, policy=TRUST_GENESIS)\n"
        "print(r.entries, r.processes)\n"
    )
    p = subprocess.run(
        [sys.executable, "-"], input=code, capture_output=True, text=True, check=False, timeout=120
    )
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == [str(BIG + 2), "1"]


def test_trust_anchor(small_log: Path) -> None:
    from tests.eventlog.logkit import seeded_key as key

    r = verify_log(small_log, policy=PinnedKey(key().verifier))  # the genesis key
    assert r.trust["anchor"] == "pinned" and r.trust["epoch_from_seq"] == 0
    r = verify_log(small_log, policy=PinnedKey(ROTATED.verifier))  # a later key of the history
    assert r.trust["epoch_from_seq"] == 4
    exc = must_fail(small_log, "foreign anchor", policy=PinnedKey(key("stranger", 99).verifier))
    assert exc.check == "trust.key"
    # The same public key under another name is another key (as verify-bundle has always said).
    exc = must_fail(small_log, "renamed", policy=PinnedKey(key("renamed").verifier))
    assert exc.check == "trust.key"
    assert verify_log(small_log, policy=TRUST_GENESIS).trust["anchor"] == "genesis"


def test_oversized_payloads_are_refused(tmp_path: Path) -> None:
    from mnemolog.eventlog.errors import DecodeError
    from mnemolog.eventlog.store.segments import MAX_ENTRY_BYTES
    from mnemolog.eventlog.store.writer import LogWriter

    d = tmp_path / "log"
    keys = make_log(d, entries=1)
    with LogWriter(d, keys) as w:
        with pytest.raises(DecodeError):
            w.append("note.added", {"blob": b"x" * MAX_ENTRY_BYTES})
        w.append("note.added", {"blob": b"x" * (MAX_ENTRY_BYTES - 8192)})
    verify_log(d, processes=1, policy=TRUST_GENESIS)
