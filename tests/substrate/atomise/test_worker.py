"""A deferred worker killed mid-pass: on restart the request completes exactly once, reusing its atoms."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from mnemolog.eventlog.store.log import Log
from mnemolog.substrate.api import Substrate
from mnemolog.substrate.home import init_home
from tests.substrate.atomise.test_service import POST_MORTEM

REPO = Path(__file__).resolve().parents[3]


def worker(home: Path, sleep: float) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "MNEMOLOG_TEST_HOOK_SLEEP": str(sleep)}
    return subprocess.Popen(
        [sys.executable, "-m", "mnemolog.cli.main", "--home", str(home), "worker", "run", "--once"],
        env=env,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def atoms_in_log(home: Path) -> int:
    with Log(home / "log") as log:
        return sum(1 for e in log.iter_entries(0) if e.type == "memory.stored" and e.data.get("atom_of"))


def test_worker_killed_mid_pass_completes_exactly_once(tmp_path: Path) -> None:
    home = tmp_path / "home"
    init_home(home)
    with Substrate.open(home, long_lived=False) as sub:
        sub.set_policy(
            "team", auto_atomise_mode="deferred", curator="rules",
            auto_atomise_max_atom_tokens=60, auto_atomise_threshold_cl100k=100,
        )  # fmt: skip
        parent = sub.store(POST_MORTEM, namespace="team")
        assert parent["atomise_outcome"] == "requested"
    cfg = home / "config.toml"
    text = cfg.read_text()
    assert "\n[hooks]\n" in text
    cfg.write_text(
        text.replace("\n[hooks]\n", '\n[hooks]\npost_store = ["tests.support.slow_hooks:slow_post_store"]\n')
    )

    p = worker(home, sleep=0.4)
    deadline = time.monotonic() + 60
    while atoms_in_log(home) < 2 and time.monotonic() < deadline and p.poll() is None:
        time.sleep(0.05)
    assert p.poll() is None, p.communicate()[1].decode()
    p.send_signal(signal.SIGKILL)
    p.wait()
    partial = atoms_in_log(home)
    assert partial >= 2

    p2 = worker(home, sleep=0.0)
    _out, err = p2.communicate(timeout=120)
    assert p2.returncode == 0, err.decode()

    with Substrate.open(home, long_lived=False) as sub:
        entries = list(sub.log.iter_entries(0))
        completions = [e for e in entries if e.type == "atomisation.completed"]
        assert len(completions) == 1
        request = next(e for e in entries if e.type == "atomisation.requested")
        assert completions[0].data["request_seq"] == request.seq
        atoms = completions[0].data["atom_ids"]
        p = sub.get(parent["id"])
        assert p["atomised_into"] == len(atoms) and p["atomisation_archived_at"] is not None
        assert sub.stats()["atomisation"]["pending"] == 0
        visible = {m["id"] for m in sub.list(namespace="team", limit=100)}
        assert visible == set(atoms)
        # The killed run's atoms were reused (the rules curator gives the same atoms again):
        # every atom was stored exactly once, and no leftover remains.
        assert atoms_in_log(home) == len(atoms)
        every = sub.list(namespace="team", limit=100, include_archived=True)
        assert [m for m in every if m["atom_of"] == parent["id"] and m["id"] not in atoms] == []
