"""A spec-literal C2SP tlog-witness client against the witness server on 127.0.0.1.

Everything the client does is written from the C2SP texts alone (tlog-witness,
tlog-checkpoint, signed-note, tlog-cosignature, and RFC 6962's Merkle tree),
not from mnemolog's code: it builds and signs its checkpoints with PyNaCl,
computes roots and consistency proofs itself, speaks HTTP/1.1 with the
standard library, and checks status codes, headers and bodies exactly as the
spec words them. Only the server's configuration uses mnemolog.
"""

from __future__ import annotations

import base64
import hashlib
import http.client
import struct
from collections.abc import Iterator
from pathlib import Path

import nacl.signing
import pytest

from mnemolog.eventlog.format.keys import VerifierKey
from tests.support.witness import WitnessServer

# -- RFC 6962 §2.1 ------------------------------------------------------------


def leaf_hash(data: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def mth(leaves: list[bytes]) -> bytes:
    """MTH(D[n]) over leaf hashes."""
    n = len(leaves)
    if n == 0:
        return hashlib.sha256(b"").digest()
    if n == 1:
        return leaves[0]
    k = 1 << ((n - 1).bit_length() - 1)  # the largest power of two smaller than n
    return node_hash(mth(leaves[:k]), mth(leaves[k:]))


def subproof(m: int, leaves: list[bytes], b: bool) -> list[bytes]:
    """SUBPROOF(m, D[n], b) of RFC 6962 §2.1.2."""
    n = len(leaves)
    if m == n:
        return [] if b else [mth(leaves)]
    k = 1 << ((n - 1).bit_length() - 1)
    if m <= k:
        return [*subproof(m, leaves[:k], b), mth(leaves[k:])]
    return [*subproof(m - k, leaves[k:], False), mth(leaves[:k])]


def consistency_proof(m: int, leaves: list[bytes]) -> list[bytes]:
    return subproof(m, leaves, True)


# -- signed-note and tlog-checkpoint ------------------------------------------


class NoteSigner:
    """An Ed25519 signed-note key: key ID = SHA-256(name || 0x0A || 0x01 || public key)[:4]."""

    def __init__(self, name: str, seed: bytes) -> None:
        self.name = name
        self.sk = nacl.signing.SigningKey(seed)
        self.pub = bytes(self.sk.verify_key)
        self.key_id = hashlib.sha256(name.encode() + b"\n\x01" + self.pub).digest()[:4]

    def vkey(self) -> str:
        key = base64.b64encode(bytes([0x01]) + self.pub).decode()
        return f"{self.name}+{self.key_id.hex()}+{key}"

    def sign(self, text: str) -> bytes:
        sig = self.sk.sign(text.encode()).signature
        line = f"— {self.name} {base64.b64encode(self.key_id + sig).decode()}\n"
        return text.encode() + b"\n" + line.encode()


def checkpoint_text(origin: str, size: int, root: bytes) -> str:
    return f"{origin}\n{size}\n{base64.b64encode(root).decode()}\n"


def request_body(old: int, proof: list[bytes], note: bytes) -> bytes:
    lines = [f"old {old}\n".encode(), *(base64.b64encode(h) + b"\n" for h in proof), b"\n"]
    return b"".join(lines) + note


# -- tlog-cosignature ----------------------------------------------------------


def verify_cosignature(line: bytes, witness_vkey: str, text: str) -> int:
    """The timestamp of a valid cosignature/v1 line by the witness, else an assertion error."""
    name, key_id_hex, b64 = witness_vkey.strip().split("+", 2)
    raw = base64.b64decode(b64)
    assert raw[0] == 0x04, "a cosignature/v1 key is type 0x04"
    pub = raw[1:]
    key_id = hashlib.sha256(name.encode() + b"\n\x04" + pub).digest()[:4]
    assert key_id.hex() == key_id_hex
    assert line.startswith("— ".encode()) and line.endswith(b"\n")
    sig_name, sig_b64 = line[len("— ".encode()) : -1].decode().split(" ")
    assert sig_name == name
    blob = base64.b64decode(sig_b64)
    assert len(blob) == 4 + 8 + 64 and blob[:4] == key_id
    (timestamp,) = struct.unpack(">Q", blob[4:12])
    assert timestamp != 0
    message = f"cosignature/v1\ntime {timestamp}\n{text}".encode()
    nacl.signing.VerifyKey(pub).verify(message, blob[12:])
    return int(timestamp)


# -- the client ----------------------------------------------------------------

LOG = NoteSigner("example.com/log", bytes(range(32)))
FRESH = NoteSigner("example.com/fresh", bytes(range(1, 33)))
STRANGER = NoteSigner("example.com/log", bytes(range(2, 34)))
LEAVES = [leaf_hash(f"entry {i}".encode()) for i in range(40)]
FORK = LEAVES[:12] + [leaf_hash(f"forked {i}".encode()) for i in range(28)]


@pytest.fixture
def witness(tmp_path: Path) -> Iterator[WitnessServer]:
    logs = [(s.name, VerifierKey.from_vkey(s.vkey())) for s in (LOG, FRESH)]
    with WitnessServer(tmp_path / "w", logs=logs) as w:
        yield w


def post(w: WitnessServer, body: bytes) -> tuple[int, str | None, bytes]:
    host, port = w.url.removeprefix("http://").rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        conn.request("POST", "/add-checkpoint", body=body)
        r = conn.getresponse()
        return r.status, r.getheader("Content-Type"), r.read()
    finally:
        conn.close()


def add(
    w: WitnessServer, signer: NoteSigner, old: int, size: int, leaves: list[bytes]
) -> tuple[int, str | None, bytes]:
    proof = consistency_proof(old, leaves[:size]) if 0 < old < size else []
    text = checkpoint_text(signer.name, size, mth(leaves[:size]))
    return post(w, request_body(old, proof, signer.sign(text)))


def test_a_spec_literal_client(witness: WitnessServer) -> None:
    # First contact: old 0, no proof. 200 with signature lines that are cosignatures.
    status, _, body = add(witness, LOG, 0, 10, LEAVES)
    assert status == 200
    text = checkpoint_text(LOG.name, 10, mth(LEAVES[:10]))
    assert verify_cosignature(body, witness.vkey, text) > 0
    # Growth with an RFC 6962 consistency proof.
    status, _, body = add(witness, LOG, 10, 25, LEAVES)
    assert status == 200
    verify_cosignature(body, witness.vkey, checkpoint_text(LOG.name, 25, mth(LEAVES[:25])))

    # A stale old size: 409, the latest cosigned size and a newline, Content-Type exactly
    # text/x.tlog.size (clients compare the media type, parameters included).
    for old in (0, 10, 24):
        status, ctype, body = add(witness, LOG, old, 30, LEAVES)
        assert (status, ctype, body) == (409, "text/x.tlog.size", b"25\n")
    # The same size with another root: 409 Conflict ("If the old size matches the checkpoint
    # size, the witness MUST check that the root hashes are also identical").
    status, ctype, body = post(
        witness, request_body(25, [], LOG.sign(checkpoint_text(LOG.name, 25, mth(FORK[:25]))))
    )
    assert (status, ctype, body) == (409, "text/x.tlog.size", b"25\n")
    # A proof that does not verify: 422.
    proof = consistency_proof(25, LEAVES[:30])
    forked = LOG.sign(checkpoint_text(LOG.name, 30, mth(FORK[:30])))
    assert post(witness, request_body(25, proof, forked))[0] == 422
    # Old size above the checkpoint's: 400.
    assert add(witness, LOG, 26, 20, LEAVES)[0] == 400
    # Unknown origin: 404. No signature by a trusted key: 403.
    other = NoteSigner("example.com/other", bytes(range(3, 35)))
    assert add(witness, other, 0, 5, LEAVES)[0] == 404
    assert add(witness, STRANGER, 25, 30, LEAVES)[0] == 403
    # The witness is where it was: 25.
    status, ctype, body = add(witness, LOG, 0, 30, LEAVES)
    assert (status, ctype, body) == (409, "text/x.tlog.size", b"25\n")


def test_old_zero_proofs_and_the_empty_tree(witness: WitnessServer) -> None:
    # "The proof MUST be empty if the old size is zero. If the Merkle Consistency Proof
    # doesn't verify, the witness MUST respond with 422."
    text = checkpoint_text(FRESH.name, 8, mth(LEAVES[:8]))
    status, _, _ = post(witness, request_body(0, [LEAVES[0]], FRESH.sign(text)))
    assert status == 422
    # A size-0 checkpoint must carry the empty tree's root, MTH({}) = SHA-256().
    bogus = checkpoint_text(FRESH.name, 0, hashlib.sha256(b"not empty").digest())
    assert post(witness, request_body(0, [], FRESH.sign(bogus)))[0] == 422
    empty = checkpoint_text(FRESH.name, 0, mth([]))
    status, _, body = post(witness, request_body(0, [], FRESH.sign(empty)))
    assert status == 200
    verify_cosignature(body, witness.vkey, empty)
    # Nothing refused above moved the witness: old 0 is still its size for this log.
    assert add(witness, FRESH, 0, 8, LEAVES)[0] == 200
