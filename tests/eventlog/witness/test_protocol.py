"""The tlog-witness state transition and request parser, as pure functions.

Properties: whatever sequence of checkpoints (from one log, or from two logs
that fork, rolled back or not) is submitted with whatever old sizes and
proofs, the witness's size never goes down and every state it moves to is
provably consistent with the one before; and no byte string makes the parser
raise anything but a protocol refusal.
"""

from __future__ import annotations

import base64
import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mnemolog.eventlog.format import merkle
from mnemolog.eventlog.format.keys import SigningKey
from mnemolog.eventlog.format.note import Checkpoint
from mnemolog.eventlog.witness.cosignature import CosignerKey
from mnemolog.eventlog.witness.protocol import (
    MAX_PROOF_LINES,
    MAX_REQUEST_BYTES,
    SIZE_CONTENT_TYPE,
    AddCheckpoint,
    BadRequest,
    Conflict,
    Forbidden,
    Inconsistent,
    LogState,
    TooLarge,
    UnknownLog,
    WitnessedLog,
    WitnessRefusal,
    cosign_response,
    parse_add_checkpoint,
    parse_cosignature_response,
    parse_size_body,
    step,
)

ORIGIN = "mnemolog/00112233445566778899aabbccddeeff"
KEY = SigningKey(bytes([3]) * 32, ORIGIN)
LOGS = {ORIGIN: WitnessedLog(ORIGIN, (KEY.verifier,))}


def leaves(tag: bytes, n: int) -> list[bytes]:
    return [hashlib.sha256(tag + i.to_bytes(8, "big")).digest() for i in range(n)]


def signed(size: int, root: bytes, key: SigningKey = KEY, origin: str = ORIGIN) -> bytes:
    return Checkpoint(origin, size, root).sign(key)


def request(tree: merkle.MemoryTree, old: int, size: int) -> AddCheckpoint:
    proof = [] if old in (0, size) else merkle.consistency_proof(old, size, tree.subtree)
    return AddCheckpoint(old, tuple(proof), signed(size, tree.root(size)))


def submit(states: dict[str, LogState], req: AddCheckpoint) -> LogState:
    acc = step(LOGS, states, parse_add_checkpoint(req.encode()))
    states[acc.state.origin] = acc.state
    return acc.state


def test_first_checkpoint_then_consistent_growth() -> None:
    t = merkle.MemoryTree(leaves(b"a", 40))
    states: dict[str, LogState] = {}
    assert submit(states, request(t, 0, 5)).size == 5
    assert submit(states, request(t, 5, 17)).size == 17
    assert submit(states, request(t, 17, 17)).size == 17  # the same checkpoint again
    assert submit(states, request(t, 17, 40)).root == t.root(40)


def test_refusals_carry_the_protocol_status() -> None:
    t = merkle.MemoryTree(leaves(b"a", 40))
    fork = merkle.MemoryTree(leaves(b"a", 10) + leaves(b"b", 30))
    states: dict[str, LogState] = {}
    submit(states, request(t, 0, 20))

    def refused(req: AddCheckpoint) -> WitnessRefusal:
        with pytest.raises(WitnessRefusal) as e:
            step(LOGS, states, parse_add_checkpoint(req.encode()))
        return e.value

    # Rollback: a smaller checkpoint, whatever old size is claimed.
    r = refused(request(t, 0, 10))
    assert isinstance(r, Conflict) and r.status == 409 and r.body == b"20\n"
    assert r.content_type == SIZE_CONTENT_TYPE
    assert isinstance(refused(request(t, 10, 10)), Conflict)
    assert isinstance(
        refused(AddCheckpoint(20, (), signed(10, t.root(10)))), BadRequest
    )  # old above the checkpoint's size
    # A stale old size.
    assert refused(request(t, 15, 30)).status == 409
    # A fork: another root at the same size, and a proof that does not lead to it.
    assert isinstance(refused(AddCheckpoint(20, (), signed(20, fork.root(20)))), Conflict)
    bad = refused(
        AddCheckpoint(20, tuple(merkle.consistency_proof(20, 30, t.subtree)), signed(30, fork.root(30)))
    )
    assert isinstance(bad, Inconsistent) and bad.status == 422
    # A proof from old size 0.
    assert isinstance(refused(AddCheckpoint(0, (bytes(32),), signed(30, t.root(30)))), Conflict)
    fresh: dict[str, LogState] = {}
    with pytest.raises(Inconsistent):  # C2SP: the proof from 0 must be empty, else 422
        step(LOGS, fresh, parse_add_checkpoint(AddCheckpoint(0, (bytes(32),), signed(3, t.root(3))).encode()))
    # Unknown origin, unknown key, a bad signature by the known key.
    other = SigningKey(bytes([4]) * 32, "elsewhere")
    assert isinstance(refused(AddCheckpoint(20, (), signed(20, t.root(20), other, "elsewhere"))), UnknownLog)
    stranger = SigningKey(bytes([5]) * 32, ORIGIN)
    assert isinstance(refused(AddCheckpoint(20, (), signed(20, t.root(20), stranger))), Forbidden)
    good = signed(20, t.root(20))
    tampered = good[:-3] + (b"A" if good[-3:-2] != b"A" else b"B") + good[-2:]
    r = refused(AddCheckpoint(20, (), tampered))
    assert r.status in (400, 403)
    assert states[ORIGIN].size == 20


