"""The witness server over real HTTP on 127.0.0.1: cosign, refuse rollback and forks, survive restarts,
and refuse hostile requests (oversized, truncated, slow, malformed) without changing its state."""

from __future__ import annotations

import hashlib
import json
import socket
import threading
from pathlib import Path

import httpx
import pytest

from mnemolog.eventlog.errors import StorageError
from mnemolog.eventlog.format import merkle
from mnemolog.eventlog.format.keys import SigningKey
from mnemolog.eventlog.format.note import Checkpoint
from mnemolog.eventlog.witness.cosignature import CosignerVerifier
from mnemolog.eventlog.witness.protocol import MAX_REQUEST_BYTES, AddCheckpoint, parse_cosignature_response
from mnemolog.substrate.witness import server as ws
from tests.support.witness import WitnessServer

ORIGIN = "mnemolog/00112233445566778899aabbccddeeff"
KEY = SigningKey(bytes([3]) * 32, ORIGIN)
TREE = merkle.MemoryTree([hashlib.sha256(i.to_bytes(4, "big")).digest() for i in range(64)])
FORK = merkle.MemoryTree(
    TREE.levels[0][:20] + [hashlib.sha256(b"x" + bytes([i])).digest() for i in range(44)]
)


def req(old: int, size: int, tree: merkle.MemoryTree = TREE) -> bytes:
    proof = [] if old in (0, size) else merkle.consistency_proof(old, size, tree.subtree)
    return AddCheckpoint(old, tuple(proof), Checkpoint(ORIGIN, size, tree.root(size)).sign(KEY)).encode()


def post(w: WitnessServer, body: bytes, **kw: object) -> httpx.Response:
    return httpx.post(w.url + "/add-checkpoint", content=body, timeout=10, **kw)  # type: ignore[arg-type]


@pytest.fixture
def witness(tmp_path: Path):  # type: ignore[no-untyped-def]
    with WitnessServer(tmp_path / "w", logs=[(ORIGIN, KEY.verifier)]) as w:
        yield w


def state_size(w: WitnessServer) -> int:
    files = list((w.root / "state").glob("*.json"))
    return int(json.loads(files[0].read_text())["size"]) if files else 0


def test_cosigns_and_refuses_rollback(witness: WitnessServer) -> None:
    r = post(witness, req(0, 10))
    assert r.status_code == 200
    cos = parse_cosignature_response(
        r.content, Checkpoint(ORIGIN, 10, TREE.root(10)).text(), CosignerVerifier.from_vkey(witness.vkey)
    )
    assert cos.witness.name == "witness.test/w1"
    assert post(witness, req(10, 30)).status_code == 200
    assert state_size(witness) == 30
    # Rollback to 10, claiming any old size.
    r = post(witness, req(0, 10))
    assert r.status_code == 409 and r.content == b"30\n"
    assert r.headers["content-type"] == "text/x.tlog.size"  # exactly: C2SP clients compare it whole
    assert post(witness, req(10, 10)).status_code == 409
    assert (
        post(
            witness, AddCheckpoint(30, (), Checkpoint(ORIGIN, 10, TREE.root(10)).sign(KEY)).encode()
        ).status_code
        == 400
    )
    assert state_size(witness) == 30


def test_refuses_an_inconsistent_proof_and_keeps_evidence(witness: WitnessServer) -> None:
    assert post(witness, req(0, 30)).status_code == 200
    # The fork shares the first 20 leaves only: its size 40 does not extend size 30.
    bad = AddCheckpoint(
        30,
        tuple(merkle.consistency_proof(30, 40, TREE.subtree)),
        Checkpoint(ORIGIN, 40, FORK.root(40)).sign(KEY),
    )
    assert post(witness, bad.encode()).status_code == 422
    # Another root at the size it cosigned.
    same = AddCheckpoint(30, (), Checkpoint(ORIGIN, 30, FORK.root(30)).sign(KEY))
    assert post(witness, same.encode()).status_code == 409
    evidence = list((witness.root / "evidence").rglob("*.req"))
    assert len(evidence) == 2
    assert state_size(witness) == 30


def test_unknown_log_bad_signature_and_wrong_route(witness: WitnessServer) -> None:
    other = SigningKey(bytes([4]) * 32, "x")
    r = post(witness, AddCheckpoint(0, (), Checkpoint("elsewhere", 1, TREE.root(1)).sign(other)).encode())
    assert r.status_code == 404
    stranger = SigningKey(bytes([5]) * 32, ORIGIN)
    r = post(witness, AddCheckpoint(0, (), Checkpoint(ORIGIN, 1, TREE.root(1)).sign(stranger)).encode())
    assert r.status_code == 403
    assert httpx.get(witness.url + "/add-checkpoint").status_code == 405
    assert httpx.post(witness.url + "/other", content=b"").status_code == 404
    assert state_size(witness) == 0


