"""A mnemolog home: where it is, its layout, its configuration and its keys.

    <home>/config.toml        settings (TOML; written by `mnemolog init`)
    <home>/keys/signing.key   the active private key (mode 0600, Go note format)
    <home>/keys/next.key      a key being rotated in (exists only mid-rotation)
    <home>/keys/retired/      private keys rotated out (delete them at will)
    <home>/keys/*.pub         public keys, for convenience (the log is the truth)
    <home>/log/               segments, checkpoints, derived index (eventlog)
    <home>/state/checkpoint   the high-water mark: the newest checkpoint this home signed,
                              kept outside log/ so that rolling log/ back is noticed
    <home>/projections/       DuckDB read models (derived; `mnemolog rebuild`)

The home is resolved from --home, else $MNEMOLOG_HOME, else
$XDG_DATA_HOME/mnemolog, else ~/.local/share/mnemolog.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import stat
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mnemolog.eventlog.errors import (
    BadInput,
    HomeMissing,
    SignerError,
    StorageError,
    UsageError,
    VerificationError,
)
from mnemolog.eventlog.format.keys import (
    MAX_KEY_FILE,
    SigningKey,
    VerifierKey,
    load_private_key,
    write_private_key,
    write_public_key,
)
from mnemolog.eventlog.store.checkpoints import (
    DEFAULT_CHECKPOINT_ENTRIES,
    DEFAULT_CHECKPOINT_SECONDS,
    CheckpointPolicy,
    HighWaterMark,
    read_high_water,
    write_high_water,
)
from mnemolog.eventlog.store.fsio import FileTooLarge, atomic_write, fsync_dir, read_regular, stale_temps
from mnemolog.eventlog.store.lock import FileLock
from mnemolog.eventlog.store.log import Log
from mnemolog.eventlog.store.writer import Clock, Durability, LogWriter, system_clock
from mnemolog.eventlog.verify.trust import ORIGIN_PREFIX, HomeAnchor, origin_for
from mnemolog.substrate.paths import default_home

CONFIG_NAME = "config.toml"
MAX_CONFIG_BYTES = 1024 * 1024


def cache_home() -> Path:
    xdg = os.environ.get("XDG_CACHE_HOME")
    return Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".cache"


def _writable_dir(path: Path) -> bool:
    """A directory this process may create files in (and whose database file it may write)."""
    if not path.is_dir() or not os.access(path, os.W_OK | os.X_OK):
        return False
    db = path / "mnemolog.duckdb"
    return not db.exists() or os.access(db, os.R_OK | os.W_OK)


@dataclass(frozen=True)
class LogSettings:
    durability: str = "fsync"
    group_max_entries: int = 512
    group_max_ms: float = 5.0
    segment_bytes: int = 64 * 1024 * 1024
    lock_timeout_s: float = 30.0
    log_id: bytes | None = None  # the home's own record of its log (trust anchor)
    checkpoint_max_entries: int = DEFAULT_CHECKPOINT_ENTRIES
    checkpoint_max_s: float = DEFAULT_CHECKPOINT_SECONDS


@dataclass(frozen=True)
class TrustSettings:
    # A second copy of the high-water mark, outside the home (an absolute path).
    high_water_copy: Path | None = None


@dataclass(frozen=True)
class LlmSettings:
    host: str | None = None
    model: str | None = None


@dataclass(frozen=True)
class Config:
    key_name: str = "mnemolog"
    log: LogSettings = field(default_factory=LogSettings)
    llm: LlmSettings = field(default_factory=LlmSettings)
    hooks: dict[str, list[str]] = field(default_factory=dict)
    projection_idle_release_ms: int = 250
    trust: TrustSettings = field(default_factory=TrustSettings)
    raw: dict[str, Any] = field(default_factory=dict)


HOOK_POINTS = ("pre_store", "post_store", "pre_link", "post_link")


def _typed(table: dict[str, Any], key: str, typ: type | tuple[type, ...], default: Any, where: str) -> Any:
    if key not in table:
        return default
    value = table[key]
    if isinstance(value, bool) and typ is not bool:
        raise BadInput(f"{where}.{key} must be {typ}, found a boolean", field=f"{where}.{key}")
    if not isinstance(value, typ):
        raise BadInput(
            f"{where}.{key} has type {type(value).__name__}",
            field=f"{where}.{key}",
            found=repr(value)[:80],
        )
    return value


def parse_config(text: str, where: str = CONFIG_NAME) -> Config:
    """Parse config.toml; unknown tables are kept in `raw`, malformed values refused."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise BadInput(f"{where}: not valid TOML: {exc}", file=where) from exc
    key = raw.get("key", {})
    log = raw.get("log", {})
    llm = raw.get("llm", {})
    hooks = raw.get("hooks", {})
    proj = raw.get("projections", {})
    trust = raw.get("trust", {})
    for name, t in (
        ("key", key),
        ("log", log),
        ("llm", llm),
        ("hooks", hooks),
        ("projections", proj),
        ("trust", trust),
    ):
        if not isinstance(t, dict):
            raise BadInput(f"{where}: [{name}] must be a table", file=where, field=name)
    durability = _typed(log, "durability", str, "fsync", "log")
    if durability not in ("fsync", "group"):
        raise BadInput(f"{where}: log.durability must be 'fsync' or 'group'", file=where, found=durability)
    settings = LogSettings(
        durability=durability,
        group_max_entries=_typed(log, "group_max_entries", int, 512, "log"),
        group_max_ms=float(_typed(log, "group_max_ms", (int, float), 5.0, "log")),
        segment_bytes=_typed(log, "segment_bytes", int, 64 * 1024 * 1024, "log"),
        lock_timeout_s=float(_typed(log, "lock_timeout_s", (int, float), 30.0, "log")),
        log_id=_log_id(_typed(log, "id", str, None, "log"), where),
        checkpoint_max_entries=_typed(log, "checkpoint_max_entries", int, DEFAULT_CHECKPOINT_ENTRIES, "log"),
        checkpoint_max_s=float(
            _typed(log, "checkpoint_max_s", (int, float), DEFAULT_CHECKPOINT_SECONDS, "log")
        ),
    )
    if settings.segment_bytes < 4096 or settings.group_max_entries < 1:
        raise BadInput(f"{where}: log.segment_bytes >= 4096 and group_max_entries >= 1", file=where)
    if settings.checkpoint_max_entries < 1 or not 0 < settings.checkpoint_max_s <= 86400:
        raise BadInput(
            f"{where}: log.checkpoint_max_entries >= 1 and 0 < log.checkpoint_max_s <= 86400", file=where
        )
    hw_copy = _typed(trust, "high_water_copy", str, None, "trust")
    if hw_copy is not None and not os.path.isabs(hw_copy):
        raise BadInput(f"{where}: trust.high_water_copy must be an absolute path", file=where, found=hw_copy)
    parsed_hooks: dict[str, list[str]] = {}
    for point, names in hooks.items():
        if point not in HOOK_POINTS:
            raise BadInput(
                f"{where}: unknown hook point {point!r} (one of {', '.join(HOOK_POINTS)})",
                file=where,
            )
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise BadInput(f"{where}: hooks.{point} must be a list of 'module:function'", file=where)
        parsed_hooks[point] = list(names)
    return Config(
        key_name=_typed(key, "name", str, "mnemolog", "key"),
        log=settings,
        llm=LlmSettings(
            host=_typed(llm, "host", str, None, "llm") or None,
            model=_typed(llm, "model", str, None, "llm") or None,
        ),
        hooks=parsed_hooks,
        projection_idle_release_ms=_typed(proj, "idle_release_ms", int, 250, "projections"),
        trust=TrustSettings(Path(hw_copy) if hw_copy else None),
        raw=raw,
    )


