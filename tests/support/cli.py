"""The one way tests run the `mnemolog` command (the `cli` fixture of tests/conftest.py).

In process through click's CliRunner by default: a test pays for the command,
not for starting Python. `Cli.process` starts a real process, for the tests
where a process is the point (signals, stdin, the MCP stdio server, HTTP,
what a fresh interpreter imports).

Every run checks what no command may do: crash with an exception other than
the SystemExit carrying its exit code, or print a traceback. A `--json` run
(`Cli.json`, `Cli.ok`) reads the last line of stdout as the document, and a
document that says `ok` says it exactly when the exit code is 0 (exit code 1,
informational, may be either); a failure's document names its exit code,
error slug and message.
"""

from __future__ import annotations

import json as jsonlib
import os
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from mnemolog.cli.main import cli as command
from mnemolog.substrate.home import Home

Where = Home | Path | str | None
Env = Mapping[str, str | None]


@dataclass(frozen=True)
class Ran:
    """What one command did: its exit code and what it printed."""

    code: int
    stdout_bytes: bytes
    stderr_bytes: bytes

    @property
    def stdout(self) -> str:
        return self.stdout_bytes.decode("utf-8", "replace")

    @property
    def stderr(self) -> str:
        return self.stderr_bytes.decode("utf-8", "replace")

    @property
    def output(self) -> str:
        return self.stdout + self.stderr

    @property
    def doc(self) -> Any:
        """The last line of stdout as JSON, or None when nothing was printed."""
        lines = self.stdout.strip().splitlines()
        return jsonlib.loads(lines[-1]) if lines else None

    @property
    def single(self) -> Any:
        """The JSON object stdout holds, asserted to be its only line (as the JSON format promises)."""
        (line,) = self.stdout.splitlines()
        doc = jsonlib.loads(line)
        assert isinstance(doc, dict), line
        return doc


def _argv(home: Where, json: bool, argv: tuple[str, ...]) -> list[str]:
    pre = [] if home is None else ["--home", str(home.root if isinstance(home, Home) else home)]
    return [*pre, *(["--json"] if json else []), *argv]


class Cli:
    """Runs `mnemolog [--home HOME] [--json] ARGV...` and checks it did not crash."""

    def __call__(
        self,
        home: Where,
        *argv: str,
        json: bool = False,
        stdin: str | bytes | None = None,
        env: Env | None = None,
        width: int | None = None,
        traceback: bool = False,
    ) -> Ran:
        r = CliRunner().invoke(
            command, _argv(home, json, argv), input=stdin, env=dict(env or {}), terminal_width=width
        )
        if r.exception is not None and not isinstance(r.exception, SystemExit):
            raise r.exception
        ran = Ran(r.exit_code, r.stdout_bytes, r.stderr_bytes or b"")
        # `traceback`: the test asks for one (MNEMOLOG_DEBUG=1 shows a bug's traceback).
        assert traceback or "Traceback" not in ran.output, ran.output
        return ran

    def json(
        self,
        home: Where,
        *argv: str,
        stdin: str | bytes | None = None,
        env: Env | None = None,
    ) -> tuple[int, Any]:
        """The exit code and the document a `--json` run printed (None when it printed nothing)."""
        ran = self(home, *argv, json=True, stdin=stdin, env=env)
        doc = ran.doc
        # Exit 1 is informational: done already, or nothing to do; `ok` says which.
        if isinstance(doc, dict) and "ok" in doc and ran.code != 1:
            assert doc["ok"] is (ran.code == 0), ran.output
            if ran.code >= 2:
                assert doc["exit_code"] == ran.code and doc["message"] and doc["error"], doc
        return ran.code, doc

    def ok(
        self,
        home: Where,
        *argv: str,
        stdin: str | bytes | None = None,
        env: Env | None = None,
    ) -> dict[str, Any]:
        """The document of a `--json` run that must succeed."""
        code, doc = self.json(home, *argv, stdin=stdin, env=env)
        assert code == 0, doc
        assert isinstance(doc, dict) and doc["ok"] is True, doc
        return doc

    def process(
        self,
        home: Where,
        *argv: str,
        json: bool = False,
        stdin: bytes | None = None,
        env: Env | None = None,
        timeout: float = 120,
    ) -> Ran:
        """A real `python -m mnemolog.cli.main` process, run to its end (a test failure if it hangs)."""
        merged = {**os.environ}
        for k, v in (env or {}).items():
            if v is None:
                merged.pop(k, None)
            else:
                merged[k] = v
        try:
            p = subprocess.run(
                [sys.executable, "-m", "mnemolog.cli.main", *_argv(home, json, argv)],
                input=stdin,
                capture_output=True,
                env=merged,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired:
            pytest.fail(f"`mnemolog {' '.join(argv)}` hung: no end after {timeout} s")
        ran = Ran(p.returncode, p.stdout, p.stderr)
        assert "Traceback" not in ran.output, ran.output
        return ran
