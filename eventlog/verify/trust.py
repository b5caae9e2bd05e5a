"""Which key signs what, and why a verifier believes it: the key schedule and the trust policy.

Two questions every verification answers, each in exactly one place:

- **Which key signs seq s?** `KeySchedule`. Epoch 0 begins at seq 0 with the
  genesis key; a `key.rotated` entry at seq r begins an epoch at r + 1 with
  the key it announces (the rotation entry itself is signed by the key of the
  epoch it ends). Entry s, and the checkpoint of size s, are signed by
  `key_at(s)`. The log reader, the writer, `log verify`, forensic bundles, log
  exports and replay all ask this one type.
- **Why believe that key?** A `TrustPolicy`, passed explicitly to every
  verifier (in the manner of sigstore's `VerificationPolicy`):
  `PinnedKey` (a key obtained out of band must be in the history),
  `HomeAnchor` (the log id and keys a home holds outside its `log/`), or
  `TrustGenesis` (trust on first use: the genesis key found in the data,
  which proves integrity and internal consistency but not who signed; named
  as such in every report). A policy returns a `TrustReport` naming the anchor
  it used, or raises a VerificationError (exit 8) with a `trust.*` check.

Like the rest of the standalone verifier this module imports only the
standard library, cbor2, pynacl and eventlog modules that obey the same rule.
"""

from __future__ import annotations

import bisect
import os
import stat
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mnemolog.eventlog.errors import DecodeError, SignerError, UsageError, VerificationError
from mnemolog.eventlog.format.entry import Entry
from mnemolog.eventlog.format.keys import MAX_KEY_FILE, VerifierKey, verify_signature
from mnemolog.eventlog.store.fsio import open_regular

GENESIS_TYPE = "log.created"
ROTATION_TYPE = "key.rotated"
KEY_EVENT_TV = 1  # the only type version of log.created and key.rotated
LOG_ID_LEN = 16
ORIGIN_PREFIX = "mnemolog/"


def origin_for(log_id: bytes) -> str:
    """The checkpoint origin line of a log: `mnemolog/<log id in hex>`."""
    return ORIGIN_PREFIX + log_id.hex()


def is_key_event(type_: str) -> bool:
    return type_ in (GENESIS_TYPE, ROTATION_TYPE)


def key_from_data(data: dict[str, Any], what: str, seq: int) -> VerifierKey:
    """The key a genesis or key.rotated payload announces: text `key_name`, bytes(32) `public_key`."""
    name, pk = data.get("key_name"), data.get("public_key")
    if not isinstance(name, str) or not isinstance(pk, bytes):
        raise DecodeError(f"{what} at seq {seq} lacks a text key_name and a byte-string public_key", seq=seq)
    try:
        return VerifierKey(name, pk)
    except SignerError as exc:
        raise DecodeError(f"{what} at seq {seq}: {exc.message}", seq=seq) from exc


def genesis_log_id(genesis: Entry) -> bytes:
    lid = genesis.data.get("log_id")
    if not isinstance(lid, bytes) or len(lid) != LOG_ID_LEN:
        raise DecodeError("the genesis entry's log_id must be 16 bytes", seq=0)
    return lid


@dataclass(frozen=True, slots=True)
class KeyEpoch:
    """A key and the first seq it signs (genesis: 0; a rotation at r: r + 1)."""

    first_seq: int
    key: VerifierKey
    event_seq: int  # the seq of the entry that announced it (0 for genesis)


