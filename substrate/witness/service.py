"""Sending a home's checkpoints to its witnesses and keeping their cosignatures with them.

The witnesses are configured in `<home>/witnesses.toml` (substrate.witness_config);
what verification requires of the cosignatures is substrate.witness_checks.

`CheckpointPublisher.publish(size)` sends the stored checkpoint of that size
to every witness (C2SP tlog-witness add-checkpoint, with a consistency proof
from the size the witness cosigned last, learnt from its 409 answer when
unknown) and appends each valid cosignature to the checkpoint file as one
more signature line, so the file stays a C2SP signed note that verifies with
the log key alone. A witness that is down or refuses is reported in the
result and never fails anything: checkpoints are published after the
entries they cover were acknowledged. `BackgroundPublisher` does the same
from a thread, with exponential backoff per witness, for long-lived writers.

A witness answering that it cosigned a *larger* tree than this log holds
(`ahead`), or another root at the same size / a proof that does not verify
from its state (`forked`), is evidence that this home was rolled back or
forked: someone the operator does not control remembers more.

Key rotation overlap: for `rotation_overlap_hours` after a `key.rotated`
entry, each published checkpoint also carries a signature by the previous
key (when its private key is still in `keys/retired/`), so a witness that
still trusts only the old key keeps cosigning while its operator adds the
new one. Verifiers ignore that line: the log's key schedule names the new
key for those checkpoints.
"""

from __future__ import annotations

import os
import random
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mnemolog.eventlog.errors import (
    DecodeError,
    MnemologError,
    NotFound,
    SignerError,
    VerificationError,
)
from mnemolog.eventlog.format.keys import SigningKey, load_private_key
from mnemolog.eventlog.format.note import MAX_NOTE_BYTES, MAX_SIGS, NoteSignature, open_checkpoint, parse_note
from mnemolog.eventlog.store.fsio import atomic_write, read_regular
from mnemolog.eventlog.store.lock import FileLock
from mnemolog.eventlog.store.log import CHECKPOINT_DIR, Log, checkpoint_name
from mnemolog.eventlog.witness.cosignature import (
    add_signature_lines,
    cosignatures,
)
from mnemolog.eventlog.witness.protocol import (
    MAX_RESPONSE_BYTES,
    AddCheckpoint,
    parse_cosignature_response,
    parse_size_body,
)
from mnemolog.substrate.witness.config import WitnessConfig, WitnessSettings, load_settings

SCAN_CHECKPOINTS = 64  # how far back to look for a witness's last cosignature before asking it
SYNC_RETRIES = (0.2, 0.6)  # seconds between tries when a witness is unreachable, in the foreground
BACKOFF_MIN_S = 0.5
BACKOFF_MAX_S = 60.0


# -- keeping signatures with the checkpoint ------------------------------------


def keep_signatures(log_dir: Path, size: int, lines: Sequence[NoteSignature]) -> bytes:
    """Append `lines` to the stored checkpoint of `size` (once each); return the file's bytes.

    Read, merge and atomic rewrite under a lock of its own (not the writer's:
    appends never wait for a witness), so two publishers never drop each
    other's lines. The note's text and existing lines stay byte for byte.
    """
    path = log_dir / CHECKPOINT_DIR / checkpoint_name(size)
    with FileLock(log_dir / ".cosign.lock", 30.0, "cosignature lock"):
        raw = read_regular(path, MAX_NOTE_BYTES)
        merged = add_signature_lines(raw, lines, MAX_SIGS)
        if merged is None:
            return raw
        atomic_write(path, merged)
        return merged


def overlap_signer(log: Log, keys_dir: Path, size: int, hours: float, now_us: int) -> SigningKey | None:
    """The previous log key, while a recent rotation's overlap window lasts and its private key is kept."""
    if hours <= 0:
        return None
    epochs = log.key_history(size)
    if len(epochs) < 2:
        return None
    last, before = epochs[-1], epochs[-2]
    if size < last.first_seq:
        return None
    rotated_at = log.entry(last.event_seq).ts
    if now_us - rotated_at > hours * 3600e6:
        return None
    path = keys_dir / "retired" / f"{before.key.kid.hex()}.key"
    if not path.exists():
        return None
    try:
        key = load_private_key(path)
    except SignerError:
        return None
    return key if key.public_key == before.key.public_key else None


