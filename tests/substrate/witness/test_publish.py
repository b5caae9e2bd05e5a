"""`log publish`: incremental, never rewriting a full tile, refusing another log's or a forked directory."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from mnemolog.eventlog.errors import VerificationError
from mnemolog.eventlog.witness import tiles
from mnemolog.substrate.home import Home
from mnemolog.substrate.witness.publish import publish


def grow(home: Home, n: int, big: int = 0) -> None:
    with home.open_writer(periodic_checkpoints=False) as w:
        if n:
            w.append_many([("note.test", {"i": i}, 1) for i in range(n)])
        for j in range(big):
            w.append("note.test", {"big": "z" * (70_000 + j)})


def files(d: Path) -> dict[str, tuple[int, int]]:
    return {
        str(p.relative_to(d)): (p.stat().st_ino, p.stat().st_mtime_ns) for p in d.rglob("*") if p.is_file()
    }


def test_a_second_publish_writes_only_new_files_and_keeps_full_tiles(make_home, tmp_path: Path) -> None:
    home = make_home()
    grow(home, 300)
    pub = tmp_path / "pub"
    r1 = publish(home.log_dir, pub)
    before = files(pub)
    full = [k for k in before if k in ("tile/0/000", "tile/entries/000")]
    assert len(full) == 2
    r2 = publish(home.log_dir, pub)
    assert r2.files_written == 0 and files(pub) == before  # nothing new: nothing touched
    grow(home, 300)
    r3 = publish(home.log_dir, pub)
    after = files(pub)
    for k in full:
        assert after[k] == before[k], k  # the same inode and mtime: never rewritten
    assert set(before) <= set(after)  # older partial tiles stay for readers of the older checkpoint
    assert r3.size > r1.size and r3.previous_size == r1.size
    assert f"tile/0/{tiles.encode_index(r3.size // 256)}.p/{r3.size % 256}" in after


def test_an_entry_over_64_kib_is_published_whole_behind_a_marker(make_home, tmp_path: Path) -> None:
    home = make_home()
    grow(home, 2, big=1)
    pub = tmp_path / "pub"
    r = publish(home.log_dir, pub)
    with home.open_log() as log:
        seq = log.size - 1
        raw = log.raw(seq)
    assert len(raw) > 65_535 and r.large_entries == 1
    slots = tiles.decode_bundle((pub / tiles.entries_path(0, r.size)).read_bytes(), r.size)
    assert tiles.large_slot_length(slots[seq]) == len(raw)
    assert (pub / tiles.large_entry_path(seq)).read_bytes() == raw
    leaves = tiles.split_tile((pub / tiles.tile_path(0, 0, r.size)).read_bytes(), r.size)
    import hashlib

    assert leaves[seq] == hashlib.sha256(b"\x00" + raw).digest()  # the tree proves the real bytes


def test_publishing_another_log_into_the_directory_is_refused(make_home, tmp_path: Path) -> None:
    a, b = make_home("a"), make_home("b")
    pub = tmp_path / "pub"
    publish(a.log_dir, pub)
    before = files(pub)
    with pytest.raises(VerificationError) as e:
        publish(b.log_dir, pub)
    assert e.value.check == "publish.origin" and files(pub) == before


def test_publishing_a_fork_or_a_rolled_back_copy_is_refused(make_home, tmp_path: Path) -> None:
    home = make_home()
    grow(home, 10)
    fork = tmp_path / "fork"
    shutil.copytree(home.root, fork, ignore=shutil.ignore_patterns(".lock", ".want-*"))
    grow(home, 5)
    grow(Home(fork), 7)
    pub = tmp_path / "pub"
    publish(home.log_dir, pub)
    with pytest.raises(VerificationError) as e:
        publish(Home(fork).log_dir, pub)
    assert e.value.check == "publish.fork"
    behind = tmp_path / "behind"
    shutil.copytree(home.root, behind, ignore=shutil.ignore_patterns(".lock", ".want-*"))
    grow(home, 3)
    publish(home.log_dir, pub)
    with pytest.raises(VerificationError) as e:
        publish(Home(behind).log_dir, pub)
    assert e.value.check == "publish.rollback"


def test_publish_needs_no_private_key_and_no_writer_lock(make_home, tmp_path: Path) -> None:
    home = make_home()
    grow(home, 5)
    for p in (home.root / "keys").glob("*.key"):
        p.unlink()  # a publishing host holds no signing key
    r = publish(home.log_dir, tmp_path / "pub")
    assert r.size == 6


def test_publish_runs_beside_a_live_writer(make_home, tmp_path: Path) -> None:
    home = make_home()
    grow(home, 5)
    with home.open_writer(periodic_checkpoints=False) as w:
        w.append("note.test", {"i": "during"})
        r = publish(home.log_dir, tmp_path / "pub")  # the writer holds its lock throughout
    assert r.size == 6  # the newest checkpoint's tree, not the unsigned entry after it