def test_both_log_keys_are_trusted_across_a_rotation() -> None:
    new = SigningKey(bytes([6]) * 32, ORIGIN)
    logs = {ORIGIN: WitnessedLog(ORIGIN, (KEY.verifier, new.verifier))}
    t = merkle.MemoryTree(leaves(b"a", 8))
    parsed = parse_add_checkpoint(AddCheckpoint(0, (), signed(8, t.root(8), new)).encode())
    assert step(logs, {}, parsed).state.size == 8


def test_response_round_trip() -> None:
    t = merkle.MemoryTree(leaves(b"a", 8))
    acc = step(LOGS, {}, parse_add_checkpoint(request(t, 0, 8).encode()))
    w = CosignerKey(bytes([8]) * 32, "witness.test/w")
    body = cosign_response(w, acc.body, 1234)
    assert body.startswith("— witness.test/w ".encode()) and body.endswith(b"\n")
    assert parse_cosignature_response(body, acc.body.text, w.verifier).timestamp == 1234
    assert parse_size_body(b"17\n") == 17
    for bad in (b"017\n", b"17", b"-1\n", b"x\n", b"1" * 40 + b"\n"):
        with pytest.raises(Exception) as e:
            parse_size_body(bad)
        assert "decode" in type(e.value).__name__.lower()


def _valid_body() -> bytes:
    t = merkle.MemoryTree(leaves(b"a", 8))
    return request(t, 4, 8).encode()


@pytest.mark.parametrize(
    "mutate",
    [
        lambda b: b"",
        lambda b: b"old 4",
        lambda b: b"old 04\n" + b.split(b"\n", 1)[1],
        lambda b: b"old -4\n" + b.split(b"\n", 1)[1],
        lambda b: b"old  4\n" + b.split(b"\n", 1)[1],
        lambda b: b"new 4\n" + b.split(b"\n", 1)[1],
        lambda b: b"old 99999999999999999999999\n" + b.split(b"\n", 1)[1],
        lambda b: b[: b.index(b"\n\n")],  # truncated before the checkpoint
        lambda b: b[: b.index(b"\n\n") + 2],  # no checkpoint
        lambda b: b[: b.index(b"\n\n") + 20],  # a truncated checkpoint
        lambda b: b.replace(b"\n", b"\r\n", 2),
        lambda b: b.split(b"\n", 1)[0] + b"\nnot base64!!\n" + b.split(b"\n", 1)[1],
        lambda b: b.split(b"\n", 1)[0] + b"\n" + base64.b64encode(bytes(31)) + b"\n" + b.split(b"\n", 1)[1],
        lambda b: b.split(b"\n", 1)[0] + b"\n" + base64.b64encode(bytes(33)) + b"\n" + b.split(b"\n", 1)[1],
        lambda b: b.split(b"\n", 1)[0] + b"\n" + b"A" * 43 + b"B\n" + b.split(b"\n", 1)[1],  # non-canonical
        lambda b: b"old 4\n" + (base64.b64encode(bytes(32)) + b"\n") * (MAX_PROOF_LINES + 1) + b"\n",
        lambda b: b.replace(b"mnemolog/", b"mnemolog/\x01"),
        lambda b: b + b"\xff",
    ],
)
def test_malformed_requests_are_400(mutate: object) -> None:
    with pytest.raises(BadRequest):
        parse_add_checkpoint(mutate(_valid_body()))  # type: ignore[operator]


def test_oversized_request_is_413() -> None:
    with pytest.raises(TooLarge) as e:
        parse_add_checkpoint(b"old 0\n\n" + b"x" * MAX_REQUEST_BYTES)
    assert e.value.status == 413


def test_extension_lines_are_accepted_and_cosigned() -> None:
    t = merkle.MemoryTree(leaves(b"a", 4))
    text = f"{ORIGIN}\n4\n{base64.b64encode(t.root(4)).decode()}\next\n"
    from mnemolog.eventlog.format.note import sign_note

    acc = step(LOGS, {}, parse_add_checkpoint(b"old 0\n\n" + sign_note(text, KEY)))
    assert acc.body.text == text


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400))
def test_no_bytes_make_the_parser_raise_anything_else(data: bytes) -> None:
    for body in (data, b"old 0\n\n" + data, b"old 3\n" + data):
        try:
            parse_add_checkpoint(body)
        except WitnessRefusal as r:
            assert r.status in (400, 413)


@settings(max_examples=80, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["a", "fork"]), st.integers(1, 48), st.integers(0, 48), st.booleans()),
        min_size=1,
        max_size=25,
    )
)
def test_the_witness_never_goes_back_or_sideways(
    ops: list[tuple[str, int, int, bool]],
) -> None:
    trees = {
        "a": merkle.MemoryTree(leaves(b"a", 48)),
        "fork": merkle.MemoryTree(leaves(b"a", 12) + leaves(b"b", 36)),
    }
    states: dict[str, LogState] = {}
    history: list[LogState] = []
    for which, size, old_guess, honest in ops:
        t = trees[which]
        current = states.get(ORIGIN)
        old = (current.size if current else 0) if honest else min(old_guess, size)
        old = min(old, size)
        try:
            proof = [] if old in (0, size) else merkle.consistency_proof(old, size, t.subtree)
            st_ = submit(states, AddCheckpoint(old, tuple(proof), signed(size, t.root(size))))
        except WitnessRefusal:
            continue
        if history:
            prev = history[-1]
            assert st_.size >= prev.size
            if prev.size:
                # Whatever was accepted is provably an extension of what was accepted before.
                t_now = trees[which]
                assert t_now.root(prev.size) == prev.root
        history.append(st_)