# -- publishing ----------------------------------------------------------------


@dataclass
class WitnessResult:
    """What one witness answered for one checkpoint.

    status: cosigned | unreachable | refused | ahead (it cosigned a larger
    tree: this log was rolled back) | forked (another root at its size, or a
    proof from its state that does not verify).
    """

    name: str
    url: str
    status: str
    size: int
    message: str = ""
    timestamp: int | None = None
    witness_size: int | None = None

    @property
    def alarming(self) -> bool:
        return self.status in ("ahead", "forked")

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"name": self.name, "url": self.url, "status": self.status, "size": self.size}
        if self.message:
            d["message"] = self.message
        if self.timestamp is not None:
            d["timestamp"] = self.timestamp
        if self.witness_size is not None:
            d["witness_size"] = self.witness_size
        return d

    def describe(self) -> str:
        tail = f": {self.message}" if self.message else ""
        return f"witness {self.name} ({self.url}): {self.status} at size {self.size}{tail}"


class CheckpointPublisher:
    """Sends one home's checkpoints to its witnesses and keeps their cosignatures."""

    def __init__(
        self,
        log_dir: Path,
        keys_dir: Path,
        settings: WitnessSettings,
        *,
        wall_clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        import httpx

        self.log_dir = log_dir
        self.keys_dir = keys_dir
        self.settings = settings
        self.wall_clock = wall_clock
        self.sleep = sleep
        self._known: dict[str, int] = {}  # witness name -> the size it cosigned last, as far as we know
        self._client = httpx.Client(timeout=settings.timeout_s, follow_redirects=False, trust_env=False)
        self._lock = threading.Lock()

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> CheckpointPublisher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def publish(
        self,
        size: int | None = None,
        only: Sequence[str] | None = None,
        retries: Sequence[float] = SYNC_RETRIES,
    ) -> list[WitnessResult]:
        """Send the stored checkpoint of `size` (default: the newest) to the witnesses; keep cosignatures."""
        with self._lock, Log(self.log_dir) as log:
            log.refresh()
            sizes = log.checkpoint_sizes()
            if not sizes:
                raise NotFound("the log has no checkpoint to publish")
            n = sizes[-1] if size is None else size
            raw = log.checkpoint_bytes(n)
            where = str(self.log_dir / CHECKPOINT_DIR / checkpoint_name(n))
            cp = open_checkpoint(raw, log.key_at(n), where)
            old_key = overlap_signer(
                log, self.keys_dir, n, self.settings.rotation_overlap_hours, int(self.wall_clock() * 1e6)
            )
            if old_key is not None:
                text = parse_note(raw, where).text
                overlap = NoteSignature(old_key.name, old_key.note_hash, old_key.sign(text.encode()))
                raw = keep_signatures(self.log_dir, n, [overlap])
            text = parse_note(raw, where).text
            results: list[WitnessResult] = []
            lines: list[NoteSignature] = []
            for w in self.settings.witnesses:
                if only is not None and w.name not in only:
                    continue
                res, cosig = self._send(w, log, raw, cp.size, text, retries)
                results.append(res)
                if cosig is not None:
                    lines.append(cosig)
            if lines:
                keep_signatures(self.log_dir, n, lines)
            return results

    def _hint(self, w: WitnessConfig, log: Log, size: int) -> int:
        known = self._known.get(w.name)
        if known is not None and known <= size:
            return known
        for s in reversed([s for s in log.checkpoint_sizes() if s <= size][-SCAN_CHECKPOINTS:]):
            try:
                note = parse_note(log.checkpoint_bytes(s))
                if cosignatures(note, [w.key]):
                    return s
            except (MnemologError, OSError):
                continue
        return 0

    def _post(self, w: WitnessConfig, body: bytes) -> tuple[int, bytes]:
        with self._client.stream("POST", w.url + "/add-checkpoint", content=body) as r:
            data = b""
            for chunk in r.iter_bytes():
                data += chunk
                if len(data) > MAX_RESPONSE_BYTES:
                    raise DecodeError(f"the witness's answer is larger than {MAX_RESPONSE_BYTES} bytes")
            return r.status_code, data

    def _send(
        self, w: WitnessConfig, log: Log, raw: bytes, size: int, text: str, retries: Sequence[float]
    ) -> tuple[WitnessResult, NoteSignature | None]:
        import httpx

        def result(status: str, message: str = "", **kw: Any) -> WitnessResult:
            return WitnessResult(w.name, w.url, status, size, message, **kw)

        old = self._hint(w, log, size)
        waits = list(retries)
        conflicts = 0
        while True:
            proof = [] if old in (0, size) else log.consistency_proof(old, size)
            try:
                status, data = self._post(w, AddCheckpoint(old, tuple(proof), raw).encode())
            except httpx.HTTPError as exc:
                if waits:
                    self.sleep(waits.pop(0))
                    continue
                return result("unreachable", f"{type(exc).__name__}: {exc}"), None
            except DecodeError as exc:
                return result("refused", exc.message), None
            if status == 200:
                try:
                    cos = parse_cosignature_response(data, text, w.key)
                except (DecodeError, VerificationError) as exc:
                    return result("refused", f"answered 200 without a valid cosignature: {exc.message}"), None
                self._known[w.name] = size
                return result("cosigned", timestamp=cos.timestamp), cos.line
            if status == 409:
                try:
                    theirs = parse_size_body(data)
                except DecodeError as exc:
                    return result("refused", f"409 with a malformed body: {exc.message}"), None
                self._known[w.name] = theirs
                if theirs > size:
                    return result(
                        "ahead",
                        f"the witness cosigned a tree of size {theirs}, larger than this log's {size}: "
                        "entries it saw are gone (rollback) or the log forked",
                        witness_size=theirs,
                    ), None
                if theirs == old or conflicts >= 2:
                    return result(
                        "forked",
                        f"the witness cosigned size {theirs} with another root than this log has",
                        witness_size=theirs,
                    ), None
                conflicts += 1
                old = theirs
                continue
            if status == 422:
                return result(
                    "forked",
                    f"the witness's tree of size {old} is not a prefix of this log "
                    "(it refused the consistency proof)",
                    witness_size=old,
                ), None
            message = data[:300].decode("utf-8", "replace").strip()
            return result("refused", f"HTTP {status}: {message}"), None


def publish_checkpoint(
    home_root: Path, log_dir: Path, keys_dir: Path, size: int | None = None
) -> list[WitnessResult]:
    """Send a stored checkpoint to every configured witness now; [] when none is configured."""
    settings = load_settings(home_root)
    if not settings.witnesses:
        return []
    with CheckpointPublisher(log_dir, keys_dir, settings) as pub:
        return pub.publish(size)


def stderr_reporter(res: WitnessResult) -> None:
    print(f"mnemolog: {res.describe()}", file=sys.stderr)


@dataclass
class _Due:
    at: float = 0.0
    backoff: float = BACKOFF_MIN_S
    size: int = 0  # the newest size this witness has cosigned through us
    last_status: str = ""


class BackgroundPublisher:
    """Publishes checkpoints from a thread: `submit` never blocks, failures are retried with backoff.

    Only the newest checkpoint matters (a cosignature of it covers the older
    ones through the consistency proof), so pending work is one size. A
    witness that is unreachable is retried after 0.5 s, 1 s, 2 s, ... up to
    60 s (with jitter); each change of a witness's status is reported once.
    """

    def __init__(
        self,
        publisher: CheckpointPublisher,
        report: Callable[[WitnessResult], None] = stderr_reporter,
    ) -> None:
        self.publisher = publisher
        self.report = report
        self._cond = threading.Condition()
        self._pending = 0
        self._closed = False
        self._due = {w.name: _Due() for w in publisher.settings.witnesses}
        self.results: dict[str, WitnessResult] = {}
        self._thread = threading.Thread(target=self._run, name="mnemolog-witness", daemon=True)
        self._thread.start()

    def submit(self, size: int) -> None:
        with self._cond:
            if size > self._pending:
                self._pending = size
                for d in self._due.values():
                    if d.last_status != "unreachable":
                        d.at = 0.0
                self._cond.notify()

    def _next_wait(self, now: float) -> tuple[list[str], float | None]:
        ready, wait = [], None
        for name, d in self._due.items():
            if d.size >= self._pending:
                continue
            if d.at <= now:
                ready.append(name)
            else:
                wait = d.at - now if wait is None else min(wait, d.at - now)
        return ready, wait

    def _run(self) -> None:
        while True:
            with self._cond:
                while True:
                    if self._closed:
                        return
                    ready, wait = self._next_wait(time.monotonic())
                    if ready and self._pending:
                        size = self._pending
                        break
                    self._cond.wait(wait)
            try:
                results = self.publisher.publish(size, only=ready, retries=())
            except (MnemologError, OSError) as exc:
                results = [WitnessResult(n, "", "unreachable", size, f"cannot publish: {exc}") for n in ready]
            now = time.monotonic()
            with self._cond:
                for r in results:
                    d = self._due[r.name]
                    if r.status == "cosigned":
                        d.size, d.backoff, d.at = r.size, BACKOFF_MIN_S, 0.0
                    elif r.status == "unreachable":
                        d.at = now + d.backoff * (0.5 + random.random())
                        d.backoff = min(d.backoff * 2, BACKOFF_MAX_S)
                    else:
                        # A refusal is not fixed by asking again soon; try with the next checkpoint.
                        d.size = r.size
                    changed = r.status != d.last_status
                    d.last_status = r.status
                    self.results[r.name] = r
                    if changed:
                        self.report(r)

    def wait_idle(self, timeout: float) -> bool:
        """Until every witness has answered for the newest submitted checkpoint (tests, close)."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            with self._cond:
                if all(d.size >= self._pending for d in self._due.values()):
                    return True
            time.sleep(0.01)
        return False

    def close(self, timeout: float = 2.0) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join(timeout)
        if not self._thread.is_alive():
            self.publisher.close()


class CheckpointWatcher:
    """For long-lived processes: sends every new checkpoint of the log to the witnesses.

    It notices checkpoints by listing `log/checkpoints/` (once a second by
    default), whoever wrote them — this process's periodic or closing
    checkpoints, or another process's — and hands the newest to a
    `BackgroundPublisher`. It never touches the writer, so appends never
    wait for it. `close` sends the newest checkpoint once more and waits a
    bounded time (the configured timeout) for the witnesses to answer.
    """

    def __init__(
        self,
        log_dir: Path,
        keys_dir: Path,
        settings: WitnessSettings,
        *,
        interval: float = 1.0,
        report: Callable[[WitnessResult], None] = stderr_reporter,
    ) -> None:
        self.log_dir = log_dir
        self.interval = interval
        self.timeout = settings.timeout_s
        self.publisher = BackgroundPublisher(CheckpointPublisher(log_dir, keys_dir, settings), report)
        self._stop = threading.Event()
        self._seen = 0
        self._thread = threading.Thread(target=self._run, name="mnemolog-witness-watch", daemon=True)
        self._thread.start()

    def _newest(self) -> int:
        try:
            names = os.listdir(self.log_dir / CHECKPOINT_DIR)
        except OSError:
            return 0
        return max((int(n) for n in names if len(n) == 20 and n.isdigit()), default=0)

    def poke(self) -> None:
        newest = self._newest()
        if newest > self._seen:
            self._seen = newest
            self.publisher.submit(newest)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.poke()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(self.interval + 1)
        self.poke()
        self.publisher.wait_idle(self.timeout)
        self.publisher.close()


def start_watcher(
    home_root: Path, log_dir: Path, keys_dir: Path, interval: float = 1.0
) -> CheckpointWatcher | None:
    """A watcher when the home has witnesses configured, else None (nothing runs)."""
    settings = load_settings(home_root)
    if not settings.witnesses:
        return None
    return CheckpointWatcher(log_dir, keys_dir, settings, interval=interval)
