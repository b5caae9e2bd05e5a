"""Real processes sharing a home: a long-lived Substrate beside CLI commands, and SIGKILL mid-store.

The long-lived process stands in for the MCP server: it holds the projection
open (long_lived=True) and stores and recalls in a loop, while `mnemolog`
commands run in other processes. Neither may lose a write or wait long. A
store loop killed with SIGKILL at random moments must lose nothing it
acknowledged and leave projections that agree with a rebuild.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from mnemolog.eventlog.verify.trust import TRUST_GENESIS
from mnemolog.eventlog.verify.verifier import verify_log
from tests.projections.kit import check_invariants, new_home, open_sub, table_rows

# Processes, locks and timing bounds: run alone, not beside other tests under xdist.
pytestmark = pytest.mark.serial

EXE = Path(sys.executable).with_name("mnemolog")
ROOT = Path(__file__).resolve().parents[2]

SERVER = textwrap.dedent(
    """
    import json, sys, time
    from pathlib import Path
    from mnemolog.substrate.api import Substrate
    home, stop = sys.argv[1], Path(sys.argv[2])
    sub = Substrate.open(home, long_lived=True)
    i = 0
    try:
        while not stop.exists() or i < 20:
            t0 = time.monotonic()
            m = sub.store(f"server memory {i} about lighthouses", namespace="server")
            found = [r["id"] for r in sub.recall(f"server lighthouses {i}", limit=5, namespace="server")]
            dt = time.monotonic() - t0
            print(json.dumps({"i": i, "id": m["id"], "found": m["id"] in found, "seconds": dt}), flush=True)
            i += 1
    finally:
        sub.close()
    """
)

STORE_LOOP = textwrap.dedent(
    """
    import sys
    from mnemolog.substrate.api import Substrate
    sub = Substrate.open(sys.argv[1], long_lived=sys.argv[2] == "1")
    i = 0
    while True:
        m = sub.store(f"loop {sys.argv[3]} memory {i} " + "padding words " * (i % 50), tags=["loop"])
        print(m["id"], flush=True)
        i += 1
    """
)


def cli(home: Path, *args: str) -> tuple[subprocess.CompletedProcess[bytes], float]:
    t0 = time.monotonic()
    p = subprocess.run(
        [str(EXE), "--home", str(home), "--json", *args], capture_output=True, timeout=120, check=False
    )
    return p, time.monotonic() - t0


def env() -> dict[str, str]:
    e = dict(os.environ)
    e["PYTHONPATH"] = str(ROOT) + os.pathsep + e.get("PYTHONPATH", "")
    return e


def test_a_long_lived_process_and_cli_commands_share_a_home(tmp_path: Path) -> None:
    home = new_home(tmp_path / "home")
    stop = tmp_path / "stop"
    server = subprocess.Popen(
        [sys.executable, "-c", SERVER, str(home.root), str(stop)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env(),
    )
    cli_ids: list[str] = []
    slowest = 0.0
    try:
        assert server.stdout is not None
        first = server.stdout.readline()  # the server is up and has stored once
        assert first, server.stderr.read() if server.stderr else b""
        for j in range(8):
            p, dt = cli(home.root, "store", f"cli memory {j} about harbours", "-n", "cli")
            assert p.returncode == 0, p.stdout + p.stderr
            cli_ids.append(json.loads(p.stdout)["memory"]["id"])
            slowest = max(slowest, dt)
            p, dt = cli(home.root, "recall", f"cli harbours {j}", "-n", "cli")
            assert p.returncode == 0, p.stdout + p.stderr
            assert json.loads(p.stdout)["results"][0]["id"] == cli_ids[-1]  # its own write, at once
            slowest = max(slowest, dt)
            p, dt = cli(home.root, "recall", "server lighthouses", "--limit", "3")
            assert p.returncode == 0 and json.loads(p.stdout)["results"]  # the server's writes too
    finally:
        stop.touch()
        out, err = server.communicate(timeout=120)
    assert server.returncode == 0, err.decode()
    lines: list[dict[str, Any]] = [json.loads(x) for x in [first, *out.splitlines()] if x.strip()]
    assert len(lines) >= 20
    assert all(x["found"] for x in lines)  # the server recalls its own write at once, every time
    # Starving would end a command with lock_timeout (a non-zero exit, asserted above); how long
    # each took is printed, not asserted: on a shared machine a time bound tests the machine.
    print("slowest CLI command", slowest, "slowest server iteration", max(x["seconds"] for x in lines))
    verify_log(home.log_dir, policy=TRUST_GENESIS)
    with open_sub(home) as s:
        stored = {m["id"] for m in s.list(limit=1000)}
        assert set(cli_ids) <= stored
        assert {x["id"] for x in lines} <= stored
        assert len(stored) == len(cli_ids) + len(lines)
        with s.projections.session() as conn:
            check_invariants(conn)


@pytest.mark.slow
def test_sigkill_mid_store_loses_nothing_acknowledged(tmp_path: Path) -> None:
    home = new_home(tmp_path / "home")
    rng = random.Random(1234)
    acked: list[str] = []
    kills = 14
    for k in range(kills):
        p = subprocess.Popen(
            [sys.executable, "-c", STORE_LOOP, str(home.root), str(k % 2), str(k)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env(),
        )
        assert p.stdout is not None
        # Wait for the first acknowledgement (the interpreter is up), then kill at a random moment.
        first = p.stdout.readline()
        assert first, p.stderr.read() if p.stderr else b""
        time.sleep(rng.uniform(0.0, 0.6))
        p.send_signal(signal.SIGKILL)
        out, _ = p.communicate(timeout=60)
        acked += [x.decode().strip() for x in [first, *out.splitlines()] if x.strip()]
        with open_sub(home) as s:
            # Everything acknowledged is there, recallable, and the tables are consistent.
            have = {m["id"] for m in s.list(limit=1000, tags=["loop"])}
            assert set(acked) <= have
            assert s.recall(f"loop {k} memory")
            with s.projections.session() as conn:
                check_invariants(conn)
    verify_log(home.log_dir, policy=TRUST_GENESIS)
    with open_sub(home) as s:
        with s.projections.session() as conn:
            incremental = table_rows(conn)
        answers = [s.recall("loop memory padding", limit=200), s.search("padding words", limit=200)]
        s.rebuild()
        with s.projections.session() as conn:
            rebuilt = table_rows(conn)
        assert [s.recall("loop memory padding", limit=200), s.search("padding words", limit=200)] == answers
    for t in ("memories", "links", "touches", "hidden", "event_counts"):
        assert incremental[t] == rebuilt[t], t
    assert len(acked) > kills
