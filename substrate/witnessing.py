"""A home's witnesses: their configuration, sending checkpoints, keeping the cosignatures, key overlap.

`<home>/witnesses.toml` lists the witnesses (`mnemolog witness add|remove`):

    [options]
    timeout_s = 5                 # per HTTP request
    rotation_overlap_hours = 168  # see below

    [witness.NAME]
    url = "http://127.0.0.1:7380"   # the submission prefix; requests go to <url>/add-checkpoint
    vkey = "name+hash+base64"       # the witness's cosigner key (type 0x04, or 0x01)

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

import json
import os
import random
import re
import sys
import threading
import time
import tomllib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mnemolog.eventlog.cosignature import (
    CosignerVerifier,
    WitnessPolicy,
    add_signature_lines,
    cosignatures,
    require_cosignatures,
)
from mnemolog.eventlog.errors import (
    BadInput,
    DecodeError,
    MnemologError,
    NotFound,
    SignerError,
    UsageError,
    VerificationError,
)
from mnemolog.eventlog.fsio import atomic_write, read_regular
from mnemolog.eventlog.keys import SigningKey, load_private_key
from mnemolog.eventlog.lock import FileLock
from mnemolog.eventlog.log import CHECKPOINT_DIR, Log, checkpoint_name
from mnemolog.eventlog.note import MAX_NOTE_BYTES, MAX_SIGS, NoteSignature, open_checkpoint, parse_note
from mnemolog.eventlog.witness import (
    MAX_RESPONSE_BYTES,
    AddCheckpoint,
    parse_cosignature_response,
    parse_size_body,
)

WITNESSES_FILE = "witnesses.toml"
MAX_FILE = 256 * 1024
MAX_WITNESSES = 32
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
DEFAULT_TIMEOUT_S = 5.0
DEFAULT_OVERLAP_HOURS = 168.0
SCAN_CHECKPOINTS = 64  # how far back to look for a witness's last cosignature before asking it
SYNC_RETRIES = (0.2, 0.6)  # seconds between tries when a witness is unreachable, in the foreground
BACKOFF_MIN_S = 0.5
BACKOFF_MAX_S = 60.0


@dataclass(frozen=True)
class WitnessConfig:
    name: str
    url: str
    key: CosignerVerifier

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "url": self.url, "vkey": self.key.vkey()}


@dataclass(frozen=True)
class WitnessSettings:
    witnesses: tuple[WitnessConfig, ...] = ()
    timeout_s: float = DEFAULT_TIMEOUT_S
    rotation_overlap_hours: float = DEFAULT_OVERLAP_HOURS


def check_name(name: str) -> str:
    if not NAME_RE.match(name):
        raise UsageError(f"a witness name is 1-64 letters, digits, '.', '_' or '-'; found {name[:80]!r}")
    return name


def check_url(url: str) -> str:
    import urllib.parse

    u = url.strip().rstrip("/")
    parts = urllib.parse.urlsplit(u)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
        raise UsageError(f"a witness URL is http(s)://host[:port][/prefix]; found {url[:200]!r}")
    if any(ord(c) < 0x21 or c in '"\\' for c in u):
        raise UsageError("a witness URL must not contain spaces, quotes, backslashes or control characters")
    return u


def _path(root: Path) -> Path:
    return root / WITNESSES_FILE


def load_settings(root: Path) -> WitnessSettings:
    """The home's witness settings; no file means no witnesses."""
    p = _path(root)
    try:
        if p.stat().st_size > MAX_FILE:
            raise BadInput(f"{p} is larger than {MAX_FILE} bytes", file=str(p))
        text = p.read_text("utf-8")
    except FileNotFoundError:
        return WitnessSettings()
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInput(f"cannot read {p}: {exc}", file=str(p)) from exc
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise BadInput(f"{p}: not valid TOML: {exc}", file=str(p)) from exc
    opts = raw.get("options", {})
    table = raw.get("witness", {})
    if not isinstance(opts, dict) or not isinstance(table, dict) or set(raw) - {"options", "witness"}:
        raise BadInput(f"{p}: only [options] and [witness.NAME] tables are allowed", file=str(p))
    out: list[WitnessConfig] = []
    for name, w in table.items():
        where = f"{p}: witness.{name}"
        if not isinstance(w, dict) or set(w) != {"url", "vkey"}:
            raise BadInput(f"{where} needs exactly url and vkey", file=str(p))
        try:
            out.append(
                WitnessConfig(
                    check_name(name), check_url(str(w["url"])), CosignerVerifier.from_vkey(str(w["vkey"]))
                )
            )
        except (UsageError, SignerError) as exc:
            raise BadInput(f"{where}: {exc.message}", file=str(p)) from exc
    timeout = opts.get("timeout_s", DEFAULT_TIMEOUT_S)
    overlap = opts.get("rotation_overlap_hours", DEFAULT_OVERLAP_HOURS)
    for k, v in (("timeout_s", timeout), ("rotation_overlap_hours", overlap)):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0 or v > 10**6:
            raise BadInput(f"{p}: options.{k} must be a non-negative number", file=str(p))
    if float(timeout) <= 0:
        raise BadInput(f"{p}: options.timeout_s must be positive", file=str(p))
    return WitnessSettings(tuple(out), float(timeout), float(overlap))


