"""Validation gaps: self-links, duplicate links, taking an edge back, an empty --home, umask 000."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest

from mnemolog.eventlog.errors import BadInput, NotFound
from mnemolog.eventlog.store.log import Log
from tests.projections.kit import log_digest, new_home
from tests.support.cli import Cli

EXE = Path(sys.executable).with_name("mnemolog")


@pytest.fixture
def two(cli: Cli, tmp_path: Path) -> tuple[Path, str, str]:
    home = new_home(tmp_path / "home").root
    a = cli.json(home, "store", "the first memory about harbours")[1]["memory"]["id"]
    b = cli.json(home, "store", "the second memory about ships")[1]["memory"]["id"]
    return home, a, b


def test_a_self_link_is_refused(cli: Cli, two: tuple[Path, str, str]) -> None:
    home, a, _ = two
    before = log_digest(home)
    code, out = cli.json(home, "link", a, a)
    assert code == 65 and out["error"] == "bad_input" and "itself" in out["message"]
    assert log_digest(home) == before
    from mnemolog.substrate.events import LinkCreated

    with pytest.raises(BadInput):
        LinkCreated(src=a, dst=a, relation="related_to")  # the payload model holds the rule


def test_a_duplicate_link_is_informational_and_returns_the_edge(cli: Cli, two: tuple[Path, str, str]) -> None:
    home, a, b = two
    code, first = cli.json(home, "link", a, b, "--relation", "supersedes")
    assert code == 0
    before = log_digest(home)
    code, again = cli.json(home, "link", a, b, "--relation", "supersedes")
    assert code == 1 and again["ok"] is True and again["link"]["already_linked"] is True
    assert again["link"]["seq"] == first["link"]["seq"]
    assert log_digest(home) == before
    code, _other = cli.json(
        home, "link", a, b, "--relation", "related_to"
    )  # another relation is another edge
    assert code == 0


def test_unlink_takes_an_edge_back_in_the_projection_and_the_bundle(
    cli: Cli, two: tuple[Path, str, str], tmp_path: Path
) -> None:
    home, a, b = two
    cli.json(home, "link", a, b)
    code, out = cli.json(home, "unlink", a, b, "--reason", "linked by mistake")
    assert code == 0 and len(out["removed"]) == 1
    got = cli.json(home, "get", a)[1]["memory"]
    assert got["links"]["outgoing"] == []
    assert cli.json(home, "get", b)[1]["memory"]["links"]["incoming"] == []
    with Log(home / "log") as log:
        removed = [e for e in log.iter_entries(0) if e.type == "link.removed"]
    assert len(removed) == 1 and removed[0].data["reason"] == "linked by mistake"
    assert cli.json(home, "log", "verify")[0] == 0
    assert cli.json(home, "rebuild")[0] == 0
    assert cli.json(home, "get", a)[1]["memory"]["links"]["outgoing"] == []  # the fold honours it on replay
    bundle = tmp_path / "a.tar"
    assert cli.json(home, "export-forensic-bundle", "--memory-id", a, "-o", str(bundle))[0] == 0
    ran = cli(home, "verify-bundle", str(bundle), json=True)
    code, err = ran.code, ran.stderr
    assert code == 0, err
    code, again = cli.json(home, "unlink", a, b)
    assert code == 2 and again["error"] == "not_found"
    assert cli.json(home, "link", a, b)[0] == 0  # and it can be drawn again


def test_unlink_through_the_api_names_what_is_missing(two: tuple[Path, str, str]) -> None:
    from mnemolog.substrate.api import Substrate

    home, a, b = two
    with Substrate.open(home, long_lived=False, worker=False) as sub, pytest.raises(NotFound) as caught:
        sub.unlink(a, b, "supersedes")
    assert caught.value.details["relation"] == "supersedes"


def test_an_empty_home_is_refused(cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MNEMOLOG_HOME", str(tmp_path / "elsewhere"))
    r = cli("", "stats", json=True)
    assert r.code == 64 and "--home is empty" in r.stdout
    r = cli("", "init")
    assert r.code == 64
    assert not (tmp_path / "elsewhere").exists()


def test_everything_is_private_under_umask_000(cli: Cli, tmp_path: Path) -> None:
    home = tmp_path / "home"
    env: dict[str, str | None] = {k: None for k in os.environ if k.startswith("MNEMOLOG_")}

    def mnemolog(*args: str) -> None:
        umask = os.umask(0)
        try:
            r = cli(home, *args, env=env)
        finally:
            os.umask(umask)
        assert r.code == 0, r.stderr

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