def _log_id(text: str | None, where: str) -> bytes | None:
    if text is None:
        return None
    try:
        lid = bytes.fromhex(text)
    except ValueError:
        lid = b""
    if len(lid) != 16:
        raise BadInput(f"{where}: log.id must be 32 hexadecimal digits", file=where, field="log.id")
    return lid


def default_config_text(key_name: str, log_id: bytes | None = None) -> str:
    log_id_line = (
        f'# The log this home holds: `log verify` refuses a log with another id.\nid = "{log_id.hex()}"\n'
        if log_id is not None
        else ""
    )
    return f"""# mnemolog home configuration (TOML). Written by `mnemolog init`.

[key]
# The C2SP key name on checkpoint signature lines.
name = "{key_name}"

[log]
{log_id_line}# "fsync": every append is synced before it returns.
# "group": appends are batched (group_max_entries / group_max_ms) and
#          acknowledged after one sync of the batch.
durability = "fsync"
group_max_entries = 512
group_max_ms = 5
segment_bytes = 67108864
lock_timeout_s = 30
# Long-lived writers publish a checkpoint once this many entries, or this many
# seconds after the last append, are not covered by one (and at close).
checkpoint_max_entries = 1000
checkpoint_max_s = 5

[trust]
# A second copy of the high-water mark (the newest checkpoint this home signed),
# somewhere an attacker who rolls back the home cannot reach; `log verify` checks it.
# high_water_copy = "/var/lib/mnemolog-witness/my-home.checkpoint"

[llm]
# Ollama for the LLM curator; MNEMOLOG_OLLAMA_HOST / MNEMOLOG_OLLAMA_MODEL override.
# host = "http://127.0.0.1:11434"
# model = "gemma3"

[hooks]
# Python callables "package.module:function" run around every store and link.
# pre_store = []
# post_store = []
# pre_link = []
# post_link = []

[projections]
# A long-running process lets go of the projection database after this idle time,
# so that CLI commands in other processes can use it.
idle_release_ms = 250
"""


