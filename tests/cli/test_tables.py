"""Tables for a person at a terminal; the same plain lines as ever for a pipe; --json untouched."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mnemolog.cli import tables
from mnemolog.substrate.api import Substrate
from mnemolog.substrate.home import init_home

ROWS = [
    {"id": "01ABCDEFGHJKMNPQRSTVWXYZ00", "namespace": "ops/db", "kind": "decision",
     "title": "Prefer pg_repack", "content": "Prefer pg_repack over ALTER TABLE",
     "created_at": 1_700_000_000_000_000, "score": 2.5},
    {"id": "01ABCDEFGHJKMNPQRSTVWXYZ01", "namespace": "ops", "kind": "observation", "title": None,
     "content": "Workers timed out\nbecause the pool was exhausted", "created_at": 1_700_000_000_000_000,
     "score": 1.25, "archived_at": 1_700_000_000_000_001},
]  # fmt: skip


def test_plain_lines_in_a_pipe(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tables, "to_terminal", lambda: False)
    out = tables.memories(ROWS, "(none)").splitlines()
    assert out[0] == "  2.500  01ABCDEFGHJKMNPQRSTVWXYZ00  ops/db           decision    Prefer pg_repack"
    assert out[1].endswith("Workers timed out [archived]")
    assert tables.memories([], "(none)") == "(none)"


def test_an_aligned_table_in_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tables, "to_terminal", lambda: True)
    monkeypatch.setenv("COLUMNS", "140")
    monkeypatch.setenv("NO_COLOR", "1")
    text = tables.memories(ROWS, "(none)")
    lines = [ln for ln in text.splitlines() if ln.strip()]
    header = lines[0]
    for col in ("score", "id", "namespace", "kind", "title", "created", "flags"):
        assert col in header
    # Aligned: every row's id starts in the same column as the header's.
    at = header.index("id")
    rows = [ln for ln in lines if "01ABCDEFGHJKMNPQRSTVWXYZ0" in ln]
    assert len(rows) == 2 and all(r.index("01ABCDEF") == at for r in rows)
    assert "archived" in rows[1] and "2023-11-14 22:13" in rows[0]


def test_stats_table_and_plain(monkeypatch: pytest.MonkeyPatch) -> None:
    st = {"log": {"size": 3, "log_id": "ab"}, "memories": 2, "visible": 1, "links": 0,
          "events": {"memory.stored": 2, "log.created": 1}}  # fmt: skip
    monkeypatch.setattr(tables, "to_terminal", lambda: False)
    plain = tables.stats(st)
    assert "memories     2" in plain and plain.endswith("events       memory.stored 2, log.created 1")
    monkeypatch.setattr(tables, "to_terminal", lambda: True)
    monkeypatch.setenv("NO_COLOR", "1")
    table = tables.stats(st)
    assert "memory.stored" in table and "events" in table and "visible" in table


def test_json_output_is_unchanged_by_a_terminal(tmp_path: Path) -> None:
    """Under a pseudo-terminal, --json prints exactly what it prints into a pipe."""
    pty = pytest.importorskip("pty")
    init_home(tmp_path / "h")
    with Substrate.open(tmp_path / "h", long_lived=False) as s:
        s.store("Prefer pg_repack over ALTER TABLE for big tables")
    argv = [
        sys.executable,
        "-m",
        "mnemolog.cli.main",
        "--home",
        str(tmp_path / "h"),
        "--json",
        "recall",
        "table",
    ]
    piped = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    pid, fd = pty.fork()
    if pid == 0:  # pragma: no cover - the child
        os.execv(argv[0], argv)
    chunks = []
    while True:
        try:
            data = os.read(fd, 65536)
        except OSError:
            break
        if not data:
            break
        chunks.append(data)
    os.waitpid(pid, 0)
    seen = b"".join(chunks).decode().replace("\r\n", "\n")
    assert json.loads(seen) == json.loads(piped)
    assert seen.strip() == piped.strip()
