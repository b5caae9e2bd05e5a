"""Payload schema evolution: an old log (policy.set tv 1) read through its upcaster, never rewritten.

tests/substrate/data/home-tv1 is a real home written before policy.set tv 2
existed (its key is a test fixture key). Its log is read as it is; the
upcaster turns each tv 1 payload ("the whole policy") into tv 2 ("clear,
then set") for the fold, and new writes on top use tv 2.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from mnemolog.eventlog.verify.trust import TRUST_GENESIS
from mnemolog.eventlog.verify.verifier import verify_log
from mnemolog.substrate.api import Substrate
from mnemolog.substrate.events import CURRENT_TV, upcast

FIXTURE = Path(__file__).parent / "data" / "home-tv1"


@pytest.fixture
def old_home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    shutil.copytree(FIXTURE, home)
    os.chmod(home / "keys" / "signing.key", 0o600)  # git does not keep file modes
    (home / "projections").mkdir(exist_ok=True)
    return home


def test_the_fixture_is_an_old_log() -> None:
    from mnemolog.eventlog.store.log import Log

    with Log(FIXTURE / "log") as log:
        tvs = {(e.type, e.tv) for e in log.iter_entries(0) if e.type == "policy.set"}
    assert tvs == {("policy.set", 1)}
    assert CURRENT_TV["policy.set"] == 2


def test_upcaster_maps_whole_policy_to_clear_then_set() -> None:
    assert upcast("policy.set", 1, {"namespace": "a", "policy": {"write": "none"}, "cleared": False}) == {
        "namespace": "a",
        "changes": {"write": "none"},
        "unset": [],
        "clear": True,
    }
    assert upcast("policy.set", 1, {"namespace": "a", "policy": {}, "cleared": True})["changes"] == {}
    # current payloads pass through untouched
    cur = {"namespace": "a", "changes": {"curator": "rules"}, "unset": [], "clear": False}
    assert upcast("policy.set", 2, cur) is cur


def test_old_log_projects_through_the_upcaster_and_grows_with_tv2(old_home: Path) -> None:
    verify_log(old_home / "log", processes=1, policy=TRUST_GENESIS)
    with Substrate.open(old_home, long_lived=False) as sub:
        ops = sub.get_policy("ops/db")
        assert (
            ops["policy"]["auto_atomise_mode"] == "deferred" and ops["sources"]["auto_atomise_mode"] == "ops"
        )
        assert ops["policy"]["auto_atomise_max_atom_tokens"] == 120
        assert ops["policy"]["auto_atomise_threshold_cl100k"] == 800  # from the root
        team = sub.get_policy("team")
        assert team["own"] == {"auto_atomise_mode": "synchronous"}  # cleared, then set again
        assert team["policy"]["write"] == "any"
        assert len(sub.list()) == 2
        size = sub.log.refresh()
        old_bytes = [e.raw for e in sub.log.iter_entries(0, size)]
        # New writes are tv 2, field by field.
        sub.set_policy("ops", curator="ollama", unset=["auto_atomise_max_atom_tokens"])
        new = list(sub.log.iter_entries(size))[-1]
        assert (new.type, new.tv) == ("policy.set", 2)
        assert new.data == {
            "namespace": "ops",
            "changes": {"curator": "ollama"},
            "unset": ["auto_atomise_max_atom_tokens"],
            "clear": False,
        }
        ops = sub.get_policy("ops")
        assert ops["own"] == {"auto_atomise_mode": "deferred", "curator": "ollama", "write": "any"}
        before = {k: sub.get_policy(k) for k in ("", "ops", "ops/db", "team")}
        sub.rebuild()
        assert {k: sub.get_policy(k) for k in ("", "ops", "ops/db", "team")} == before
        # the old entries are read, never rewritten
        assert [e.raw for e in sub.log.iter_entries(0, size)] == old_bytes
    verify_log(old_home / "log", processes=1, policy=TRUST_GENESIS)
