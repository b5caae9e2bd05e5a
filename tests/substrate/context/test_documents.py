"""Reading documents for ingest: discovery, and hostile files (FIFOs, devices, huge, bad bytes)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from mnemolog.projections.context.decode import DocumentEncodingError, DocumentRefused
from mnemolog.substrate.context.documents import discover, read_bytes, read_document


def tree(root: Path) -> None:
    (root / "a").mkdir(parents=True)
    (root / "a" / "one.md").write_text("# One\nbody")
    (root / "a" / "two.txt").write_text("two")
    (root / "a" / "skip.pdf").write_bytes(b"%PDF")
    (root / ".git").mkdir()
    (root / ".git" / "x.md").write_text("hidden dir")
    (root / ".hidden.md").write_text("hidden file")
    (root / "z.md").write_text("z")
    (root / "outside").mkdir()
    (root / "link.md").symlink_to(root / "z.md")
    (root / "dirlink").symlink_to(root / "a", target_is_directory=True)


def test_discover_walks_in_order_with_globs_and_skips_links_and_hidden(tmp_path: Path) -> None:
    tree(tmp_path)
    found, skipped = discover([tmp_path])
    assert [f.name for f in found] == ["a/one.md", "a/two.txt", "z.md"]
    assert all(f.root == str(tmp_path.resolve()) for f in found)
    assert sorted((Path(s.path).name, s.reason) for s in skipped) == [
        ("dirlink", "symlink"),
        ("link.md", "symlink"),
    ]
    found, _ = discover([tmp_path], globs=["*.txt"])
    assert [f.name for f in found] == ["a/two.txt"]


def test_a_named_file_is_taken_whatever_its_name_and_links_are_followed(tmp_path: Path) -> None:
    tree(tmp_path)
    found, _ = discover([tmp_path / "link.md", tmp_path / "a" / "skip.pdf", tmp_path / "z.md"])
    assert [f.path for f in found] == [
        str((tmp_path / "z.md").resolve()),
        str((tmp_path / "a/skip.pdf").resolve()),
    ]


def test_a_missing_path_is_refused(tmp_path: Path) -> None:
    with pytest.raises(DocumentRefused) as exc:
        discover([tmp_path / "nope"])
    assert exc.value.details["reason"] == "missing" and exc.value.exit_code == 65


def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.md"
    os.mkfifo(fifo)
    result: list[BaseException] = []

    def run() -> None:
        try:
            read_document(str(fifo))
        except DocumentRefused as exc:
            result.append(exc)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(10)
    assert not t.is_alive(), "read_document blocked on a FIFO"
    assert isinstance(result[0], DocumentRefused)
    assert result[0].details["reason"] == "not_regular" and "FIFO" in result[0].message
    found, _ = discover([tmp_path])
    assert [f.name for f in found] == ["pipe.md"]  # discovered, then refused when read


def test_devices_and_directories_are_refused(tmp_path: Path) -> None:
    with pytest.raises(DocumentRefused, match="character device") as exc:
        read_document("/dev/zero")
    assert exc.value.details["reason"] == "not_regular"
    with pytest.raises(DocumentRefused, match="directory"):
        read_bytes(str(tmp_path), 10)


def test_a_huge_file_is_skipped_by_its_size_before_reading(tmp_path: Path) -> None:
    big = tmp_path / "big.md"
    with open(big, "wb") as fh:
        fh.truncate(64 << 30)  # sparse: 64 GiB that are never read
    with pytest.raises(DocumentRefused) as exc:
        read_document(str(big))
    assert exc.value.details["reason"] == "too_large"
    assert exc.value.details["found"] == 64 << 30 and "skipped" in exc.value.message
    (tmp_path / "edge.md").write_bytes(b"x" * 100)
    assert len(read_bytes(str(tmp_path / "edge.md"), 100)) == 100
    with pytest.raises(DocumentRefused):
        read_bytes(str(tmp_path / "edge.md"), 99)


@pytest.mark.parametrize(
    ("data", "ok"),
    [
        (b"\xef\xbb\xbf# Title\r\nbody", "# Title\nbody"),
        ("caf\u00e9".encode("cp1252"), "caf\u00e9"),
        (b"\x00\x01\x02\x03" * 100, None),
        (b"\xff\xfe" + b"\x00\xd8", None),
        (b"text\x00", None),
        (b"", ""),
    ],
)
def test_encodings_documented_and_refused_with_the_path(tmp_path: Path, data: bytes, ok: str | None) -> None:
    p = tmp_path / "doc.md"
    p.write_bytes(data)
    if ok is None:
        with pytest.raises(DocumentEncodingError) as exc:
            read_document(str(p))
        assert exc.value.details["file"] == str(p)
    else:
        d = read_document(str(p))
        assert d.text == ok and d.size == len(data)


def test_unreadable_file(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        pytest.skip("root reads files whatever their mode")
    p = tmp_path / "secret.md"
    p.write_text("x")
    p.chmod(0)
    with pytest.raises(DocumentRefused) as exc:
        read_document(str(p))
    assert exc.value.details["reason"] == "unreadable"
