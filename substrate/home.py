"""A mnemolog home: where it is, its layout, its configuration and its keys.

    <home>/config.toml        settings (TOML; written by `mnemolog init`)
    <home>/keys/signing.key   the active private key (mode 0600, Go note format)
    <home>/keys/next.key      a key being rotated in (exists only mid-rotation)
    <home>/keys/retired/      private keys rotated out (delete them at will)
    <home>/keys/*.pub         public keys, for convenience (the log is the truth)
    <home>/log/               segments, checkpoints, derived index (eventlog)
    <home>/projections/       DuckDB read models (derived; `mnemolog rebuild`)

The home is resolved from --home, else $MNEMOLOG_HOME, else
$XDG_DATA_HOME/mnemolog, else ~/.local/share/mnemolog.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mnemolog.eventlog.errors import BadInput, HomeMissing, SignerError, StorageError
from mnemolog.eventlog.fsio import atomic_write, fsync_dir
from mnemolog.eventlog.keys import (
    SigningKey,
    load_private_key,
    write_private_key,
    write_public_key,
)
from mnemolog.eventlog.log import Log
from mnemolog.eventlog.note import origin_for
from mnemolog.eventlog.writer import Clock, Durability, LogWriter, system_clock

CONFIG_NAME = "config.toml"
MAX_CONFIG_BYTES = 1024 * 1024


def default_home() -> Path:
    env = os.environ.get("MNEMOLOG_HOME")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_DATA_HOME")
    if xdg:
        return Path(xdg) / "mnemolog"
    return Path.home() / ".local" / "share" / "mnemolog"


@dataclass(frozen=True)
class LogSettings:
    durability: str = "fsync"
    group_max_entries: int = 512
    group_max_ms: float = 5.0
    segment_bytes: int = 64 * 1024 * 1024
    lock_timeout_s: float = 30.0


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
    for name, t in (
        ("key", key),
        ("log", log),
        ("llm", llm),
        ("hooks", hooks),
        ("projections", proj),
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
    )
    if settings.segment_bytes < 4096 or settings.group_max_entries < 1:
        raise BadInput(f"{where}: log.segment_bytes >= 4096 and group_max_entries >= 1", file=where)
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
        raw=raw,
    )


def default_config_text(key_name: str) -> str:
    return f"""# mnemolog home configuration (TOML). Written by `mnemolog init`.

[key]
# The C2SP key name on checkpoint signature lines.
name = "{key_name}"

[log]
# "fsync": every append is synced before it returns.
# "group": appends are batched (group_max_entries / group_max_ms) and
#          acknowledged after one sync of the batch.
durability = "fsync"
group_max_entries = 512
group_max_ms = 5
segment_bytes = 67108864
lock_timeout_s = 30

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


