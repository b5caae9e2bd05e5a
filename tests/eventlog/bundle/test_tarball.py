"""The strict ustar reader and the deterministic writer: hostile archives are refused cleanly."""

from __future__ import annotations

import gzip
import io
import tarfile
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mnemolog.eventlog.bundle import tarball
from mnemolog.eventlog.bundle.tarball import BLOCK, Limits, header, read_tar, write_tar
from mnemolog.eventlog.bundle.verifier import verify_bundle
from mnemolog.eventlog.errors import MnemologError, VerificationError
from mnemolog.eventlog.verify.trust import TRUST_GENESIS


def read(data: bytes, limits: Limits = tarball.DEFAULT_LIMITS) -> dict[str, bytes]:
    return read_tar(io.BytesIO(data), len(data), limits)


def refused(data: bytes, check: str, limits: Limits = tarball.DEFAULT_LIMITS) -> VerificationError:
    with pytest.raises(VerificationError) as info:
        read(data, limits)
    assert info.value.check == check, info.value.message
    assert info.value.exit_code == 8
    return info.value


def stdlib_tar(members: list[tarfile.TarInfo], payloads: dict[str, bytes] | None = None) -> bytes:
    """An archive written by the standard library's tarfile (USTAR), for the shapes we refuse."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tf:
        for info in members:
            data = (payloads or {}).get(info.name)
            tf.addfile(info, io.BytesIO(data) if data is not None else None)
    return buf.getvalue()


def reg(name: str, data: bytes = b"x") -> tuple[tarfile.TarInfo, dict[str, bytes]]:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    return info, {name: data}


def craft(name: bytes, size_field: bytes, kind: bytes = b"0") -> bytes:
    """A hand-made header (for sizes no real file should have): valid checksum, no data."""
    h = bytearray(BLOCK)
    h[0 : len(name)] = name
    h[100:108] = b"0000644\x00"
    h[108:116] = b"0000000\x00"
    h[116:124] = b"0000000\x00"
    h[124:136] = size_field
    h[136:148] = b"00000000000\x00"
    h[156:157] = kind
    h[257:265] = b"ustar\x0000"
    h[148:156] = b" " * 8
    h[148:156] = f"{sum(h):06o}".encode() + b"\x00 "
    return bytes(h)


# -- the writer ---------------------------------------------------------------


def test_writer_is_deterministic_and_sorted() -> None:
    files = [("b.json", b"{}"), ("a.cbor", b"\xa0"), ("VERIFY.md", b"# hi\n")]
    one = write_tar(files)
    two = write_tar(list(reversed(files)))
    assert one == two
    assert read(one) == dict(files)
    with tarfile.open(fileobj=io.BytesIO(one)) as tf:
        infos = tf.getmembers()
    assert [i.name for i in infos] == ["VERIFY.md", "a.cbor", "b.json"]
    assert all(i.isreg() and i.mtime == 0 and i.uid == 0 and i.gid == 0 and i.mode == 0o644 for i in infos)
    assert all(i.uname == "" and i.gname == "" for i in infos)


def test_writer_refuses_what_the_reader_would_refuse() -> None:
    with pytest.raises(ValueError):
        write_tar([("../x", b"")])
    with pytest.raises(ValueError):
        write_tar([("a", b""), ("a", b"1")])
    with pytest.raises(ValueError):
        header("dir/file", 1)


@settings(max_examples=60, deadline=None)
@given(
    st.dictionaries(
        st.from_regex(tarball.NAME_RE, fullmatch=True).filter(lambda n: len(n) <= 100),
        st.binary(max_size=1500),
        max_size=8,
    )
)
def test_round_trip(files: dict[str, bytes]) -> None:
    data = write_tar(files.items())
    assert len(data) % BLOCK == 0
    assert read(data) == files


@settings(max_examples=80, deadline=None)
@given(st.data())
def test_truncation_anywhere_is_refused(data: st.DataObject) -> None:
    archive = write_tar([("a.bin", b"a" * 700), ("b.bin", b"b" * 10)])
    cut = data.draw(st.integers(min_value=0, max_value=len(archive) - 1))
    with pytest.raises(VerificationError) as info:
        read(archive[:cut])
    assert info.value.check.startswith("archive.")


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_corruption_never_escapes_as_another_exception(data: st.DataObject) -> None:
    archive = bytearray(write_tar([("a.bin", b"a" * 700), ("b.bin", b"b" * 10)]))
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(archive) - 1))
        archive[i] = data.draw(st.integers(0, 255))
    try:
        out = read(bytes(archive))
    except VerificationError as exc:
        assert exc.check.startswith("archive.")
    else:
        assert set(out) <= {"a.bin", "b.bin"} or all(tarball.NAME_RE.match(n) for n in out)


# -- hostile archives -----------------------------------------------------------


def test_path_traversal() -> None:
    info, payload = reg("../../etc/passwd")
    err = refused(stdlib_tar([info], payload), "archive.traversal")
    assert "../../etc/passwd" in err.message


def test_traversal_hidden_in_the_middle() -> None:
    info, payload = reg("a/../../b")
    refused(stdlib_tar([info], payload), "archive.traversal")


def test_absolute_path() -> None:
    info, payload = reg("/etc/cron.d/evil")
    err = refused(stdlib_tar([info], payload), "archive.absolute_path")
    assert err.file == "/etc/cron.d/evil"


def test_nested_names_are_not_bundle_files() -> None:
    info, payload = reg("memories/x.json")
    refused(stdlib_tar([info], payload), "archive.name")


@pytest.mark.parametrize(
    ("kind", "words"),
    [
        (tarfile.SYMTYPE, "symbolic link"),
        (tarfile.LNKTYPE, "hard link"),
        (tarfile.CHRTYPE, "character device"),
        (tarfile.BLKTYPE, "block device"),
        (tarfile.FIFOTYPE, "FIFO"),
        (tarfile.DIRTYPE, "directory"),
    ],
)
def test_links_devices_and_directories(kind: bytes, words: str) -> None:
    info = tarfile.TarInfo("manifest.cbor")
    info.type = kind
    if kind in (tarfile.SYMTYPE, tarfile.LNKTYPE):
        info.linkname = "/etc/shadow"
    err = refused(stdlib_tar([info]), "archive.member_type")
    assert words in err.message
    assert (err.file or "").rstrip("/") == "manifest.cbor"


def test_pax_headers_are_refused() -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
        info = tarfile.TarInfo("x" * 120)  # a long name forces a pax header
        tf.addfile(info, io.BytesIO(b""))
    err = refused(buf.getvalue(), "archive.member_type")
    assert "pax" in err.message


@pytest.mark.serial  # a time bound: not beside other tests under xdist
def test_ten_gigabyte_member_is_refused_from_its_header() -> None:
    ten_gb = 10 * 1024**3
    archive = craft(b"entries.cbor", f"{ten_gb:o}".encode())  # 12 octal digits, no terminator
    assert len(f"{ten_gb:o}") == 12
    start = time.perf_counter()
    err = refused(archive, "archive.member_too_large")
    assert time.perf_counter() - start < 1.0
    assert err.found == ten_gb
    assert err.file == "entries.cbor"


def test_base256_size_is_read_and_refused() -> None:
    size = 10 * 1024**3
    field = bytes([0x80]) + size.to_bytes(11, "big")
    err = refused(craft(b"entries.cbor", field), "archive.member_too_large")
    assert err.found == size


def test_declared_size_past_the_end_is_truncation() -> None:
    archive = craft(b"entries.cbor", b"00000100000\x00") + b"x" * 100
    err = refused(archive, "archive.truncated")
    assert err.file == "entries.cbor"


def test_total_size_limit_counts_declared_sizes() -> None:
    files = [(f"f{i}", b"z" * 600) for i in range(4)]
    err = refused(
        write_tar(files), "archive.too_large", Limits(max_member=1000, max_total=2000, max_members=64)
    )
    assert err.expected == 2000


def test_a_thousand_tiny_members() -> None:
    files = [(f"m{i:04d}", b"") for i in range(1000)]
    err = refused(write_tar(files), "archive.too_many_members")
    assert err.expected == tarball.DEFAULT_LIMITS.max_members


def test_duplicate_names() -> None:
    one = tarball.header("checkpoint", 1) + b"a" + bytes(BLOCK - 1)
    archive = one + one + bytes(2 * BLOCK)
    err = refused(archive, "archive.duplicate")
    assert err.file == "checkpoint"


def test_not_a_tar() -> None:
    refused(b"hello, I am a text file\n" * 40, "archive.not_tar")
    refused(b"tiny", "archive.not_tar")
    err = refused(b"PK\x03\x04" + bytes(600), "archive.not_tar")
    assert "zip" in err.message


def test_empty_file() -> None:
    refused(b"", "archive.empty")


@pytest.mark.serial  # a time bound: not beside other tests under xdist
def test_gzip_bomb_is_refused_without_inflating() -> None:
    bomb = gzip.compress(bytes(50 * 1024 * 1024), compresslevel=9)
    assert len(bomb) < 100_000
    start = time.perf_counter()
    err = refused(bomb, "archive.not_tar")
    assert time.perf_counter() - start < 1.0
    assert "compress" in err.message


def test_bad_checksum() -> None:
    archive = bytearray(write_tar([("checkpoint", b"abc")]))
    archive[0] = ord("C")
    refused(bytes(archive), "archive.header")


def test_missing_end_marker_is_truncation() -> None:
    archive = write_tar([("checkpoint", b"abc")])
    refused(archive[: -2 * BLOCK], "archive.truncated")
    refused(archive[:-BLOCK], "archive.truncated")


def test_data_after_the_end_marker() -> None:
    archive = write_tar([("checkpoint", b"abc")]) + b"\x01" + bytes(BLOCK - 1)
    refused(archive, "archive.trailing_data")


def test_zero_padding_after_the_end_marker_is_fine() -> None:
    archive = write_tar([("checkpoint", b"abc")]) + bytes(20 * BLOCK)
    assert read(archive) == {"checkpoint": b"abc"}


def test_archive_larger_than_any_bundle_is_refused_before_reading() -> None:
    class Huge(io.BytesIO):
        def read(self, n: int | None = -1) -> bytes:
            raise AssertionError("must not read")

    with pytest.raises(VerificationError) as info:
        read_tar(Huge(), 50 * 1024**3)
    assert info.value.check == "archive.too_large"


def test_verify_bundle_on_hostile_files_raises_only_verification_errors(tmp_path: Path) -> None:
    info, payload = reg("../escape")
    samples = {
        "traversal.tar": stdlib_tar([info], payload),
        "bomb.tar.gz": gzip.compress(bytes(1024 * 1024)),
        "truncated.tar": write_tar([("manifest.cbor", b"\xa0" * 900)])[:700],
        "empty-archive.tar": bytes(2 * BLOCK),
        "garbage.tar": bytes(range(256)) * 8,
    }
    for name, data in samples.items():
        path = tmp_path / name
        path.write_bytes(data)
        with pytest.raises(MnemologError) as exc_info:
            verify_bundle(path, policy=TRUST_GENESIS)
        assert isinstance(exc_info.value, VerificationError), name
        assert exc_info.value.exit_code == 8
    assert not (tmp_path.parent / "escape").exists()