def _regular_or_gone(path: Path) -> bool:
    """A regular file, or removed meanwhile by a writer (a rebuild, a cut): not damage."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except FileNotFoundError:
        return True


class Home:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.recovered_keys: list[str] = []
        self.log_dir = root / "log"
        self.keys_dir = root / "keys"
        self.projections_dir = root / "projections"
        self.config_path = root / CONFIG_NAME
        self.state_dir = root / "state"
        self._config: Config | None = None
        # Called with the note bytes of every checkpoint a writer of this home signs
        # (see LogWriter.checkpoint_listeners); copied into each writer it opens.
        self.checkpoint_listeners: list[Callable[[bytes], None]] = []

    @classmethod
    def resolve(cls, home: str | os.PathLike[str] | None = None) -> Home:
        if home is not None and os.fspath(home) == "":
            # An empty --home is a mistake (an unset shell variable), not a request for the default.
            raise UsageError("--home is empty: give a directory, or leave --home out for the default home")
        return cls(Path(home) if home else default_home())

    def exists(self) -> bool:
        return (self.log_dir / "00000000000000000000.seg").exists()

    def require(self) -> Home:
        if not self.root.exists():
            raise HomeMissing(
                f"no mnemolog home at {self.root} (run `mnemolog init` to create one)",
                file=str(self.root),
            )
        if not self.exists():
            raise HomeMissing(
                f"{self.root} is not a mnemolog home: it has no log (run `mnemolog init` to create one)",
                file=str(self.root),
            )
        return self

    def check_layout(self) -> None:
        """Refuse a home whose directories or files are not of the kind they must be (exit 6).

        A few lstat calls: a directory replaced by a file (or the reverse) is named
        here, before anything reads around it or writes into it. Reads could get by
        without a damaged index or checkpoint directory, but damage is reported, not
        hidden; what is derived says how to recreate it. The Substrate checks it on
        open; `log verify` does not need it (it reads the segments alone).
        """
        derived = {
            self.log_dir / "index": "it is derived: move it away and the next command rebuilds it",
            self.projections_dir: "it is derived: move it away and the next command rebuilds it",
        }
        for d in (self.log_dir, self.log_dir / "checkpoints", self.log_dir / "index", self.projections_dir,
                  self.state_dir, self.keys_dir):  # fmt: skip
            try:
                mode = os.lstat(d).st_mode
            except FileNotFoundError:
                continue
            except OSError as exc:
                raise StorageError(f"cannot inspect {d}: {exc.strerror}", file=str(d)) from exc
            if not stat.S_ISDIR(mode):
                advice = derived.get(d, "the home is damaged: restore it from a copy")
                raise StorageError(f"{d} is not a directory; {advice}", file=str(d))
        index = self.log_dir / "index"
        for name in os.listdir(index) if index.is_dir() else ():
            if not _regular_or_gone(index / name):
                raise StorageError(
                    f"the log index file {index / name} is not a regular file; the index is derived: "
                    "move it away and the next command rebuilds it",
                    file=str(index / name),
                )
        for name in os.listdir(self.log_dir):
            if name.endswith(".seg") and not _regular_or_gone(self.log_dir / name):
                path = self.log_dir / name
                raise StorageError(
                    f"the log segment {path} is not a regular file; the home is damaged: "
                    "restore it from a copy",
                    file=str(path),
                )

    @property
    def config(self) -> Config:
        if self._config is None:
            where = str(self.config_path)
            try:
                raw = read_regular(self.config_path, MAX_CONFIG_BYTES)
            except FileNotFoundError:
                self._config = Config()
                return self._config
            except FileTooLarge as exc:
                raise BadInput(f"{where}: {exc.strerror}", file=where) from exc
            except OSError as exc:  # a FIFO, a device, a directory: damage, not input
                raise StorageError(f"cannot read {where}: {exc.strerror}", file=where) from exc
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise BadInput(f"{where} is not UTF-8", file=where) from exc
            self._config = parse_config(text, str(self.config_path))
        return self._config

    # -- projections -----------------------------------------------------------

    def projections_path(self) -> Path:
        """Where this process keeps the projection database.

        `<home>/projections/` when this process may write there; otherwise
        (a read-only copy of a home, another user's home, a read-only
        filesystem) a directory of its own under the XDG cache, named for the
        home, so reads and audits still work and the home stays untouched.
        """
        d = self.projections_dir
        if _writable_dir(d) or (not d.exists() and _writable_dir(self.root)):
            return d
        digest = hashlib.sha256(str(self.root.resolve()).encode()).hexdigest()[:16]
        return cache_home() / "mnemolog" / "projections" / f"{self.root.name or 'home'}-{digest}"

    # -- trust: the home's own record of its log, outside log/ ---------------

    @property
    def high_water_path(self) -> Path:
        return self.state_dir / "checkpoint"

    def high_water_paths(self) -> list[Path]:
        """Where the high-water mark is kept: `state/checkpoint` and the configured copy, if any."""
        paths = [self.high_water_path]
        copy = self.config.trust.high_water_copy
        if copy is not None:
            paths.append(copy)
        return paths

    def high_water_marks(self) -> list[HighWaterMark]:
        """Every high-water mark the home keeps, for `log verify` to compare the log against.

        A mark that should exist and does not is a verification failure: the
        configured copy outside the home, and `state/checkpoint` of a home that
        records its log id (every home `init` made since the mark exists).
        """
        marks: list[HighWaterMark] = []
        for i, path in enumerate(self.high_water_paths()):
            hw = read_high_water(path)
            if hw is not None:
                marks.append(hw)
            elif i > 0 or self.config.log.log_id is not None:
                raise VerificationError(
                    f"the high-water mark {path} is missing: it is written with every checkpoint, so "
                    "a missing one suggests a rollback of the home (or a copy made without it)",
                    check="high_water.missing",
                    file=str(path),
                )
        return marks

    def public_keys(self) -> list[VerifierKey]:
        """The verifier keys in `keys/*.pub` (malformed files are skipped: the log is the truth)."""
        out: list[VerifierKey] = []
        try:
            names = sorted(os.listdir(self.keys_dir))
        except OSError:
            return out
        for name in names:
            path = self.keys_dir / name
            if not name.endswith(".pub"):
                continue
            try:
                out.append(VerifierKey.from_vkey(read_regular(path, MAX_KEY_FILE).decode("utf-8")))
            except (OSError, UnicodeDecodeError, SignerError):
                continue
        return out

    def trust_anchor(self) -> HomeAnchor:
        """The home's own anchor: its log id (config, else the high-water mark) and `keys/*.pub`."""
        log_id = self.config.log.log_id
        source = f"{CONFIG_NAME} [log] id and keys/*.pub"
        if log_id is None:
            try:
                hw = read_high_water(self.high_water_path)
                origin = hw.body().origin if hw is not None else ""
            except (StorageError, BadInput):
                origin = ""
            if origin.startswith(ORIGIN_PREFIX):
                try:
                    log_id = bytes.fromhex(origin[len(ORIGIN_PREFIX) :])
                except ValueError:
                    log_id = None
                source = "state/checkpoint origin and keys/*.pub"
            else:
                source = "keys/*.pub (the home records no log id)"
        return HomeAnchor(log_id if log_id and len(log_id) == 16 else None, tuple(self.public_keys()), source)

    # -- keys --------------------------------------------------------------

    @property
    def signing_key_path(self) -> Path:
        return self.keys_dir / "signing.key"

    @property
    def next_key_path(self) -> Path:
        return self.keys_dir / "next.key"

    def signing_keys(self) -> list[SigningKey]:
        """The active key and, mid-rotation, the incoming one (the log says which applies)."""
        if not self.signing_key_path.exists() and not self.next_key_path.exists():
            raise SignerError(
                f"this command signs, and the home has no private key: {self.signing_key_path} is missing "
                "(reading, searching and verifying work without it; to write, restore the key or "
                "replay the log into a home with `--signing-key`)",
                file=str(self.signing_key_path),
            )
        keys = [load_private_key(self.signing_key_path)]
        if self.next_key_path.exists():
            keys.append(load_private_key(self.next_key_path))
        return keys

    @property
    def retired_dir(self) -> Path:
        return self.keys_dir / "retired"

    def _keys_lock(self) -> FileLock:
        # Rotation and its recovery exclude each other across processes: a recovery
        # must never judge a rotation that another process is still carrying out.
        return FileLock(self.keys_dir / ".lock", self.config.log.lock_timeout_s, "key rotation lock")

    def _keys_settled(self) -> bool:
        if stale_temps(self.keys_dir) or self.next_key_path.exists():
            return False
        if self.signing_key_path.is_file():
            return True
        # No private key at all (a copy made for audits, a home replayed without
        # --signing-key): nothing to recover, and `signing_keys` names what is missing.
        try:
            return not any(p.suffix == ".key" for p in self.retired_dir.iterdir())
        except OSError:
            return True

    def recover_keys(self) -> list[str]:
        """Finish or roll back an interrupted key rotation, deciding from the log.

        A rotation saves the incoming key as `next.key` (and its `.pub`), appends
        `key.rotated`, then retires `signing.key` and renames `next.key` over it.
        A kill can stop it anywhere. The log's newest key (read without any
        private key) says which way to go: if the rotation is in the log, the
        incoming key becomes `signing.key` and the old one is retired; if not,
        the incoming key never signed anything and is removed. Temp files of
        interrupted key writes are removed, and every key of the history gets
        its `.pub`. Returns what was done, one line per step (empty if nothing).
        """
        if self._keys_settled():
            return []
        with self._keys_lock():
            return self._recover_keys_locked()

    def _recover_keys_locked(self) -> list[str]:
        done: list[str] = []
        for temp, target in stale_temps(self.keys_dir):
            temp.unlink(missing_ok=True)
            done.append(f"removed {temp.name}, an interrupted write of {target}")
        with Log(self.log_dir) as log:
            history = [ep.key for ep in log.key_history()]
        current = history[-1]
        announced = {k.kid for k in history}
        active = self._load_if_there(self.signing_key_path)
        incoming = self._load_if_there(self.next_key_path)
        if active is None or active.kid != current.kid:
            source = None
            if incoming is not None and incoming.kid == current.kid:
                source = self.next_key_path
            elif (self.retired_dir / f"{current.kid.hex()}.key").is_file():
                source = self.retired_dir / f"{current.kid.hex()}.key"
            if source is None:
                raise SignerError(
                    f"no private key for the log's current key {current.vkey()}: it is in none of "
                    f"{self.signing_key_path}, "
                    f"{self.next_key_path} or {self.retired_dir}; restore its private key as "
                    f"{self.signing_key_path}",
                    file=str(self.signing_key_path),
                    expected=current.kid.hex(),
                )
            if active is not None:
                self._retire(self.signing_key_path, active)
                done.append(f"retired {active.kid.hex()}")
            os.replace(source, self.signing_key_path)
            done.append(f"made {current.kid.hex()} the signing key (the rotation to it is in the log)")
            if source == self.next_key_path:
                incoming = None
        if incoming is not None:
            if incoming.kid in announced:
                self._retire(self.next_key_path, incoming)
                done.append(f"retired {incoming.kid.hex()}")
            else:
                # Never in the log: it signed nothing, so nothing can need it.
                self.next_key_path.unlink()
                pub = self.keys_dir / f"{incoming.kid.hex()}.pub"
                pub.unlink(missing_ok=True)
                done.append(f"removed {incoming.kid.hex()}, a rotation that never reached the log")
        for key in history:
            pub = self.keys_dir / f"{key.kid.hex()}.pub"
            if not pub.is_file():
                write_public_key(pub, key)
                done.append(f"wrote {pub.name}")
        fsync_dir(self.keys_dir)
        return done

    @staticmethod
    def _load_if_there(path: Path) -> SigningKey | None:
        if not path.exists():
            return None
        return load_private_key(path)

    def _retire(self, path: Path, key: SigningKey) -> None:
        self.retired_dir.mkdir(exist_ok=True, mode=0o700)
        os.replace(path, self.retired_dir / f"{key.kid.hex()}.key")
        fsync_dir(self.retired_dir)

    # -- the log -------------------------------------------------------------

    def open_log(self) -> Log:
        self.require()
        return Log(self.log_dir)

    def open_writer(
        self,
        *,
        durability: Durability | None = None,
        clock: Clock = system_clock,
        progress: bool | None = None,
        checkpoint_on_close: bool = True,
        periodic_checkpoints: bool = True,
        accept_rollback: bool = False,
    ) -> LogWriter:
        """The home's log writer: its keys, durability, periodic checkpoints and high-water marks.

        `signing_keys()` runs first, so a home without its private key fails
        here (SignerError, exit 6) before anything on disk is touched.
        """
        self.require()
        self.recovered_keys = self.recover_keys()
        cfg = self.config.log
        dur = durability or Durability(cfg.durability, cfg.group_max_entries, cfg.group_max_ms)  # type: ignore[arg-type]
        policy = None
        if periodic_checkpoints:
            policy = CheckpointPolicy(cfg.checkpoint_max_entries, cfg.checkpoint_max_s)
        return LogWriter(
            self.log_dir,
            self.signing_keys(),
            durability=dur,
            clock=clock,
            segment_bytes=cfg.segment_bytes,
            lock_timeout=cfg.lock_timeout_s,
            checkpoint_on_close=checkpoint_on_close,
            progress=progress,
            checkpoint_policy=policy,
            high_water=self.high_water_paths(),
            checkpoint_listeners=self.checkpoint_listeners,
            key_loader=self.signing_keys,
            accept_rollback=accept_rollback,
        )

    def rotate_key(self, writer: LogWriter, name: str | None = None) -> tuple[SigningKey, int]:
        """Rotate to a fresh key: saved first, then announced in the log, then made active.

        Each step is durable before the next, so a kill anywhere leaves a state
        `recover_keys` finishes or rolls back on the next open. A failure here
        does the same at once.
        """
        with self._keys_lock():
            self._recover_keys_locked()
            new = SigningKey.generate(name or writer.key.name)
            try:
                write_private_key(self.next_key_path, new)
                write_public_key(self.keys_dir / f"{new.kid.hex()}.pub", new.verifier)
                receipt = writer.rotate_key(new)
            except BaseException:
                with contextlib.suppress(Exception):
                    self._recover_keys_locked()
                raise
            self._recover_keys_locked()
        return new, receipt.seq