class KeySchedule:
    """The key history of one log: its log id and epochs in order.

    Built from the genesis entry and extended with each rotation, in seq
    order; every key event's payload is checked as it is added (DecodeError
    on a malformed one). Signatures are checked by `check_entry`, which
    callers that hold the entries in hand use (`from_key_entries` checks the
    key events themselves).
    """

    __slots__ = ("_firsts", "epochs", "log_id")

    def __init__(self, log_id: bytes, epochs: Sequence[KeyEpoch]) -> None:
        if len(log_id) != LOG_ID_LEN or not epochs or epochs[0].first_seq != 0:
            raise DecodeError("a key schedule starts with the genesis key at seq 0 and a 16-byte log id")
        self.log_id = log_id
        self.epochs: list[KeyEpoch] = list(epochs)
        self._firsts = [ep.first_seq for ep in self.epochs]

    @classmethod
    def from_genesis(cls, genesis: Entry) -> KeySchedule:
        """The schedule a genesis entry starts (type, tv, log id and key checked)."""
        if genesis.seq != 0 or genesis.type != GENESIS_TYPE:
            raise DecodeError(f"entry {genesis.seq} of type {genesis.type!r} is not the genesis entry", seq=0)
        if genesis.tv != KEY_EVENT_TV:
            raise DecodeError(f"the genesis entry has tv {genesis.tv}; log.created is tv 1", seq=0)
        lid = genesis_log_id(genesis)
        return cls(lid, [KeyEpoch(0, key_from_data(genesis.data, "genesis entry", 0), 0)])

    def add(self, rotation: Entry) -> KeyEpoch:
        """Extend the history with a `key.rotated` entry (which must come after the last epoch)."""
        seq = rotation.seq
        if rotation.type != ROTATION_TYPE:
            raise DecodeError(f"entry {seq} of type {rotation.type!r} is not a key rotation", seq=seq)
        if rotation.tv != KEY_EVENT_TV:
            raise DecodeError(f"key.rotated at seq {seq} has tv {rotation.tv}; key.rotated is tv 1", seq=seq)
        if seq < self.epochs[-1].first_seq:
            raise DecodeError(f"key.rotated at seq {seq} comes before the epoch it would end", seq=seq)
        key = key_from_data(rotation.data, "key.rotated", seq)
        if key.public_key == self.epochs[-1].key.public_key:
            raise DecodeError(f"key.rotated at seq {seq} rotates to the key already in use", seq=seq)
        ep = KeyEpoch(seq + 1, key, seq)
        self.epochs.append(ep)
        self._firsts.append(ep.first_seq)
        return ep

    @classmethod
    def from_key_entries(cls, entries: Iterable[Entry]) -> KeySchedule:
        """Genesis, then every rotation, each key event's signature checked under the history before it.

        Raises DecodeError for a malformed or out-of-order event and
        VerificationError (`entry.kid`, `entry.signature`) for a bad signature.
        """
        it = iter(entries)
        first = next(it, None)
        if first is None:
            raise DecodeError("the key history must start with the genesis entry (seq 0)")
        ks = cls.from_genesis(first)
        ks.check_entry(first)
        for e in it:
            if e.seq <= ks.epochs[-1].event_seq:
                raise DecodeError(f"key events out of order at {e.seq}", seq=e.seq)
            ks.check_entry(e)  # signed by the key before the rotation
            ks.add(e)
        return ks

    # -- questions ---------------------------------------------------------------

    @property
    def origin(self) -> str:
        return origin_for(self.log_id)

    @property
    def genesis_key(self) -> VerifierKey:
        return self.epochs[0].key

    @property
    def current(self) -> VerifierKey:
        """The key of the last epoch: the one that signs the next entry."""
        return self.epochs[-1].key

    def epoch_at(self, seq: int) -> KeyEpoch:
        """The epoch containing seq `seq`: the latest one beginning at or before it."""
        return self.epochs[bisect.bisect_right(self._firsts, seq) - 1] if seq >= 0 else self.epochs[0]

    def key_at(self, seq: int) -> VerifierKey:
        """The key that signs entry `seq`, and the checkpoint of size `seq`."""
        return self.epoch_at(seq).key

    def below(self, size: int) -> KeySchedule:
        """The history as the first `size` entries know it (rotations at seq < size)."""
        kept = [ep for ep in self.epochs if ep.event_seq < size or ep.first_seq == 0]
        return KeySchedule(self.log_id, kept)

    def find(self, key: VerifierKey) -> KeyEpoch | None:
        """The epoch whose key is `key`: the same public key under the same name."""
        for ep in self.epochs:
            if ep.key.public_key == key.public_key and ep.key.name == key.name:
                return ep
        return None

    def check_entry(self, e: Entry, file: str | None = None) -> None:
        """Key id and signature of entry `e` under this history; VerificationError otherwise."""
        key = self.key_at(e.seq)
        where = f"{file}: " if file else ""
        if e.kid != key.kid:
            raise VerificationError(
                f"{where}entry {e.seq} is signed by key {e.kid.hex()}, "
                f"but the key history says {key.kid.hex()}",
                check="entry.kid",
                seq=e.seq,
                file=file,
                expected=key.kid.hex(),
                found=e.kid.hex(),
            )
        if not verify_signature(key.public_key, e.tbs(), e.sig):
            raise VerificationError(
                f"{where}the signature of entry {e.seq} does not verify with key {key.kid.hex()}",
                check="entry.signature",
                seq=e.seq,
                file=file,
                expected=key.vkey(),
            )

    def admit(
        self, entries: Iterable[Entry], signatures_from: int, signed_here: Mapping[int, bytes] | None = None
    ) -> Iterator[Entry]:
        """`entries` (in seq order, continuing this history) each held to the key history.

        For a reader that folds entries without verifying the whole log: every
        entry's key id must be its epoch's (a comparison: it costs nothing), and
        the signature is checked on key events (they extend the history) and on
        every entry at seq >= `signatures_from`, the ones no stored checkpoint
        covers yet. The history grows with each rotation met. Raises
        VerificationError (`entry.kid`, `entry.signature`) pointing at `log verify`.

        `signed_here` (seq -> leaf hash): entries the caller's own writer has just
        signed and appended. An entry read back with that leaf hash is those very
        bytes (SHA-256), signature included, so its signature is not checked again;
        one with any other bytes is checked as every other entry is.
        """
        own = signed_here or {}
        for e in entries:
            key = self.key_at(e.seq)
            try:
                if e.kid != key.kid:
                    self.check_entry(e)  # raises entry.kid
                if e.type == ROTATION_TYPE or (e.seq >= signatures_from and own.get(e.seq) != e.leaf):
                    self.check_entry(e)
            except VerificationError as exc:
                raise exc.restated(
                    f"{exc.message}: an entry outside the log's key history is not served; "
                    "run `mnemolog log verify`"
                ) from exc
            if e.type == ROTATION_TYPE:
                self.add(e)
            yield e

    def packed(self) -> list[tuple[int, bytes, bytes]]:
        """(first seq, public key, key id) per epoch: a picklable form for worker processes."""
        return [(ep.first_seq, ep.key.public_key, ep.key.kid) for ep in self.epochs]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, KeySchedule) and (self.log_id, self.epochs) == (other.log_id, other.epochs)

    def __hash__(self) -> int:
        return hash((self.log_id, tuple(self.epochs)))

    def __repr__(self) -> str:
        eps = ", ".join(f"{ep.first_seq}:{ep.key.kid.hex()}" for ep in self.epochs)
        return f"KeySchedule({self.log_id.hex()}, [{eps}])"


