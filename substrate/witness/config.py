"""A home's witnesses, as configured in `<home>/witnesses.toml` (`mnemolog witness add|remove`).

    [options]
    timeout_s = 5                 # per HTTP request
    rotation_overlap_hours = 168  # how long after `key rotate` the old key still co-signs checkpoints

    [witness.NAME]
    url = "http://127.0.0.1:7380"   # the submission prefix; requests go to <url>/add-checkpoint
    vkey = "name+hash+base64"       # the witness's cosigner key (type 0x04, or 0x01)

The file is written whole by `save_settings` (values are TOML basic strings);
a malformed one is bad input (exit 65), never silently ignored.
"""

from __future__ import annotations

import json
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mnemolog.eventlog.errors import BadInput, NotFound, SignerError, UsageError
from mnemolog.eventlog.store.fsio import FileTooLarge, atomic_write, read_regular
from mnemolog.eventlog.witness.cosignature import CosignerVerifier

__all__ = [
    "DEFAULT_OVERLAP_HOURS",
    "DEFAULT_TIMEOUT_S",
    "MAX_WITNESSES",
    "WITNESSES_FILE",
    "WitnessConfig",
    "WitnessSettings",
    "add_witness",
    "check_name",
    "check_url",
    "load_settings",
    "remove_witness",
    "save_settings",
]

WITNESSES_FILE = "witnesses.toml"
MAX_FILE = 256 * 1024
MAX_WITNESSES = 32
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
DEFAULT_TIMEOUT_S = 5.0
DEFAULT_OVERLAP_HOURS = 168.0


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
        text = read_regular(p, MAX_FILE).decode("utf-8")
    except FileNotFoundError:
        return WitnessSettings()
    except FileTooLarge as exc:
        raise BadInput(f"{p} is larger than {MAX_FILE} bytes", file=str(p)) from exc
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