@dataclass(frozen=True)
class InitReport:
    home: str
    log_id: str
    key_name: str
    kid: str
    vkey: str
    checkpoint: str


def init_home(
    root: Path,
    key_name: str | None = None,
    clock: Clock = system_clock,
    *,
    log_id: bytes | None = None,
    key: SigningKey | None = None,
    genesis_extra: dict[str, Any] | None = None,
) -> InitReport:
    """Create a home: config, a fresh key (0600), the genesis entry, the first checkpoint.

    Directories are created 0700. A failed init removes everything it created
    (and nothing else), so it can simply be run again. `log_id`, `key` and
    `genesis_extra` are for a home made by `migrate seal`, whose genesis
    records the log it was migrated from (and is signed by a key made for it).
    """
    home = Home(root)
    if root.is_symlink() and not root.exists():
        raise StorageError(
            f"{root} is a symbolic link to {os.readlink(root)}, which does not exist; "
            "create the target or give the directory itself",
            file=str(root),
        )
    if home.exists():
        raise StorageError(f"{root} already holds a mnemolog log", file=str(root))
    if root.exists() and not root.is_dir():
        raise StorageError(f"{root} exists and is not a directory", file=str(root))
    for sub in ("log", "keys", "projections", "state"):
        path = root / sub
        if path.is_symlink() or (path.exists() and not path.is_dir()):
            raise StorageError(f"{path} exists and is not a directory", file=str(path))
        if path.exists() and any(path.iterdir()):
            raise StorageError(
                f"{path} is not empty; refusing to initialise over existing files",
                file=str(path),
            )
    created: list[Path] = []
    log_existed = home.log_dir.exists()
    try:
        _make_dirs(root, created)
        # A home holds a private key: only its owner may enter it, whatever the umask or
        # the mode of a directory that was there before.
        os.chmod(root, 0o700)
        log_id = log_id or os.urandom(16)
        # C2SP tlog-checkpoint: the log key's name should be the checkpoint origin, so
        # witnesses and note verifiers see one name for the log. Older homes keep theirs.
        name = key.name if key is not None else key_name or origin_for(log_id)
        key = key or SigningKey.generate(name)
        _make_dirs(home.keys_dir, created)
        if not home.config_path.exists():
            created.append(home.config_path)
            atomic_write(home.config_path, default_config_text(name, log_id).encode(), mode=0o600)
        if home.signing_key_path.exists():
            raise SignerError(f"{home.signing_key_path} exists already", file=str(home.signing_key_path))
        created.append(home.signing_key_path)
        write_private_key(home.signing_key_path, key)
        pub = home.keys_dir / f"{key.kid.hex()}.pub"
        created.append(pub)
        write_public_key(pub, key.verifier)
        _make_dirs(home.projections_dir, created)
        _make_dirs(home.state_dir, created)
        # The log directory may exist (empty): whatever is in it after a failure is ours.
        created.append(home.log_dir)
        _, cp = LogWriter.create(home.log_dir, key, clock=clock, log_id=log_id, extra=genesis_extra)
        created.append(home.high_water_path)
        write_high_water(home.high_water_path, cp, 1)
    except BaseException as exc:
        _remove_created(created, home.log_dir, log_existed)
        if isinstance(exc, OSError):
            where = exc.filename if exc.filename is not None else root
            raise StorageError(
                f"cannot initialise {root}: {exc.strerror or exc}: {where}", file=str(where)
            ) from exc
        raise
    return InitReport(
        home=str(root),
        log_id=log_id.hex(),
        key_name=name,
        kid=key.kid.hex(),
        vkey=key.verifier.vkey(),
        checkpoint=cp.decode(),
    )


def _make_dirs(path: Path, created: list[Path]) -> None:
    """mkdir -p with mode 0700, recording each directory it made (outermost first)."""
    missing: list[Path] = []
    p = path
    while not p.exists() and not p.is_symlink():
        missing.append(p)
        if p.parent == p:
            break
        p = p.parent
    for d in reversed(missing):
        d.mkdir(mode=0o700)
        created.append(d)


def _remove_created(created: list[Path], log_dir: Path, log_existed: bool) -> None:
    """Undo a failed init: remove what it made, newest first (a log directory that existed
    before, empty as init requires, is emptied rather than removed)."""
    for path in reversed(created):
        try:
            if path == log_dir and log_existed:
                for child in path.iterdir():
                    if child.is_dir() and not child.is_symlink():
                        shutil.rmtree(child, ignore_errors=True)
                    else:
                        child.unlink(missing_ok=True)
            elif path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
        except OSError:
            continue
