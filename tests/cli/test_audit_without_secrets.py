"""Audits need no secrets: every read works without the private key, without write access to the
home, and without the writer lock; every command that must sign says which key is missing, exits 6
and changes nothing.

Before: `stats`, `recall`, `list`, `get` and `rebuild` exited 6 "no private key" on a home without
its key, and every read opened the log writer (its lock, its key).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.readonly import make_read_only, make_writable, unprivileged

EXE = Path(sys.executable).with_name("mnemolog")
SIGNER = 6


def mnemolog(
    home: Path, *args: str, env: dict[str, str] | None = None, ro: bool = False
) -> tuple[int, Any, str]:
    argv = [str(EXE), "--home", str(home), "--json", *args]
    if ro:
        wrapped = unprivileged(argv)
        if wrapped is None:
            pytest.skip("no way to drop root's permission override here (setpriv missing)")
        argv = wrapped
    base = {k: v for k, v in os.environ.items() if not k.startswith("MNEMOLOG_")}
    env = {**base, **(env or {})}
    p = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env, check=False)
    assert "Traceback" not in p.stderr, p.stderr
    lines = p.stdout.strip().splitlines()
    return p.returncode, json.loads(lines[-1]) if lines else None, p.stderr


def digest(root: Path, *, skip: tuple[str, ...] = ()) -> dict[str, str]:
    out = {}
    for p in sorted(root.rglob("*")):
        rel = str(p.relative_to(root))
        if p.is_file() and not any(rel.startswith(s) for s in skip):
            out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    home = tmp_path_factory.mktemp("audit") / "home"
    assert mnemolog(home, "init")[0] == 0
    ids = []
    for text in ("The deploy raised the worker count", "Rollback fixed checkout", "Pool exhausted at 09:05"):
        code, doc, err = mnemolog(home, "store", text, "--tag", "ops")
        assert code == 0, err
        ids.append(doc["memory"]["id"])
    assert mnemolog(home, "link", ids[0], ids[1])[0] == 0
    bundle = home.parent / "bundle.tar"
    assert mnemolog(home, "export-forensic-bundle", "--memory-id", ids[0], "-o", str(bundle))[0] == 0
    return home, {"id": ids[0], "bundle": str(bundle)}


def reads(ids: dict[str, str], out: Path) -> list[tuple[str, ...]]:
    return [
        ("get", ids["id"]),
        ("recall", "deploy worker"),
        ("search", "checkout"),
        ("list",),
        ("stats",),
        ("log", "show"),
        ("log", "tail", "-n", "3"),
        ("log", "verify"),
        ("log", "verify", "--hashes-only"),
        ("log", "prove", "1"),
        ("log", "consistency", "1", "3"),
        ("verify-bundle", ids["bundle"]),
        ("vault", "render", str(out)),
        ("rebuild",),
    ]


SIGNING = [
    ("store", "written by someone without the key"),
    ("log", "checkpoint"),
    ("log", "append", "note.added", "--data", "{}"),
    ("key", "rotate"),
]


def test_reads_work_without_the_private_key(template: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    src, ids = template
    home = tmp_path / "home"
    shutil.copytree(src, home)
    (home / "keys" / "signing.key").unlink()
    for args in reads(ids, tmp_path / "vault"):
        code, doc, err = mnemolog(home, *args)
        assert code == 0, (args, doc, err)
    assert (tmp_path / "vault").is_dir()
    before = digest(home / "log", skip=("index",))
    export = ("export-forensic-bundle", "--memory-id", ids["id"], "-o", str(tmp_path / "b.tar"))
    for args in [*SIGNING, export]:
        code, doc, _ = mnemolog(home, *args)
        assert code == SIGNER, (args, doc)
        assert "signing.key" in doc["message"] and "missing" in doc["message"], doc
        assert digest(home / "log", skip=("index",)) == before, args
    assert not (tmp_path / "b.tar").exists()


def test_reads_work_on_a_read_only_home(template: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    src, ids = template
    home = tmp_path / "home"
    shutil.copytree(src, home)
    shutil.rmtree(home / "projections")  # nothing prepared: the reader builds its own, elsewhere
    (home / "projections").mkdir()
    cache = tmp_path / "cache"
    out = tmp_path / "vault"
    out.mkdir()
    before = digest(home)
    make_read_only(home)
    try:
        env = {"XDG_CACHE_HOME": str(cache)}
        for args in reads(ids, out):
            code, doc, err = mnemolog(home, *args, env=env, ro=True)
            assert code == 0, (args, doc, err)
        assert list(cache.rglob("mnemolog.duckdb")), "the projections were built in the cache"
        for args in SIGNING:
            code, doc, _ = mnemolog(home, *args, env=env, ro=True)
            assert code == SIGNER, (args, doc)
        assert digest(home) == before
    finally:
        make_writable(home)


def test_reads_never_take_the_writer_lock(template: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    src, ids = template
    home = tmp_path / "home"
    shutil.copytree(src, home)
    with open(home / "log" / ".lock", "a+b") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)  # a writer in the middle of a batch, for as long as it takes
        try:
            cfg = home / "config.toml"
            cfg.write_text(cfg.read_text().replace("lock_timeout_s = 30", "lock_timeout_s = 1"))
            for args in reads(ids, tmp_path / "vault"):
                code, doc, err = mnemolog(home, *args)
                assert code == 0, (args, doc, err)
            code, doc, _ = mnemolog(home, "store", "this one must wait for the lock")
            assert code == SIGNER and doc["error"] == "lock_timeout"
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)
