"""Long, sectioned memories atomise at the default budget; policies that could only fail are refused."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from mnemolog.curators.tokens import count_tokens
from mnemolog.substrate.api import Substrate
from mnemolog.substrate.home import init_home
from mnemolog.substrate.memory.governance import PolicyConflict
from tests.support.cli import Cli
from tests.support.long_texts import LONG_POST_MORTEM


@pytest.fixture
def home(tmp_path: Path) -> Path:
    init_home(tmp_path / "home")
    return tmp_path / "home"


@pytest.fixture
def sub(home: Path) -> Iterator[Substrate]:
    s = Substrate.open(home, long_lived=False)
    yield s
    s.close()


def test_the_long_post_mortem_atomises_from_the_cli_at_the_default_budget(cli: Cli, home: Path) -> None:
    assert count_tokens(LONG_POST_MORTEM) > 2600
    code, out = cli.json(home, "store", "-", "--title", "Ledger outage", stdin=LONG_POST_MORTEM)
    assert code == 0
    pid = out["memory"]["id"]
    code, env = cli.json(home, "atomise", pid, "--curator", "rules")
    assert code == 0, env
    assert 2 <= env["atom_count"] <= 10 and env["archived_at"]
    assert any(w.startswith("selected ") for w in env["warnings"])
    code, hit = cli.json(home, "recall", "why did the certificate rotation break replication", "--limit", "3")
    assert code == 0
    top = hit["results"][0]
    assert top["atom_of"] == pid
    assert top["title"] and top["metadata"]["section"]
    assert top["title"].startswith(top["metadata"]["section"])


def test_atoms_carry_titles_and_their_section(sub: Substrate) -> None:
    parent = sub.store(LONG_POST_MORTEM, namespace="ops")
    res = sub.atomise(parent["id"], curator="rules")
    atoms = [sub.get(a) for a in res.atom_ids]
    sections = [a["metadata"]["section"] for a in atoms]
    assert "Root cause" in sections and len(set(sections)) == len(sections) == 10
    for a in atoms:
        assert a["title"].startswith(a["metadata"]["section"] + ": ")
        assert a["metadata"]["atom_tokens"] <= 200
        start, end = a["source_span"]
        assert LONG_POST_MORTEM[start:end] == a["content"]


@pytest.mark.parametrize("mode", ["deferred", "synchronous"])
def test_a_threshold_at_or_below_the_atom_budget_is_refused_when_set(sub: Substrate, mode: str) -> None:
    with pytest.raises(PolicyConflict) as caught:
        sub.set_policy("team", auto_atomise_mode=mode, auto_atomise_threshold_cl100k=150)
    assert caught.value.exit_code == 65 and caught.value.slug == "policy_conflict"
    assert caught.value.details["namespace"] == "team"
    assert "auto_atomise_max_atom_tokens=200" in caught.value.message
    assert sub.get_policy("team")["own"] is None  # nothing written
    sub.set_policy("team", auto_atomise_mode=mode, auto_atomise_threshold_cl100k=201)


def test_an_inherited_conflict_is_refused_where_it_would_arise(sub: Substrate) -> None:
    sub.set_policy("team/a", auto_atomise_mode="deferred", auto_atomise_threshold_cl100k=300)
    # Raising the root's budget would leave team/a with a threshold below its atoms.
    with pytest.raises(PolicyConflict) as caught:
        sub.set_policy("", auto_atomise_max_atom_tokens=400)
    assert caught.value.details["namespace"] == "team/a"
    # Off, a low threshold harms nothing; turning atomisation on is what is checked.
    sub.set_policy("quiet", auto_atomise_threshold_cl100k=60)
    with pytest.raises(PolicyConflict):
        sub.set_policy("quiet/sub", auto_atomise_mode="deferred")
    # Clearing a policy can expose an inherited conflict too.
    sub.set_policy(
        "x", auto_atomise_mode="deferred", auto_atomise_threshold_cl100k=100, auto_atomise_max_atom_tokens=60
    )
    with pytest.raises(PolicyConflict):
        sub.set_policy("x", unset=["auto_atomise_max_atom_tokens"])


def test_no_deferred_store_fails_as_too_small_under_an_accepted_policy(sub: Substrate) -> None:
    sub.set_policy("team", auto_atomise_mode="deferred", auto_atomise_threshold_cl100k=201)
    for n in (201, 260, 400):
        text = " ".join(f"Fact {i} about the ledger." for i in range(n))
        while count_tokens(text) > n:
            text = text.rsplit(" ", 1)[0]
        sub.store(text + ".", namespace="team")
    done = sub.drain_atomisations()
    assert [d["outcome"] for d in done if d["outcome"] != "atomised"] == []
    assert sub.stats()["atomisation"]["failed"] == 0


def test_the_cli_refuses_a_conflicting_policy_with_exit_65(cli: Cli, home: Path) -> None:
    code, out = cli.json(
        home, "policy", "set", "team", "--auto-atomise-mode", "deferred", "--threshold", "100"
    )
    assert code == 65 and out["error"] == "policy_conflict"
