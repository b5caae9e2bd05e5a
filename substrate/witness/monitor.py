"""`mnemolog monitor`: follow a log published as C2SP tlog-tiles and alarm on any fork or rollback.

A run fetches the published checkpoint, opens it with the trust anchor
(a pinned log key, remembered in the state file after the first run),
requires the witnesses' cosignatures when asked, and then reads the hash
tiles that cover the entries new since the checkpoint it saw last. The
state file keeps the right edge of the tree it verified (the partial tile
of every level: at most 255 hashes a level), which is exactly what the
next run needs:

- the level-0 tiles of the new range give the new leaf hashes, and the
  part of the first one already seen must equal the remembered edge;
- every hash of a tile above level 0 must be the hash of the full tile
  below it (c2sp.org/tlog-tiles), checked for every hash the new range adds;
- the root folded from the new edge must be the new checkpoint's root. As
  the new edge was built from the old one, that proves the new tree extends
  the old (consistency) and includes every new leaf (inclusion);
- with `entries`, every new entry (or its large-entry file) hashes to its leaf.

A smaller size than seen before is a rollback, another root at the same or
a larger size a fork: VerificationError (exit 8) naming both sizes and
roots, and the state is left as it was, so the next run alarms again.
Sources are `http(s)://` (bounded reads, a deadline per response, no
redirects), `file://` or a directory; only paths built here are fetched.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import unquote, urlsplit

from mnemolog.eventlog.errors import DecodeError, StorageError, UsageError, VerificationError
from mnemolog.eventlog.format import merkle
from mnemolog.eventlog.format.keys import VerifierKey
from mnemolog.eventlog.format.note import MAX_NOTE_BYTES, open_checkpoint
from mnemolog.eventlog.store.fsio import FileTooLarge, NotRegularFile, atomic_write, read_regular
from mnemolog.eventlog.store.segments import MAX_ENTRY_BYTES
from mnemolog.eventlog.verify.trust import parse_key_arg
from mnemolog.eventlog.witness import tiles
from mnemolog.eventlog.witness.cosignature import WitnessPolicy, require_cosignatures

STATE_VERSION = 1
MAX_STATE_BYTES = 1 << 20
DEFAULT_TIMEOUT_S = 10.0
_REL = re.compile(
    r"^(checkpoint|tile/(0|[1-9]|[1-5][0-9]|6[0-3])/(x[0-9]{3}/)*[0-9]{3}(\.p/[1-9][0-9]{0,2})?"
    r"|tile/entries/(x[0-9]{3}/)*[0-9]{3}(\.p/[1-9][0-9]{0,2})?|large-entry/(x[0-9]{3}/)*[0-9]{3})$"
)


class TooLarge(Exception):
    """A response longer than the resource may be."""


class Source(Protocol):
    where: str

    def get(self, rel: str, limit: int) -> bytes | None:
        """The resource's bytes (at most `limit`), None when it does not exist."""


def check_rel(rel: str) -> str:
    """Only the resource names of tlog-tiles (and large-entry/) are ever fetched."""
    if not _REL.match(rel):
        raise UsageError(f"{rel!r} is not a tlog-tiles resource path")
    return rel


class DirSource:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.where = str(root).rstrip("/") + "/"

    def get(self, rel: str, limit: int) -> bytes | None:
        path = self.root / check_rel(rel)
        try:
            return read_regular(path, limit)
        except FileNotFoundError:
            return None
        except FileTooLarge as exc:
            raise TooLarge(str(exc)) from exc
        except NotRegularFile as exc:
            raise StorageError(f"{path} is not a regular file", file=str(path)) from exc
        except OSError as exc:
            raise StorageError(f"cannot read {path}: {exc}", file=str(path)) from exc