# -- trust policies -----------------------------------------------------------------


@dataclass(frozen=True)
class TrustReport:
    """The anchor a verification used, for its report (`to_json`) and its text (`describe`)."""

    anchor: str  # "pinned", "home" or "genesis"
    key: str  # the anchoring key (vkey form)
    detail: str
    epoch_from_seq: int | None = None
    log_id: str | None = None

    @property
    def pinned(self) -> bool:
        return self.anchor == "pinned"

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"anchor": self.anchor, "key": self.key, "pinned": self.pinned}
        if self.epoch_from_seq is not None:
            out["epoch_from_seq"] = self.epoch_from_seq
        if self.log_id is not None:
            out["log_id"] = self.log_id
        if self.anchor == "genesis":
            out["note"] = self.detail
        return out

    def describe(self) -> str:
        return self.detail


class TrustPolicy:
    """What a verifier believes, checked against the key history it found; see the module docstring."""

    name = "policy"

    def check(self, schedule: KeySchedule) -> TrustReport:  # pragma: no cover - abstract
        raise NotImplementedError

    def check_genesis(self, schedule: KeySchedule) -> None:
        """What the policy can already refuse from the genesis entry alone (a foreign log id or
        genesis key), so a verifier reports a foreign log before anything that follows from it."""


@dataclass(frozen=True)
class PinnedKey(TrustPolicy):
    """A key obtained out of band (the genesis key or a later one) that the history must contain."""

    key: VerifierKey
    name = "pinned"

    def check(self, schedule: KeySchedule) -> TrustReport:
        ep = schedule.find(self.key)
        if ep is None:
            raise VerificationError(
                f"the trusted key {self.key.vkey()} is not in the log's key history",
                check="trust.key",
                seq=0,
                expected=self.key.vkey(),
                found=[e.key.vkey() for e in schedule.epochs],
            )
        return TrustReport(
            "pinned",
            self.key.vkey(),
            f"pinned key {self.key.vkey()} (in the key history from seq {ep.first_seq})",
            epoch_from_seq=ep.first_seq,
            log_id=schedule.log_id.hex(),
        )


