"""The command tree imports only what a command needs."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import click
import pytest

from mnemolog.cli import main as cli_main
from tests.support.cli import Cli

HEAVY = ("ollama", "pyarrow", "tiktoken", "mcp", "starlette", "uvicorn", "rich", "httpx")


def imported_after(argv: list[str], env: dict[str, str] | None = None) -> set[str]:
    """Top-level packages in sys.modules after running `mnemolog ARGV` in a fresh interpreter."""
    code = (
        "import sys, json\n"
        "from mnemolog.cli.main import cli\n"
        "try:\n"
        f"    cli.main(args={argv!r}, prog_name='mnemolog')\n"
        "except SystemExit:\n"
        "    pass\n"
        "sys.__stderr__.write('\\n' + json.dumps(sorted({m.split('.')[0] for m in sys.modules})) + '\\n')\n"
    )
    p = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env, check=False
    )
    return set(json.loads(p.stderr.strip().splitlines()[-1]))


def test_help_imports_none_of_the_heavy_libraries() -> None:
    mods = imported_after(["--help"])
    assert "click" in mods  # the probe itself works
    assert not mods & set(HEAVY), mods & set(HEAVY)
    # Nor the store: --help never opens a home.
    assert "duckdb" not in mods and "pydantic" not in mods and "nacl" not in mods


def test_a_read_command_does_not_import_the_curators_or_arrow(tmp_path: pytest.TempPathFactory) -> None:
    import os

    from mnemolog.substrate.home import init_home

    home = tmp_path / "h"  # type: ignore[operator]
    init_home(home)
    env = {**os.environ, "MNEMOLOG_HOME": str(home)}
    mods = imported_after(["recall", "anything"], env)
    assert "duckdb" in mods  # it did run the recall
    assert not mods & {"ollama", "pyarrow", "tiktoken", "mcp", "starlette", "uvicorn"}


def test_get_loads_no_model_no_arrow_no_server_and_no_yaml(tmp_path: pytest.TempPathFactory) -> None:
    """`get` reads one row: no embedder runtime, numpy, Arrow, server framework or import-format parser."""
    import os

    from mnemolog.substrate.api import Substrate
    from mnemolog.substrate.home import init_home

    home = tmp_path / "h"  # type: ignore[operator]
    init_home(home)
    with Substrate.open(home, long_lived=False, worker=False) as s:
        mid = s.store("one memory to get")["id"]
    env = {**os.environ, "MNEMOLOG_HOME": str(home)}
    mods = imported_after(["get", mid], env)
    assert "duckdb" in mods  # it did open the home
    heavy = {"onnxruntime", "wordllama", "tokenizers", "pyarrow", "starlette", "uvicorn", "mcp", "httpx"}
    assert not mods & (heavy | {"yaml", "tiktoken", "ollama"}), mods & (heavy | {"yaml"})


@pytest.mark.parametrize("name", sorted(cli_main.COMMANDS))
def test_table_help_matches_the_command(name: str) -> None:
    """`mnemolog --help` prints the table's line without importing; it must say what the command says."""
    ctx = click.Context(cli_main.cli)
    cmd = cli_main.cli.get_command(ctx, name)
    assert cmd is not None
    assert cmd.get_short_help_str(limit=10**6) == cli_main.COMMANDS[name][1]


def test_help_lists_every_command_and_log_keeps_export(cli: Cli) -> None:
    runner_out = cli(None, "--help").stdout
    for name in cli_main.COMMANDS:
        assert f"  {name} " in runner_out
    log_help = cli(None, "log", "--help").stdout
    assert "export" in log_help and "verify" in log_help


def test_unknown_command_is_a_usage_error(cli: Cli) -> None:
    p = cli(None, "no-such-command", json=True)
    assert p.code == 64
    assert json.loads(p.stdout)["error"] == "usage"


def test_get_never_loads_numpy(tmp_path: pytest.TempPathFactory) -> None:
    """numpy is imported lazily (projections.lazymod): `get` ranks nothing, so it never loads."""
    import os

    from mnemolog.substrate.api import Substrate
    from mnemolog.substrate.home import init_home

    home = tmp_path / "h"  # type: ignore[operator]
    init_home(home)
    with Substrate.open(home, long_lived=False, worker=False) as s:
        mid = s.store("one memory to get")["id"]
    code = (
        "import sys\n"
        "from mnemolog.cli.main import cli\n"
        "try:\n"
        f"    cli.main(args=['get', {mid!r}], prog_name='mnemolog')\n"
        "except SystemExit:\n"
        "    pass\n"
        "sys.__stderr__.write('\\nloaded=%s\\n' % ('numpy._core' in sys.modules))\n"
    )
    env = {**os.environ, "MNEMOLOG_HOME": str(home)}
    p = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env, check=False
    )
    assert mid in p.stdout  # it did read the memory
    assert p.stderr.strip().splitlines()[-1] == "loaded=False"


def test_the_command_asks_for_one_blas_thread_unless_told(monkeypatch: pytest.MonkeyPatch) -> None:
    """The process's own choice (OPENBLAS_NUM_THREADS) wins; otherwise one thread, set by `main` only."""
    seen: list[str | None] = []
    monkeypatch.setattr(cli_main.cli, "main", lambda **_: seen.append(os.environ.get("OPENBLAS_NUM_THREADS")))
    monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
    cli_main.main()
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "3")
    cli_main.main()
    assert seen == ["1", "3"]