class HttpSource:
    def __init__(self, prefix: str, timeout_s: float) -> None:
        import httpx

        self.prefix = prefix if prefix.endswith("/") else prefix + "/"
        self.where = self.prefix
        self.timeout_s = timeout_s
        self._client = httpx.Client(
            timeout=httpx.Timeout(timeout_s, connect=timeout_s),
            follow_redirects=False,
            trust_env=False,
            headers={"Accept-Encoding": "gzip, identity"},
        )

    def close(self) -> None:
        self._client.close()

    def get(self, rel: str, limit: int) -> bytes | None:
        import httpx

        url = self.prefix + check_rel(rel)
        # A read timeout bounds silence; the deadline bounds a server that trickles bytes forever.
        deadline = time.monotonic() + 3 * self.timeout_s
        try:
            with self._client.stream("GET", url) as r:
                if r.status_code == 404:
                    return None
                if r.status_code != 200:
                    raise StorageError(f"GET {url}: HTTP {r.status_code}", url=url, status=r.status_code)
                declared = r.headers.get("content-length")
                if declared is not None and declared.isdigit() and int(declared) > limit:
                    raise TooLarge(f"GET {url}: {declared} bytes, at most {limit} expected")
                buf = bytearray()
                for chunk in r.iter_bytes():
                    buf += chunk
                    if len(buf) > limit:
                        raise TooLarge(f"GET {url}: more than {limit} bytes")
                    if time.monotonic() > deadline:
                        raise StorageError(
                            f"GET {url}: the response did not end within {3 * self.timeout_s:g}s", url=url
                        )
                return bytes(buf)
        except httpx.HTTPError as exc:
            raise StorageError(f"GET {url}: {type(exc).__name__}: {exc}", url=url) from exc