@dataclass(frozen=True)
class HomeAnchor(TrustPolicy):
    """A home's own record of its log, kept outside `log/`: the log id and the public keys it holds.

    The log must carry this log id (when the home records one) and start with
    a genesis key the home holds. `source` says where the record came from.
    """

    log_id: bytes | None
    keys: tuple[VerifierKey, ...]
    source: str = "home"
    name = "home"

    def check_genesis(self, schedule: KeySchedule) -> None:
        self.check(schedule.below(1))

    def check(self, schedule: KeySchedule) -> TrustReport:
        if self.log_id is not None and schedule.log_id != self.log_id:
            raise VerificationError(
                f"the log is not this home's: its log id is {schedule.log_id.hex()}, the home's "
                f"{self.log_id.hex()} ({self.source})",
                check="trust.log_id",
                seq=0,
                expected=self.log_id.hex(),
                found=schedule.log_id.hex(),
            )
        g = schedule.genesis_key
        if not any(k.public_key == g.public_key and k.name == g.name for k in self.keys):
            raise VerificationError(
                f"the log's genesis key {g.vkey()} is not a key this home holds ({self.source})",
                check="trust.genesis_key",
                seq=0,
                expected=[k.vkey() for k in self.keys],
                found=g.vkey(),
            )
        lid = "log id and " if self.log_id is not None else ""
        return TrustReport(
            "home",
            g.vkey(),
            f"the home's own {lid}genesis key {g.vkey()} ({self.source})",
            epoch_from_seq=0,
            log_id=schedule.log_id.hex(),
        )


@dataclass(frozen=True)
class TrustGenesis(TrustPolicy):
    """Trust on first use: the genesis key found in the data anchors trust. Named as such in reports."""

    name = "genesis"

    def check(self, schedule: KeySchedule) -> TrustReport:
        return TrustReport(
            "genesis",
            schedule.genesis_key.vkey(),
            "no key was pinned: the genesis key found in the data anchors trust (trust on first "
            "use), which proves integrity and internal consistency, not who signed; pin a key "
            "with --trusted-key",
            epoch_from_seq=0,
            log_id=schedule.log_id.hex(),
        )


TRUST_GENESIS = TrustGenesis()


def parse_key_arg(text: str, option: str = "--trusted-key") -> VerifierKey:
    """A verifier key given on a command line: `name+hash+base64`, or a file holding one.

    Anything malformed (not a key, an unreadable or oversized file) is a usage
    error (exit 64); a well-formed key that the log does not hold is a
    verification failure (exit 8), decided by the policy.
    """
    if not isinstance(text, str) or not text.strip():
        raise UsageError(f"{option}: empty key", field=option.lstrip("-"))
    body = text
    looks_like_key = text.count("+") >= 2 and "\n" not in text.strip()
    if not looks_like_key or os.path.isfile(text):
        try:
            st = os.stat(text)
        except (OSError, ValueError) as exc:
            raise UsageError(
                f"{option}: {text[:80]!r} is neither a verifier key (name+hash+base64) nor a key file",
                field=option.lstrip("-"),
            ) from exc
        if not stat.S_ISREG(st.st_mode):
            raise UsageError(f"{option}: {text} is not a regular file", field=option.lstrip("-"))
        if st.st_size > MAX_KEY_FILE:
            raise UsageError(
                f"{option}: {text} is larger than a key file ({MAX_KEY_FILE} bytes)", field=option.lstrip("-")
            )
        try:
            with open_regular(text) as f:
                body = f.read(MAX_KEY_FILE + 1).decode("utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"{option}: cannot read {text}: {exc}", field=option.lstrip("-")) from exc
    try:
        return VerifierKey.from_vkey(body)
    except SignerError as exc:
        raise UsageError(f"{option}: {exc.message}", field=option.lstrip("-")) from exc