class Home:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.log_dir = root / "log"
        self.keys_dir = root / "keys"
        self.projections_dir = root / "projections"
        self.config_path = root / CONFIG_NAME
        self._config: Config | None = None

    @classmethod
    def resolve(cls, home: str | os.PathLike[str] | None = None) -> Home:
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

    @property
    def config(self) -> Config:
        if self._config is None:
            try:
                st = self.config_path.stat()
            except FileNotFoundError:
                self._config = Config()
                return self._config
            if st.st_size > MAX_CONFIG_BYTES:
                raise BadInput(f"{self.config_path} is larger than {MAX_CONFIG_BYTES} bytes")
            try:
                text = self.config_path.read_text("utf-8")
            except UnicodeDecodeError as exc:
                raise BadInput(f"{self.config_path} is not UTF-8", file=str(self.config_path)) from exc
            self._config = parse_config(text, str(self.config_path))
        return self._config

    # -- keys --------------------------------------------------------------

    @property
    def signing_key_path(self) -> Path:
        return self.keys_dir / "signing.key"

    @property
    def next_key_path(self) -> Path:
        return self.keys_dir / "next.key"

    def signing_keys(self) -> list[SigningKey]:
        """The active key and, mid-rotation, the incoming one (the log says which applies)."""
        keys = [load_private_key(self.signing_key_path)]
        if self.next_key_path.exists():
            keys.append(load_private_key(self.next_key_path))
        return keys

    def _finish_rotation(self, active: SigningKey) -> None:
        """After a rotation is in the log, make the incoming key the active one."""
        if not self.next_key_path.exists():
            return
        nxt = load_private_key(self.next_key_path)
        if nxt.kid != active.kid:
            # The rotation never reached the log: the incoming key was not used.
            self.next_key_path.unlink()
            return
        retired = self.keys_dir / "retired"
        retired.mkdir(exist_ok=True, mode=0o700)
        old = load_private_key(self.signing_key_path)
        if old.kid != nxt.kid:
            os.replace(self.signing_key_path, retired / f"{old.kid.hex()}.key")
        os.replace(self.next_key_path, self.signing_key_path)
        fsync_dir(self.keys_dir)

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
    ) -> LogWriter:
        self.require()
        cfg = self.config.log
        dur = durability or Durability(cfg.durability, cfg.group_max_entries, cfg.group_max_ms)  # type: ignore[arg-type]
        w = LogWriter(
            self.log_dir,
            self.signing_keys(),
            durability=dur,
            clock=clock,
            segment_bytes=cfg.segment_bytes,
            lock_timeout=cfg.lock_timeout_s,
            checkpoint_on_close=checkpoint_on_close,
            progress=progress,
        )
        self._finish_rotation(w.key)
        return w

    def rotate_key(self, writer: LogWriter, name: str | None = None) -> tuple[SigningKey, int]:
        """Rotate to a fresh key: saved first, then announced in the log, then made active."""
        new = SigningKey.generate(name or writer.key.name)
        write_private_key(self.next_key_path, new)
        receipt = writer.rotate_key(new)
        self._finish_rotation(new)
        write_public_key(self.keys_dir / f"{new.kid.hex()}.pub", new.verifier)
        return new, receipt.seq


@dataclass(frozen=True)
class InitReport:
    home: str
    log_id: str
    key_name: str
    kid: str
    vkey: str
    checkpoint: str


def init_home(root: Path, key_name: str | None = None, clock: Clock = system_clock) -> InitReport:
    """Create a home: config, a fresh key (0600), the genesis entry, the first checkpoint."""
    home = Home(root)
    if home.exists():
        raise StorageError(f"{root} already holds a mnemolog log", file=str(root))
    if root.exists() and not root.is_dir():
        raise StorageError(f"{root} exists and is not a directory", file=str(root))
    for sub in ("log", "keys", "projections"):
        if (root / sub).exists() and any((root / sub).iterdir()):
            raise StorageError(
                f"{root / sub} is not empty; refusing to initialise over existing files",
                file=str(root / sub),
            )
    root.mkdir(parents=True, exist_ok=True)
    log_id = os.urandom(16)
    # C2SP tlog-checkpoint: the log key's name should be the checkpoint origin, so
    # witnesses and note verifiers see one name for the log. Older homes keep theirs.
    name = key_name or origin_for(log_id)
    key = SigningKey.generate(name)
    home.keys_dir.mkdir(exist_ok=True, mode=0o700)
    if not home.config_path.exists():
        atomic_write(home.config_path, default_config_text(name).encode())
    if home.signing_key_path.exists():
        raise SignerError(f"{home.signing_key_path} exists already", file=str(home.signing_key_path))
    write_private_key(home.signing_key_path, key)
    write_public_key(home.keys_dir / f"{key.kid.hex()}.pub", key.verifier)
    home.projections_dir.mkdir(exist_ok=True)
    _, cp = LogWriter.create(home.log_dir, key, clock=clock, log_id=log_id)
    return InitReport(
        home=str(root),
        log_id=log_id.hex(),
        key_name=name,
        kid=key.kid.hex(),
        vkey=key.verifier.vkey(),
        checkpoint=cp.decode(),
    )
