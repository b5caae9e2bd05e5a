"""Sealed content end to end: the log holds no readable content, the keys travel beside an export,
a copy without them verifies and reads as sealed, and a bundle carries the keys of what it shows."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from mnemolog.eventlog.bundle import verifier as bundle
from mnemolog.eventlog.errors import BadInput, NotFound
from mnemolog.eventlog.format import sealing
from mnemolog.eventlog.verify.trust import TRUST_GENESIS
from mnemolog.substrate.erasure.datakeys import DataKeys
from mnemolog.substrate.forensics import service as forensics
from mnemolog.substrate.home import Home
from tests.projections.kit import new_home, open_sub

MARK = "QZXMARKERSEAL"


def encodings(text: str) -> list[bytes]:
    raw = text.encode()
    return [raw, text.encode("utf-16-le"), base64.b64encode(raw)[:-4] or raw]


def logged(home: Home, text: str) -> bool:
    blob = b"".join(p.read_bytes() for p in home.log_dir.rglob("*") if p.is_file())
    return any(e in blob for e in encodings(text))


@pytest.fixture
def filled(tmp_path: Path) -> tuple[Home, str]:
    home = new_home(tmp_path / "home")
    with open_sub(home) as sub:
        m = sub.store(f"{MARK} body", title=f"{MARK} title", tags=["tagq"], metadata={"note": MARK})
        sub.update(m["id"], content=f"{MARK} revised body")
        sub.capture(f"{MARK} prompt", f"{MARK} response")
    return home, m["id"]


def test_the_log_holds_no_readable_content_and_reads_open_it(filled: tuple[Home, str]) -> None:
    home, mid = filled
    assert not logged(home, MARK)
    with open_sub(home) as sub:
        got = sub.get(mid)
        assert got["content"] == f"{MARK} revised body" and got["title"] == f"{MARK} title"
        assert got["tags"] == ["tagq"] and got["metadata"] == {"note": MARK}
        assert [m["id"] for m in sub.recall(MARK)] == [mid]
    keys = DataKeys(home.root)
    with open_sub(home) as sub:
        kids = {k for e in sub.log.iter_entries() for k in sealing.key_ids(e.type, e.data)}
    assert kids and all(keys.has(k) for k in kids) and (keys.path.stat().st_mode & 0o777) == 0o600


def test_export_carries_the_keys_and_replay_rebuilds_every_memory(
    filled: tuple[Home, str], tmp_path: Path
) -> None:
    home, mid = filled
    out = tmp_path / "all.export"
    r = forensics.export_log(home, 0, None, out)
    assert r.keys == str(out) + ".keys" and r.data_keys >= 2
    assert home.signing_key_path.read_bytes() not in Path(r.keys).read_bytes()
    rep = forensics.replay(out, tmp_path / "copy")
    assert rep.data_keys == r.data_keys and rep.sealed == 0
    with open_sub(Home(tmp_path / "copy")) as sub:
        assert sub.get(mid)["content"] == f"{MARK} revised body"


def test_a_copy_without_keys_verifies_and_reads_as_sealed(filled: tuple[Home, str], tmp_path: Path) -> None:
    home, mid = filled
    out = tmp_path / "bare.export"
    r = forensics.export_log(home, 0, None, out, with_keys=False)
    assert r.keys is None and not Path(str(out) + ".keys").exists()
    rep = forensics.replay(out, tmp_path / "copy")
    assert rep.sealed > 0 and rep.data_keys == 0
    copy = Home(tmp_path / "copy")
    with open_sub(copy) as sub:
        assert MARK not in json.dumps(sub.get(mid))
        sub.verify_projections()  # raises on any difference
    assert not any(MARK.encode() in p.read_bytes() for p in copy.root.rglob("*") if p.is_file())


def test_replay_refuses_the_keys_of_another_log(filled: tuple[Home, str], tmp_path: Path) -> None:
    home, _ = filled
    out = tmp_path / "all.export"
    forensics.export_log(home, 0, None, out)
    bad = tmp_path / "other.keys"
    bad.write_bytes(sealing.encode_keys({"x": bytes(32)}, b"\x07" * 16))
    with pytest.raises(BadInput):
        forensics.replay(out, tmp_path / "copy", keys=bad)
    with pytest.raises(NotFound):
        forensics.replay(out, tmp_path / "copy2", keys=tmp_path / "absent.keys")
    garbage = tmp_path / "garbage.keys"
    garbage.write_bytes(b"\xff\x00garbage")
    with pytest.raises(BadInput):
        forensics.replay(out, tmp_path / "copy3", keys=garbage)
    assert not (tmp_path / "copy").exists() and not (tmp_path / "copy3").exists()


def test_a_bundle_carries_the_keys_of_what_it_shows(filled: tuple[Home, str], tmp_path: Path) -> None:
    home, mid = filled
    with open_sub(home) as sub:
        ex = forensics.export_bundle(sub, mid)
    path = tmp_path / "b.tar"
    path.write_bytes(ex.data)
    report = bundle.verify_bundle(path, policy=TRUST_GENESIS)
    assert report.sealed == {}
    members = bundle.read_members(path)
    with open_sub(home) as sub:
        named = {
            k
            for e in sub.log.iter_entries()
            if e.data.get("id") == mid
            for k in sealing.key_ids(e.type, e.data)
        }
    assert set(sealing.decode_keys(members[bundle.DATAKEYS])[1]) == named
    views = json.loads(members[bundle.MEMORIES])["memories"]
    assert views[mid]["content"] == f"{MARK} revised body"


def test_keys_are_destroyed_by_id_and_a_missing_store_has_none(
    tmp_path: Path, filled: tuple[Home, str]
) -> None:
    home, _ = filled
    keys = DataKeys(home.root)
    kid = next(iter(keys.all()))
    assert keys.destroy([kid, "never-had-one"]) == [kid]
    assert not keys.has(kid) and DataKeys(home.root).get(kid) is None
    assert DataKeys(tmp_path / "nowhere").get(kid) is None
    (tmp_path / "fresh").mkdir()
    made = DataKeys(tmp_path / "fresh").ensure(["a", "b", "a"])
    assert set(made) == {"a", "b"} and made["a"][0] != made["b"][0]
    assert DataKeys(tmp_path / "fresh").get(made["a"][0]) == made["a"][1]  # durable before it is handed out


def test_a_damaged_key_store_is_a_storage_error_naming_it(filled: tuple[Home, str]) -> None:
    from mnemolog.eventlog.errors import StorageError

    home, _ = filled
    keys = DataKeys(home.root)
    keys.path.write_bytes(b"\xff\xfe not keys")
    with pytest.raises(StorageError) as info:
        keys.get("x")
    assert str(keys.path) in info.value.message


def test_two_substrates_share_keys_as_they_are_made(tmp_path: Path) -> None:
    home = new_home(tmp_path / "home")
    with open_sub(home) as a, open_sub(home) as b:
        m = a.store(f"{MARK} from a")
        assert b.get(m["id"])["content"] == f"{MARK} from a"
        n = b.store(f"{MARK} from b")
        assert a.get(n["id"])["content"] == f"{MARK} from b"