def open_source(url: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> DirSource | HttpSource:
    """`http(s)://` prefix, `file://` URL or directory; `..`, queries and fragments are refused."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme in ("http", "https", "file"):
        if parts.query or parts.fragment or "?" in url or "#" in url:
            raise UsageError(f"{url}: a log prefix has no query or fragment")
        segments = unquote(parts.path).split("/")
        if ".." in segments or "." in segments:
            raise UsageError(f"{url}: '..' or '.' in the path of a log prefix")
        if scheme == "file":
            if parts.netloc not in ("", "localhost"):
                raise UsageError(f"{url}: a file:// URL names a local path")
            return DirSource(Path(unquote(parts.path)))
        if not parts.hostname:
            raise UsageError(f"{url}: no host")
        return HttpSource(url, timeout_s)
    if "://" in url:
        raise UsageError(f"{url}: only http://, https://, file:// or a directory")
    if ".." in Path(url).parts:
        raise UsageError(f"{url}: '..' in the path of a log prefix")
    return DirSource(Path(url))


# -- state ----------------------------------------------------------------------------


@dataclass
class MonitorState:
    origin: str
    key: str
    size: int
    root: bytes
    checkpoint: str
    edge: list[list[bytes]]

    def to_json(self) -> dict[str, Any]:
        return {
            "version": STATE_VERSION,
            "origin": self.origin,
            "key": self.key,
            "size": self.size,
            "root": base64.b64encode(self.root).decode(),
            "checkpoint": self.checkpoint,
            "edge": [[base64.b64encode(h).decode() for h in lv] for lv in self.edge],
        }


def load_state(path: Path) -> MonitorState | None:
    try:
        raw = read_regular(path, MAX_STATE_BYTES)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise StorageError(f"cannot read the monitor state {path}: {exc}", file=str(path)) from exc
    try:
        d = json.loads(raw)
        if not isinstance(d, dict):
            raise ValueError("not a JSON object")
        if d.get("version") != STATE_VERSION:
            raise ValueError(f"version {d.get('version')!r}")
        edge = [[base64.b64decode(h, validate=True) for h in lv] for lv in d["edge"]]
        st = MonitorState(
            str(d["origin"]),
            str(d["key"]),
            int(d["size"]),
            base64.b64decode(d["root"], validate=True),
            str(d["checkpoint"]),
            edge,
        )
    except (ValueError, KeyError, TypeError, AttributeError, OverflowError, binascii.Error) as exc:
        raise StorageError(f"the monitor state {path} is malformed: {exc}", file=str(path)) from exc
    # The state must describe its own tree: its edge folds to its root.
    if (
        st.size < 0
        or len(st.edge) != tiles.levels(st.size)
        or any(len(st.edge[lv]) != (st.size >> (8 * lv)) % 256 for lv in range(len(st.edge)))
        or any(len(h) != merkle.HASH_LEN for lv in st.edge for h in lv)
        or tiles.root_from_edge(st.edge) != st.root
    ):
        raise StorageError(f"the monitor state {path} does not describe the tree it names", file=str(path))
    return st


# -- the run --------------------------------------------------------------------------


@dataclass
class MonitorReport:
    url: str
    origin: str
    size: int
    root: str
    previous_size: int
    previous_root: str | None
    new_entries: int
    tiles_fetched: int = 0
    entries_checked: int = 0
    large_entries: int = 0
    witnesses: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _b64(h: bytes) -> str:
    return base64.b64encode(h).decode()


def _alarm(check: str, message: str, **where: Any) -> VerificationError:
    return VerificationError(message, check=check, **where)


def _fetch(src: Source, rel: str, limit: int, *, required: bool = True) -> bytes:
    try:
        data = src.get(rel, limit)
    except TooLarge as exc:
        raise _alarm("monitor.oversized", f"{src.where}{rel}: {exc}", file=rel) from exc
    if data is None:
        raise _alarm("monitor.missing", f"{src.where}{rel} is missing, but the checkpoint needs it", file=rel)
    return data


def monitor(
    src: Source,
    state_path: Path | None,
    *,
    trusted_key: str | None = None,
    witnesses: WitnessPolicy | None = None,
    check_entries: bool = False,
    progress: Callable[[int], None] | None = None,
) -> MonitorReport:
    """One monitoring round against `src`; raises VerificationError (exit 8) on an alarm."""
    state = load_state(state_path) if state_path is not None else None
    key: VerifierKey
    if trusted_key is not None:
        key = parse_key_arg(trusted_key)
    elif state is not None:
        key = parse_key_arg(state.key, "the state's key")
    else:
        raise UsageError(
            "the first run needs --trusted-key (the log's public key); later runs read it from --state"
        )
    raw = _fetch(src, "checkpoint", MAX_NOTE_BYTES)
    where = f"{src.where}checkpoint"
    try:
        cp = open_checkpoint(raw, key, where)
    except DecodeError as exc:
        raise _alarm("monitor.checkpoint", f"{where}: {exc.message}", file=where) from exc
    cos = require_cosignatures(raw, witnesses, where) if witnesses is not None else []
    s0, r0 = (state.size, state.root) if state else (0, merkle.EMPTY_ROOT)
    edge0 = state.edge if state else []
    if state is not None and state.origin != cp.origin:
        raise _alarm(
            "monitor.origin",
            f"{where} now names the log {cp.origin}, not {state.origin} seen before",
            expected=state.origin,
            found=cp.origin,
        )
    sizes = {"size": cp.size, "root": _b64(cp.root), "previous_size": s0, "previous_root": _b64(r0)}
    if cp.size < s0:
        raise _alarm(
            "monitor.rollback",
            f"ROLLBACK: {src.where} serves size {cp.size} (root {_b64(cp.root)}), but size {s0} "
            f"(root {_b64(r0)}) was seen before",
            **sizes,
        )
    if cp.size == s0 and cp.root != r0:
        raise _alarm(
            "monitor.fork",
            f"FORK: {src.where} serves size {cp.size} with root {_b64(cp.root)}, but root {_b64(r0)} "
            "was seen before at that size",
            **sizes,
        )
    report = MonitorReport(
        src.where, cp.origin, cp.size, _b64(cp.root), s0, _b64(r0) if state else None, cp.size - s0
    )
    report.witnesses = [
        {"name": c.witness.name, "vkey": c.witness.vkey(), "timestamp": c.timestamp} for c in cos
    ]
    edge1, leaves = _walk_tiles(src, s0, cp.size, edge0, report, progress)
    got = tiles.root_from_edge(edge1)
    if got != cp.root:
        raise _alarm(
            "monitor.fork",
            (
                f"FORK: {src.where} serves size {cp.size} with root {_b64(cp.root)}, but its tiles, "
                f"extending size {s0} (root {_b64(r0)}) seen before, give root {_b64(got)}"
            )
            if state
            else f"{where}: the tiles give root {_b64(got)}, the checkpoint says {_b64(cp.root)}",
            **sizes,
            tiles_root=_b64(got),
        )
    if check_entries:
        _check_entries(src, s0, cp.size, leaves, report)
    if state_path is not None:
        new = MonitorState(cp.origin, key.vkey(), cp.size, cp.root, raw.decode(), edge1)
        atomic_write(state_path, json.dumps(new.to_json(), indent=1).encode() + b"\n", mode=0o600)
    return report


def _walk_tiles(
    src: Source,
    s0: int,
    s1: int,
    edge0: list[list[bytes]],
    report: MonitorReport,
    progress: Callable[[int], None] | None,
) -> tuple[list[list[bytes]], list[bytes]]:
    """The new edge and new leaves; each fetched tile checked against the old edge and the level below."""
    edge1: list[list[bytes]] = []
    new_leaves: list[bytes] = []
    below: dict[int, bytes] = {}  # full-tile hashes of the level below, by position in this level
    for level in range(tiles.levels(s1)):
        c0, c1 = s0 >> (8 * level), s1 >> (8 * level)
        old = edge0[level] if level < len(edge0) else []
        if c0 == c1:
            edge1.append(list(old))
            below = {}
            continue
        nxt: dict[int, bytes] = {}
        last: list[bytes] = []
        for idx in range(c0 >> 8, ((c1 - 1) >> 8) + 1):
            width = min(256, c1 - idx * 256)
            rel = tiles.tile_path(level, idx, width)
            try:
                hashes = tiles.split_tile(_fetch(src, rel, width * merkle.HASH_LEN), width, rel)
            except DecodeError as exc:
                raise _alarm("monitor.tile", f"{src.where}{rel}: {exc.message}", file=rel) from exc
            report.tiles_fetched += 1
            for i, h in enumerate(hashes):
                p = idx * 256 + i
                if p < c0:
                    if h != old[p - (c0 >> 8) * 256]:
                        raise _alarm(
                            "monitor.fork",
                            f"FORK: {src.where}{rel} rewrote hash {i}, which the tree of size {s0} seen "
                            f"before fixed; the log now serves size {s1}",
                            file=rel,
                            previous_size=s0,
                            size=s1,
                        )
                elif level == 0:
                    new_leaves.append(h)
                elif below.get(p) != h:
                    raise _alarm(
                        "monitor.tile",
                        f"{src.where}{rel}: hash {i} is not the hash of the full tile below it",
                        file=rel,
                    )
            if width == 256:
                nxt[idx] = tiles.tile_hash(hashes)
            else:
                last = hashes
            if progress is not None and level == 0:
                progress(width)
        edge1.append(last)
        below = nxt
    return edge1, new_leaves


def _check_entries(src: Source, s0: int, s1: int, leaves: list[bytes], report: MonitorReport) -> None:
    for idx in range(s0 >> 8, ((s1 - 1) >> 8) + 1):
        width = min(256, s1 - idx * 256)
        rel = tiles.entries_path(idx, width)
        data = _fetch(src, rel, width * (2 + tiles.MAX_BUNDLE_ENTRY))
        try:
            slots = tiles.decode_bundle(data, width, rel)
        except DecodeError as exc:
            raise _alarm("monitor.bundle", f"{src.where}{rel}: {exc.message}", file=rel) from exc
        for i, slot in enumerate(slots):
            seq = idx * 256 + i
            if seq < s0:
                continue
            n = tiles.large_slot_length(slot)
            entry = slot
            if n is not None:
                if n > MAX_ENTRY_BYTES:
                    raise _alarm(
                        "monitor.bundle", f"{src.where}{rel}: entry {seq} announces {n} bytes", seq=seq
                    )
                big = tiles.large_entry_path(seq)
                entry = _fetch(src, big, n)
                if len(entry) != n:
                    raise _alarm(
                        "monitor.entry", f"{src.where}{big}: {len(entry)} bytes, the marker says {n}", seq=seq
                    )
                report.large_entries += 1
            if merkle.hash_leaf(entry) != leaves[seq - s0]:
                raise _alarm(
                    "monitor.entry",
                    f"{src.where}{rel}: entry {seq} does not hash to its leaf in the level-0 tile",
                    seq=seq,
                )
            report.entries_checked += 1
