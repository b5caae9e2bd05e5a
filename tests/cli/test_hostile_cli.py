"""Hostile command lines end in exit 64 or 65 with a message, never a traceback, and write nothing.

Undecodable argv bytes reach Python as lone surrogates; JSON escapes can make
them too; nesting can exhaust the parser's recursion; integers can exceed
anything a seq or offset holds. Unexpected failures end in the last-resort
handler: exit 70, no traceback unless MNEMOLOG_DEBUG is set.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.projections.kit import log_digest, new_home
from tests.support.cli import Cli

EXE = Path(sys.executable).with_name("mnemolog")
DEEP_OBJECT = '{"a":' * 20_000 + "1" + "}" * 20_000
DEEP_ARRAY = '{"a":' + "[" * 20_000 + "]" * 20_000 + "}"
BAD = "a\udcff"  # what Python makes of the argv bytes b"a\xff"


@pytest.fixture(scope="module")
def base_home(cli: Cli, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    home = tmp_path_factory.mktemp("hostile") / "home"
    new_home(home)
    ran = cli(home, "--json", "store", "The deploy raised the worker count")
    code, out, _ = ran.code, ran.stdout, ran.stderr
    assert code == 0
    return home, json.loads(out)["memory"]["id"]


@pytest.fixture
def home(base_home: tuple[Path, str], tmp_path: Path) -> tuple[Path, str]:
    copy = tmp_path / "home"
    shutil.copytree(base_home[0], copy, ignore=shutil.ignore_patterns(".lock", ".want-*"))
    return copy, base_home[1]


def seventeen(mid: str) -> list[tuple[list[str], int]]:
    return [
        (["store", "x", "--meta", DEEP_OBJECT], 65),
        (["update", mid, "--meta", DEEP_ARRAY], 65),
        (["log", "append", "note.x", "--data", DEEP_OBJECT], 65),
        (["store", "x", "--title", BAD], 65),
        (["store", "x", "--tag", BAD], 65),
        (["store", "x", "--source", BAD], 65),
        (["store", BAD], 65),
        (["archive", mid, "--reason", BAD], 65),
        (["restore", mid, "--reason", BAD], 65),
        (["key", "rotate", "--name", BAD], 65),
        (["recall", "db\udcff"], 65),
        (["search", "db\udcff"], 65),
        (["get", "db\udcff"], 65),
        (["log", "append", "note.x", "--data", '{"x":"\\ud800"}'], 65),
        (["log", "append", "note.x", "--data", '{"\\udfff":1}'], 65),
        (["list", "--offset", "99999999999999999999999"], 64),
        (["log", "show", "--from", "-99999999999999999999999"], 64),
    ]


@pytest.mark.parametrize("case", range(17))
@pytest.mark.parametrize("as_json", [False, True])
def test_seventeen_hostile_inputs_give_a_clean_exit_and_write_nothing(
    cli: Cli, home: tuple[Path, str], case: int, as_json: bool
) -> None:
    root, mid = home
    args, expected = seventeen(mid)[case]
    before = log_digest(root)
    ran = cli(root, *(["--json"] if as_json else []), *args)
    code, out, err = ran.code, ran.stdout, ran.stderr
    assert code == expected, (args[:3], out, err)
    assert "Traceback" not in out + err
    if as_json:
        obj = json.loads(out)
        assert obj["ok"] is False and obj["exit_code"] == expected
    else:
        assert out == "" and err.startswith(("mnemolog:", "Usage:"))
    assert log_digest(root) == before


def test_undecodable_argv_bytes_from_a_real_process(home: tuple[Path, str]) -> None:
    root, _ = home
    before = log_digest(root)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MNEMOLOG_")}
    for args in (
        [b"recall", b"db\xff"],
        [b"store", b"x", b"--title", b"\xfe\xff"],
        [b"init", b"--key-name", b"k\xff"],
    ):
        p = subprocess.run(
            [os.fsencode(EXE), b"--home", os.fsencode(root), *args], capture_output=True, env=env, check=False
        )
        assert p.returncode == 65, p.stderr
        assert b"Traceback" not in p.stderr and b"not valid UTF-8" in p.stderr
    assert log_digest(root) == before


def test_init_on_proc_self_is_a_storage_error_naming_the_path(cli: Cli, tmp_path: Path) -> None:
    ran = cli(Path("/proc/self"), "init")
    code, _, err = ran.code, ran.stdout, ran.stderr
    assert code == 6 and "/proc/self" in err and "Traceback" not in err


def test_the_last_resort_handler(cli: Cli, home: tuple[Path, str], monkeypatch: pytest.MonkeyPatch) -> None:
    from mnemolog.substrate import api

    def broken(*_: Any, **__: Any) -> Any:
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(api.Substrate, "stats", broken)
    monkeypatch.delenv("MNEMOLOG_DEBUG", raising=False)
    root, _ = home
    ran = cli(root, "stats")
    code, out, err = ran.code, ran.stdout, ran.stderr
    assert code == 70
    assert err.startswith("mnemolog: internal error (please report)") and "Traceback" not in err
    ran = cli(root, "--json", "stats")
    code, out, err = ran.code, ran.stdout, ran.stderr
    assert code == 70 and json.loads(out)["error"] == "internal_error"
    ran = cli(root, "stats", env={"MNEMOLOG_DEBUG": "1"}, traceback=True)
    code, out, err = ran.code, ran.stdout, ran.stderr
    assert code == 70 and "Traceback" in err and "ZeroDivisionError: a bug" in err


def test_an_os_error_nobody_caught_is_a_storage_error_naming_the_path(
    cli: Cli, home: tuple[Path, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from mnemolog.substrate import api

    def full(*_: Any, **__: Any) -> Any:
        raise OSError(28, "No space left on device", "/somewhere/file")

    monkeypatch.setattr(api.Substrate, "stats", full)
    ran = cli(home[0], "stats")
    code, _, err = ran.code, ran.stdout, ran.stderr
    assert code == 6 and "No space left on device: /somewhere/file" in err


def test_every_integer_option_is_bounded() -> None:
    import click

    from mnemolog.cli.app import INT64_MAX, bound_integers
    from mnemolog.cli.main import cli as command

    bound_integers(command)
    seen = 0

    def walk(cmd: click.Command) -> None:
        nonlocal seen
        for p in cmd.params:
            assert p.type is not click.INT, (cmd.name, p.name)
            if isinstance(p.type, click.IntRange):
                seen += 1
                assert p.type.max is not None and p.type.max <= INT64_MAX, (cmd.name, p.name)
                assert p.type.min is not None
        if isinstance(cmd, click.Group):
            for sub in cmd.commands.values():
                walk(sub)

    walk(command)
    assert seen >= 10


@pytest.mark.parametrize(
    ("call", "code"),
    [
        (lambda sub: sub.list(offset=10**30), 64),
        (lambda sub: sub.list(offset=-1), 64),
        (lambda sub: sub.recall("db\ud800"), 65),
        (lambda sub: sub.get("id\udcff"), 65),
        (lambda sub: sub.store("x", title="t\ud800"), 65),
        (lambda sub: sub.store("x", metadata={"k": "\udfff"}), 65),
        (lambda sub: sub.archive("x", reason="\ud800"), 65),
    ],
)
def test_the_same_inputs_through_the_api_are_usage_or_input_errors(
    home: tuple[Path, str], call: Any, code: int
) -> None:
    """What MCP passes on: the API answers with the error class, never an internal error."""
    from mnemolog.eventlog.errors import MnemologError
    from mnemolog.substrate.api import Substrate

    root, _ = home
    before = log_digest(root)
    with Substrate.open(root, long_lived=False, worker=False) as sub, pytest.raises(MnemologError) as caught:
        call(sub)
    assert caught.value.exit_code == code
    assert log_digest(root) == before
