"""Property: the index-hinted fast pass of `log verify` accepts nothing the sequential pass refuses.

Entries are signed by hand around arbitrary payload bytes (deep nesting at
and beyond the limit, floats, unordered keys, non-canonical encodings, odd
type names and versions), so that what the writer would never write reaches
the verifier with valid signatures. Both strategies must give the same
verdict: the same check at the same seq, or success.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import cbor2
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mnemolog.eventlog.errors import VerificationError
from mnemolog.eventlog.format import merkle
from mnemolog.eventlog.format.entry import ZERO_HASH, make_entry, sign_raw
from mnemolog.eventlog.format.note import Checkpoint
from mnemolog.eventlog.store.checkpoints import CHECKPOINT_DIR, checkpoint_name
from mnemolog.eventlog.store.fsio import atomic_write
from mnemolog.eventlog.store.index import IndexWriter
from mnemolog.eventlog.verify.trust import TRUST_GENESIS, origin_for
from mnemolog.eventlog.verify.verifier import verify_log
from tests.eventlog.logkit import T0, seeded_key

KEY = seeded_key()
LOG_ID = b"\x44" * 16

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**64), 2**64 - 1),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
    st.binary(max_size=8),
)


def nested(depth: int, leaf: Any) -> Any:
    v = leaf
    for i in range(depth):
        v = [v] if i % 2 else {"k": v}
    return v


payloads = st.one_of(
    st.dictionaries(
        st.text(max_size=6), st.recursive(scalars, lambda c: st.lists(c, max_size=3)), max_size=4
    ),
    st.builds(lambda d, leaf: {"deep": nested(d, leaf)}, st.integers(26, 34), st.sampled_from(["x", [], {}])),
    st.builds(lambda a, b: {"b": a, "a": b}, scalars, scalars),  # keys out of canonical order
)
types = st.sampled_from(["note.added", "note.added", "memory.stored", "Bad.Type", "x", "key.rotated"])


def _encode(data: Any, canonical: bool) -> bytes:
    try:
        return bytes(cbor2.dumps(data, canonical=canonical))
    except (ValueError, TypeError, OverflowError):
        return bytes(cbor2.dumps({"unencodable": True}))


def _build(log_dir: Path, specs: list[tuple[str, int, Any, bool]]) -> None:
    log_dir.mkdir(parents=True)
    (log_dir / CHECKPOINT_DIR).mkdir()
    genesis = make_entry(
        seq=0,
        ts=T0,
        type_="log.created",
        tv=1,
        data={"log_id": LOG_ID, "public_key": KEY.public_key, "key_name": KEY.name, "created_at": T0},
        prev=ZERO_HASH,
        signer=KEY,
    )
    raws, leaves, prev = [genesis.raw], [genesis.leaf], genesis.leaf
    for i, (type_, tv, data, canonical) in enumerate(specs, start=1):
        raw, leaf = sign_raw(i, T0 + i, type_, tv, _encode(data, canonical), prev, KEY)
        raws.append(raw)
        leaves.append(leaf)
        prev = leaf
    (log_dir / f"{0:020d}.seg").write_bytes(b"".join(raws))
    idx = IndexWriter(log_dir)
    off, records = 0, []
    for i, raw in enumerate(raws):
        records.append((0, off, len(raw), leaves[i], i == 0))
        off += len(raw)
    idx.append(records)
    idx.close()
    n = len(raws)
    cp = Checkpoint(origin_for(LOG_ID), n, merkle.root_of(leaves)).sign(KEY)
    atomic_write(log_dir / CHECKPOINT_DIR / checkpoint_name(n), cp)


def _verdict(log_dir: Path, **kw: Any) -> tuple[str, int | None] | str:
    try:
        r = verify_log(log_dir, processes=1, **{"policy": TRUST_GENESIS, **kw})
    except VerificationError as exc:
        return (exc.check, exc.seq)
    return f"ok:{r.root}"


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    specs=st.lists(
        st.tuples(types, st.sampled_from([1, 1, 2, 0, 2**33]), payloads, st.booleans()),
        min_size=1,
        max_size=6,
    ),
    hashes_only=st.booleans(),
)
def test_the_fast_pass_accepts_only_what_the_slow_pass_accepts(
    tmp_path_factory: pytest.TempPathFactory, specs: list[tuple[str, int, Any, bool]], hashes_only: bool
) -> None:
    d = tmp_path_factory.mktemp("agree") / "log"
    try:
        _build(d, specs)
        fast = _verdict(d, hashes_only=hashes_only)
        slow = _verdict(d, hashes_only=hashes_only, use_index_hint=False)
        assert fast == slow, specs
    finally:
        shutil.rmtree(d.parent, ignore_errors=True)


def test_the_nesting_limit_counts_from_the_entry(tmp_path: Path) -> None:
    """A payload one level too deep for the entry used to pass the fast pass and fail the slow one."""
    from mnemolog.eventlog.errors import DecodeError
    from mnemolog.eventlog.store.writer import LogWriter

    d = tmp_path / "log"
    _build(d, [("note.added", 1, {"v": nested(31, "x")}, True)])
    assert _verdict(d) == _verdict(d, use_index_hint=False) == ("entry.decode", 1)
    w_dir = tmp_path / "w"
    LogWriter.create(w_dir, KEY)
    with LogWriter(w_dir, [KEY]) as w:
        w.append("note.added", {"v": nested(30, "x")})  # the deepest payload an entry may carry
        with pytest.raises(DecodeError):
            w.append("note.added", {"v": nested(31, "x")})
    verify_log(w_dir, use_index_hint=False, policy=TRUST_GENESIS)