def test_hostile_requests(tmp_path: Path) -> None:
    with WitnessServer(tmp_path / "w", logs=[(ORIGIN, KEY.verifier)], request_timeout=1.0) as w:
        # Declared too large: refused before reading the body.
        with socket.create_connection(("127.0.0.1", w.port), timeout=10) as s:
            s.sendall(
                b"POST /add-checkpoint HTTP/1.1\r\nHost: x\r\n"
                + f"Content-Length: {MAX_REQUEST_BYTES + 1}\r\n\r\n".encode()
            )
            assert s.recv(4096).startswith(b"HTTP/1.1 413")

        # Actually too large, sent chunked without a length.
        def chunks():  # type: ignore[no-untyped-def]
            for _ in range(MAX_REQUEST_BYTES // 4096 + 2):
                yield b"a" * 4096

        assert post(w, chunks()).status_code == 413
        # Malformed proof lines, a truncated body, garbage.
        good = req(0, 5)
        assert post(w, b"old 3\nnot-base64\n\n" + good.split(b"\n\n", 1)[1]).status_code == 400
        assert post(w, good[: len(good) // 2]).status_code == 400
        assert post(w, bytes(range(256)) * 4).status_code == 400
        # A body that never finishes: the server gives up after its deadline.
        with socket.create_connection(("127.0.0.1", w.port), timeout=10) as s:
            s.sendall(b"POST /add-checkpoint HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\nold 0\n")
            answer = s.recv(4096)  # the server answers by its deadline, not when the body ends
            assert answer.startswith(b"HTTP/1.1 408"), answer[:80]
        # None of it changed the state, and a good request still works.
        assert state_size(w) == 0
        assert post(w, good).status_code == 200


def test_state_survives_a_restart_and_a_lost_state_refuses_to_start(tmp_path: Path) -> None:
    w = WitnessServer(tmp_path / "w", logs=[(ORIGIN, KEY.verifier)]).start()
    assert post(w, req(0, 30)).status_code == 200
    vkey = w.vkey
    w.stop()
    w.start()
    assert w.vkey == vkey  # the same key
    assert post(w, req(0, 20)).content == b"30\n"
    assert post(w, req(30, 40)).status_code == 200
    w.stop()
    state = next((tmp_path / "w" / "state").glob("*.json"))
    state.write_text(state.read_text()[:-20])
    with pytest.raises(StorageError):
        ws.prepare(tmp_path / "w", listen="127.0.0.1:0", logs=[(ORIGIN, KEY.verifier)])


def test_one_server_per_directory(witness: WitnessServer) -> None:
    with pytest.raises(StorageError):
        ws.prepare(witness.root, listen="127.0.0.1:0")


def test_racing_requests_never_roll_the_state_back(witness: WitnessServer) -> None:
    """Many clients at once, each from the state it last saw: the stored size only grows."""
    assert post(witness, req(0, 1)).status_code == 200
    sizes: list[int] = []
    lock = threading.Lock()

    def client(seed: int) -> None:
        old = 1
        for size in range(2 + seed, 64, 5):
            if old >= size:
                continue  # others took the witness past this size already
            r = post(witness, req(old, size))
            if r.status_code == 409:
                old = int(r.content)
                if old >= size:
                    continue
                r = post(witness, req(old, size))
            if r.status_code == 200:
                old = size
            with lock:
                sizes.append(state_size(witness))

    threads = [threading.Thread(target=client, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    final = state_size(witness)
    assert final == max(sizes) and final >= 59
    assert witness.witness.states[ORIGIN].root == TREE.root(final)


def test_logs_file_and_flags(tmp_path: Path) -> None:
    d = tmp_path / "w"
    d.mkdir()
    (d / "logs").write_text(f"# a comment\n\n{ORIGIN} {KEY.verifier.vkey()}\n")
    with WitnessServer(d) as w:
        assert post(w, req(0, 3)).status_code == 200
    (d / "logs").write_text("just-one-field\n")
    with pytest.raises(Exception) as e:
        ws.prepare(d, listen="127.0.0.1:0")
    assert getattr(e.value, "exit_code", None) == 65
    with pytest.raises(Exception) as e:
        ws.parse_log_spec("no-equals-sign")
    assert getattr(e.value, "exit_code", None) == 64
    assert ws.parse_listen("[::1]:80") == ("::1", 80)
    assert ws.is_loopback("127.0.0.1") and not ws.is_loopback("0.0.0.0")
