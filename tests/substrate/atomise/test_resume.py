"""Atomisation is resumable and idempotent, decided from the log.

A run killed anywhere (os._exit in a child, or a real SIGKILL) leaves atoms,
or a completion without its archives. The next run, a worker pass or
`atomise --pending` finishes it: atoms already in the log are reused when the
curator gives them again, others are archived once with a reason, a
completion without its archives gets them, and nothing is stored twice.
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

from mnemolog.eventlog.store.log import Log
from tests.projections.kit import new_home
from tests.support.long_texts import LONG_POST_MORTEM

EXE = Path(sys.executable).with_name("mnemolog")
REPO = Path(__file__).resolve().parents[3]

CHILD = textwrap.dedent(
    """
    import os, sys
    from pathlib import Path
    from mnemolog.substrate import session as sm
    from mnemolog.substrate.api import Substrate
    from mnemolog.substrate.events import AtomisationCompleted, MemoryArchived

    root, mid, where = sys.argv[1], sys.argv[2], sys.argv[3]
    budget, force = int(sys.argv[4]), sys.argv[5] == "1"
    kind, _, count = where.partition(":")
    seen = {"atoms": 0, "archives": 0}
    real_append_many = sm.Session.append_many

    def append_many(self, payloads):
        out = real_append_many(self, payloads)
        for p in payloads:
            if type(p).__name__ == "MemoryStored" and p.atom_of:
                seen["atoms"] += 1
                if kind == "atoms" and seen["atoms"] == int(count):
                    os._exit(137)
            if isinstance(p, AtomisationCompleted) and kind == "completed":
                os._exit(137)
            if isinstance(p, MemoryArchived) and p.by == "reatomisation" and kind == "superseded":
                seen["archives"] += 1
                if seen["archives"] == int(count):
                    os._exit(137)
        return out

    sm.Session.append_many = append_many
    with Substrate.open(root, long_lived=False, worker=False) as sub:
        sub.atomise(mid, curator="rules", max_atom_tokens=budget, force=force)
    print("no kill")
    """
)


def child(home: Path, mid: str, where: str, budget: int = 200, force: bool = False) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MNEMOLOG_")}
    env["PYTHONPATH"] = str(REPO)
    p = subprocess.run(
        [sys.executable, "-c", CHILD, str(home), mid, where, str(budget), "1" if force else "0"],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        check=False,
        timeout=300,
    )
    assert p.returncode == 137, p.stdout + p.stderr


def mnemolog(home: Path, *args: str) -> tuple[int, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MNEMOLOG_")}
    p = subprocess.run(
        [str(EXE), "--home", str(home), "--json", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert "Traceback" not in p.stderr, p.stderr
    return p.returncode, json.loads(p.stdout) if p.stdout.strip() else None


def entries(home: Path) -> list[Any]:
    with Log(home / "log") as log:
        return list(log.iter_entries(0))


def check_atomised_once(home: Path, mid: str) -> dict[str, Any]:
    """One visible set of atoms, each stored once, the parent archived, nothing pending."""
    log = entries(home)
    stored = [e.data["id"] for e in log if e.type == "memory.stored" and e.data.get("atom_of") == mid]
    assert len(stored) == len(set(stored))
    completions = [e for e in log if e.type == "atomisation.completed" and e.data["source_id"] == mid]
    atoms = completions[-1].data["atom_ids"]
    _, got = mnemolog(home, "get", mid)
    assert got["memory"]["atomised_into"] == len(atoms) and got["memory"]["atomisation_archived_at"]
    _, listed = mnemolog(home, "list", "--limit", "1000")
    visible_atoms = [m["id"] for m in listed["memories"] if m["atom_of"] == mid]
    assert sorted(visible_atoms) == sorted(atoms), "exactly the completed atoms are visible"
    contents = [m["content"] for m in listed["memories"] if m["atom_of"] == mid]
    assert len(contents) == len(set(contents)), "no duplicate atoms in recall"
    archived = [
        e for e in log if e.type == "memory.archived" and e.data["id"] in stored and e.data["id"] not in atoms
    ]
    assert len({e.data["id"] for e in archived}) == len(archived), "each orphan archived exactly once"
    assert set(stored) <= set(atoms) | {e.data["id"] for e in archived}, "every other atom archived"
    _, stats = mnemolog(home, "stats")
    assert stats["stats"]["atomisation"]["pending"] == 0
    return {"stored": stored, "atoms": atoms, "completions": completions, "archived": archived}


@pytest.fixture
def parent(tmp_path: Path) -> tuple[Path, str]:
    home = new_home(tmp_path / "home").root
    code, out = mnemolog(home, "store", LONG_POST_MORTEM)
    assert code == 0
    return home, out["memory"]["id"]


@pytest.mark.parametrize("where", ["atoms:1", "atoms:4", "atoms:10"])
def test_killed_while_writing_atoms_then_rerun_reuses_them(parent: tuple[Path, str], where: str) -> None:
    home, mid = parent
    child(home, mid, where)
    written = int(where.split(":")[1])
    code, env = mnemolog(home, "atomise", mid, "--curator", "rules")
    assert code == 0, env
    assert len(env["reused_atom_ids"]) == written
    result = check_atomised_once(home, mid)
    assert len(result["stored"]) == len(result["atoms"])  # nothing written twice
    assert len(result["completions"]) == 1 and result["archived"] == []


def test_killed_while_writing_atoms_then_rerun_with_other_atoms_archives_the_orphans(
    parent: tuple[Path, str],
) -> None:
    home, mid = parent
    child(home, mid, "atoms:3", budget=120)
    code, env = mnemolog(home, "atomise", mid, "--curator", "rules")  # another budget: other atoms
    assert code == 0, env
    assert len(env["archived_orphan_ids"]) == 3 and "reused_atom_ids" not in env
    result = check_atomised_once(home, mid)
    reasons = {e.data["reason"] for e in result["archived"]}
    assert len(result["archived"]) == 3 and all("orphan of an interrupted atomisation" in r for r in reasons)
    code, again = mnemolog(home, "atomise", mid, "--curator", "rules")
    assert code == 1 and again["already_atomised"] is True
    assert len(check_atomised_once(home, mid)["archived"]) == 3  # exactly once


@pytest.mark.parametrize(
    "finisher",
    [["atomise", "{mid}", "--curator", "rules"], ["atomise", "--pending"], ["worker", "run", "--once"]],
)
def test_completed_but_not_archived_is_pending_work_and_is_finished(
    parent: tuple[Path, str], finisher: list[str]
) -> None:
    home, mid = parent
    child(home, mid, "completed")
    code, got = mnemolog(home, "get", mid)
    assert got["memory"]["atomisation_archived_at"] is None  # the parent is still visible...
    code, stats = mnemolog(home, "stats")
    assert stats["stats"]["atomisation"]["pending"] == 1  # ...and that is pending work
    code, out = mnemolog(home, *[a.replace("{mid}", mid) for a in finisher])
    assert code == 0, out
    result = check_atomised_once(home, mid)
    assert len(result["completions"]) == 1 and len(result["stored"]) == len(result["atoms"])


def test_a_forced_reatomisation_killed_among_its_archives(parent: tuple[Path, str]) -> None:
    home, mid = parent
    code, first = mnemolog(home, "atomise", mid, "--curator", "rules")
    assert code == 0
    child(home, mid, "superseded:3", budget=150, force=True)
    code, out = mnemolog(home, "atomise", "--pending")
    assert code == 0, out
    result = check_atomised_once(home, mid)
    assert not set(result["atoms"]) & set(first["atom_ids"])
    log = entries(home)
    superseded = [
        e.data["id"] for e in log if e.type == "memory.archived" and e.data.get("by") == "reatomisation"
    ]
    assert sorted(superseded) == sorted(first["atom_ids"])  # every old atom archived, each once


@pytest.mark.slow
def test_sigkill_loop_atomise_and_worker(tmp_path: Path) -> None:
    home = new_home(tmp_path / "home").root
    code, _ = mnemolog(
        home,
        "policy",
        "set",
        "team",
        "--auto-atomise-mode",
        "deferred",
        "--threshold",
        "300",
        "--curator",
        "rules",
    )
    assert code == 0
    rng = random.Random(5)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MNEMOLOG_")}
    deadline = time.monotonic() + 300
    for i in range(8):
        if time.monotonic() > deadline:
            break
        manual = i % 2 == 0
        code, out = mnemolog(
            home, "store", "-n", "team" if not manual else "default", f"{LONG_POST_MORTEM}\n\nCopy {i}."
        )
        assert code == 0
        mid = out["memory"]["id"]
        argv = ["atomise", mid, "--curator", "rules"] if manual else ["worker", "run", "--once"]
        p = subprocess.Popen(
            [str(EXE), "--home", str(home), *argv],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(rng.uniform(0.3, 3.0))
        if p.poll() is None:
            p.send_signal(signal.SIGKILL)
        p.wait()
        code, out = mnemolog(home, *argv)
        assert code in (0, 1), out
        check_atomised_once(home, mid)
