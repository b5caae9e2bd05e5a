"""Signed notes and checkpoints: writing, parsing, opening; malformed input is refused."""

from __future__ import annotations

import base64

import pytest

from mnemolog.eventlog.errors import DecodeError, VerificationError
from mnemolog.eventlog.format.note import (
    Checkpoint,
    open_checkpoint,
    open_note,
    origin_for,
    parse_note,
    peek_checkpoint,
    sign_note,
)
from tests.eventlog.logkit import seeded_key

KEY = seeded_key("log-key")
OTHER = seeded_key("log-key", 9)
ROOT = bytes(range(32))


def test_checkpoint_format() -> None:
    cp = Checkpoint(origin_for(b"\xab" * 16), 42, ROOT)
    raw = cp.sign(KEY)
    text = raw.decode()
    body, _, sigs = text.partition("\n\n")
    assert body.split("\n") == ["mnemolog/" + "ab" * 16, "42", base64.b64encode(ROOT).decode()]
    assert sigs.startswith("— log-key ") and sigs.endswith("\n") and sigs.count("\n") == 1
    blob = base64.b64decode(sigs[len("— log-key ") : -1])
    assert blob[:4] == KEY.note_hash and KEY.verifier.verify(cp.text().encode(), blob[4:])
    assert open_checkpoint(raw, KEY.verifier) == cp
    assert peek_checkpoint(raw) == cp


def test_wrong_key() -> None:
    raw = Checkpoint("o", 1, ROOT).sign(KEY)
    with pytest.raises(VerificationError) as ei:
        open_checkpoint(raw, OTHER.verifier)  # same name, other key: another key hash
    assert ei.value.check == "checkpoint.signer"


def test_forged_signature_under_the_right_key_hash() -> None:
    raw = Checkpoint("o", 1, ROOT).sign(KEY)
    forged = Checkpoint("o", 2, ROOT).text().encode() + b"\n" + raw.split(b"\n\n", 1)[1]
    with pytest.raises(VerificationError) as ei:
        open_checkpoint(forged, KEY.verifier)
    assert ei.value.check == "checkpoint.signature"


def test_two_signers() -> None:
    raw = sign_note("hello\n", KEY, OTHER)
    assert len(parse_note(raw).signatures) == 2
    open_note(raw, KEY.verifier)
    open_note(raw, OTHER.verifier)


def test_non_canonical_base64_in_a_signature_is_refused() -> None:
    raw = Checkpoint("o", 1, ROOT).sign(KEY)
    text, sigline = raw.rstrip(b"\n").rsplit(b"\n", 1)
    b64 = sigline.rsplit(b" ", 1)[1]
    assert b64.endswith(b"=") and not b64.endswith(b"==")
    last = b64[-2:-1]
    alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    twin = bytes([alphabet[alphabet.index(last) ^ 1]])  # differs only in the unused low bits
    mangled = sigline[: -len(b64)] + b64[:-2] + twin + b"="
    assert base64.b64decode(mangled.rsplit(b" ", 1)[1]) == base64.b64decode(b64)
    with pytest.raises(DecodeError):
        open_checkpoint(text + b"\n" + mangled + b"\n", KEY.verifier)


@pytest.mark.parametrize(
    "body",
    [
        "o\n1\n",
        "o\n1\nroot\nextra\n",
        "\n1\n" + base64.b64encode(ROOT).decode() + "\n",
        "o\n01\n" + base64.b64encode(ROOT).decode() + "\n",
        "o\n-1\n" + base64.b64encode(ROOT).decode() + "\n",
        "o\n1\n" + base64.b64encode(ROOT[:31]).decode() + "\n",
        "o\n1\n" + base64.b64encode(ROOT).decode().rstrip("=") + "\n",
        "o\n1 \n" + base64.b64encode(ROOT).decode() + "\n",
    ],
)
def test_malformed_checkpoint_bodies(body: str) -> None:
    raw = sign_note(body, KEY)
    with pytest.raises(DecodeError):
        open_checkpoint(raw, KEY.verifier)


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"text only\n",
        b"text\n\n",
        b"text\n\nno dash line\n",
        b"text\n\n\xe2\x80\x94 name\n",
        b"text\n\n\xe2\x80\x94 name !!!!\n",
        b"text\n\n\xe2\x80\x94 name AAAA\n",  # fewer than 5 bytes
        b"te\x00xt\n\n\xe2\x80\x94 name AAAAAAAA\n",
        b"x" * 70000,
    ],
)
def test_malformed_notes(raw: bytes) -> None:
    with pytest.raises(DecodeError):
        parse_note(raw)


def test_sign_needs_a_final_newline() -> None:
    with pytest.raises(DecodeError):
        sign_note("no newline", KEY)
    with pytest.raises(DecodeError):
        sign_note("bell\x07\n", KEY)
