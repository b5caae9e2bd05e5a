"""Validation gaps: self-links, duplicate links, taking an edge back, an empty --home, umask 000."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from mnemolog.cli.main import cli
from mnemolog.eventlog.errors import BadInput, NotFound
from mnemolog.eventlog.store.log import Log
from tests.projections.kit import log_digest, new_home

EXE = Path(sys.executable).with_name("mnemolog")


def run(home: Path, *args: str) -> tuple[int, Any, str]:
    r = CliRunner().invoke(cli, ["--home", str(home), "--json", *args])
    out = r.stdout.strip().splitlines()
    return r.exit_code, json.loads(out[-1]) if out else None, r.stderr


@pytest.fixture
def two(tmp_path: Path) -> tuple[Path, str, str]:
    home = new_home(tmp_path / "home").root
    a = run(home, "store", "the first memory about harbours")[1]["memory"]["id"]
    b = run(home, "store", "the second memory about ships")[1]["memory"]["id"]
    return home, a, b


def test_a_self_link_is_refused(two: tuple[Path, str, str]) -> None:
    home, a, _ = two
    before = log_digest(home)
    code, out, _ = run(home, "link", a, a)
    assert code == 65 and out["error"] == "bad_input" and "itself" in out["message"]
    assert log_digest(home) == before
    from mnemolog.substrate.events import LinkCreated

    with pytest.raises(BadInput):
        LinkCreated(src=a, dst=a, relation="related_to")  # the payload model holds the rule


def test_a_duplicate_link_is_informational_and_returns_the_edge(two: tuple[Path, str, str]) -> None:
    home, a, b = two
    code, first, _ = run(home, "link", a, b, "--relation", "supersedes")
    assert code == 0
    before = log_digest(home)
    code, again, _ = run(home, "link", a, b, "--relation", "supersedes")
    assert code == 1 and again["ok"] is True and again["link"]["already_linked"] is True
    assert again["link"]["seq"] == first["link"]["seq"]
    assert log_digest(home) == before
    code, _other, _ = run(home, "link", a, b, "--relation", "related_to")  # another relation is another edge
    assert code == 0


def test_unlink_takes_an_edge_back_in_the_projection_and_the_bundle(
    two: tuple[Path, str, str], tmp_path: Path
) -> None:
    home, a, b = two
    run(home, "link", a, b)
    code, out, _ = run(home, "unlink", a, b, "--reason", "linked by mistake")
    assert code == 0 and len(out["removed"]) == 1
    got = run(home, "get", a)[1]["memory"]
    assert got["links"]["outgoing"] == []
    assert run(home, "get", b)[1]["memory"]["links"]["incoming"] == []
    with Log(home / "log") as log:
        removed = [e for e in log.iter_entries(0) if e.type == "link.removed"]
    assert len(removed) == 1 and removed[0].data["reason"] == "linked by mistake"
    assert run(home, "log", "verify")[0] == 0
    assert run(home, "rebuild")[0] == 0
    assert run(home, "get", a)[1]["memory"]["links"]["outgoing"] == []  # the fold honours it on replay
    bundle = tmp_path / "a.tar"
    assert run(home, "export-forensic-bundle", "--memory-id", a, "-o", str(bundle))[0] == 0
    code, _report, err = run(home, "verify-bundle", str(bundle))
    assert code == 0, err
    code, again, _ = run(home, "unlink", a, b)
    assert code == 2 and again["error"] == "not_found"
    assert run(home, "link", a, b)[0] == 0  # and it can be drawn again


def test_unlink_through_the_api_names_what_is_missing(two: tuple[Path, str, str]) -> None:
    from mnemolog.substrate.api import Substrate

    home, a, b = two
    with Substrate.open(home, long_lived=False, worker=False) as sub, pytest.raises(NotFound) as caught:
        sub.unlink(a, b, "supersedes")
    assert caught.value.details["relation"] == "supersedes"


def test_an_empty_home_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MNEMOLOG_HOME", str(tmp_path / "elsewhere"))
    r = CliRunner().invoke(cli, ["--home", "", "--json", "stats"])
    assert r.exit_code == 64 and "--home is empty" in r.stdout
    r = CliRunner().invoke(cli, ["--home", "", "init"])
    assert r.exit_code == 64
    assert not (tmp_path / "elsewhere").exists()


def test_everything_is_private_under_umask_000(tmp_path: Path) -> None:
    home = tmp_path / "home"
    env = {k: v for k, v in os.environ.items() if not k.startswith("MNEMOLOG_")}

    def mnemolog(*args: str) -> None:
        p = subprocess.run(
            [str(EXE), "--home", str(home), *args],
            capture_output=True,
            text=True,
            env=env,
            preexec_fn=lambda: os.umask(0),
            check=False,
            timeout=300,
        )
        assert p.returncode == 0, p.stderr

    mnemolog("init")
    mnemolog("store", "a private memory")
    mnemolog("key", "rotate")
    mnemolog("log", "checkpoint")
    mnemolog("rebuild")
    loose = [
        f"{p.relative_to(home)} {stat.filemode(p.stat().st_mode)}"
        for p in [home, *home.rglob("*")]
        if not p.is_symlink() and p.stat().st_mode & 0o077
    ]
    assert loose == []