def _toml_str(s: str) -> str:
    return json.dumps(s, ensure_ascii=False)


def save_settings(root: Path, s: WitnessSettings) -> None:
    lines = [
        "# Witnesses this home sends its checkpoints to (`mnemolog witness add|remove`).",
        "",
        "[options]",
        f"timeout_s = {s.timeout_s!r}",
        f"rotation_overlap_hours = {s.rotation_overlap_hours!r}",
    ]
    for w in s.witnesses:
        lines += [
            "",
            f"[witness.{_toml_str(w.name)}]",
            f"url = {_toml_str(w.url)}",
            f"vkey = {_toml_str(w.key.vkey())}",
        ]
    atomic_write(_path(root), ("\n".join(lines) + "\n").encode())


def add_witness(root: Path, name: str, url: str, vkey: str) -> WitnessConfig:
    try:
        key = CosignerVerifier.from_vkey(vkey)
    except SignerError as exc:
        raise UsageError(f"witness key: {exc.message}", field="vkey") from exc
    cfg = WitnessConfig(check_name(name), check_url(url), key)
    s = load_settings(root)
    if any(w.name == name for w in s.witnesses):
        raise UsageError(f"a witness named {name!r} is configured already (remove it first)")
    if any(w.key == key for w in s.witnesses):
        raise UsageError(f"the key {key.vkey()} is configured already")
    if len(s.witnesses) >= MAX_WITNESSES:
        raise UsageError(f"at most {MAX_WITNESSES} witnesses")
    save_settings(root, WitnessSettings((*s.witnesses, cfg), s.timeout_s, s.rotation_overlap_hours))
    return cfg


def remove_witness(root: Path, name: str) -> WitnessConfig:
    s = load_settings(root)
    gone = [w for w in s.witnesses if w.name == name]
    if not gone:
        raise NotFound(f"no witness named {name!r}")
    save_settings(
        root,
        WitnessSettings(
            tuple(w for w in s.witnesses if w.name != name), s.timeout_s, s.rotation_overlap_hours
        ),
    )
    return gone[0]


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


def require_witnessed(log_dir: Path, size: int, policy: WitnessPolicy) -> dict[str, Any]:
    """The checkpoint covering all `size` entries of the log must carry the policy's cosignatures.

    A checkpoint beyond the log cannot exist in a log that verified, so "at or
    beyond the log's size" is the checkpoint of exactly `size`. Returns what
    `log verify` reports; raises VerificationError (`witness.unwitnessed`,
    `witness.quorum`, `witness.signature`) otherwise.
    """
    rel = f"{CHECKPOINT_DIR}/{checkpoint_name(size)}"
    try:
        raw = read_regular(log_dir / rel, MAX_NOTE_BYTES)
    except FileNotFoundError:
        raw = None
    if raw is None:
        newest = _newest_witnessed(log_dir, size, policy)
        covered = (
            f"the newest checkpoint with enough cosignatures covers {newest}"
            if newest
            else ("no checkpoint carries enough cosignatures")
        )
        raise VerificationError(
            f"the log's {size} entries have no checkpoint of their own, so no witness vouches for "
            f"the last of them; {covered}",
            check="witness.unwitnessed",
            seq=size - 1,
            expected=size,
            found=newest,
        )
    found = require_cosignatures(raw, policy, rel)
    return {
        **policy.describe(),
        "checkpoint": size,
        "cosignatures": [
            {"name": c.witness.name, "vkey": c.witness.vkey(), "timestamp": c.timestamp} for c in found
        ],
    }


def _newest_witnessed(log_dir: Path, below: int, policy: WitnessPolicy) -> int:
    cp_dir = log_dir / CHECKPOINT_DIR
    try:
        sizes = sorted((int(n) for n in os.listdir(cp_dir) if len(n) == 20 and n.isdigit()), reverse=True)
    except FileNotFoundError:
        return 0
    for s in sizes[:SCAN_CHECKPOINTS]:
        if s > below:
            continue
        try:
            require_cosignatures(read_regular(cp_dir / checkpoint_name(s), MAX_NOTE_BYTES), policy, str(s))
            return s
        except (MnemologError, OSError):
            continue
    return 0


def newest_cosigned(log_dir: Path, w: WitnessConfig) -> int:
    """The size of the newest stored checkpoint carrying `w`'s valid cosignature (0: none seen)."""
    return _newest_witnessed(log_dir, 2**64, WitnessPolicy((w.key,), 1))


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
