"""Story: a long post-mortem is atomised and recalled, and its lineage ships in a bundle.

An operator stores a post-mortem; it is split into atoms (each a memory with
`atom_of` and a signed `derives_from` edge), the parent is archived, and a
pointed question recalls an atom in its place. The same home is then read
through every door (Python API, CLI, MCP, HTTP): each gives the same ranked
ids, the same atom lineage, and bundles that verify offline and prove the
same entries.
"""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

from mnemolog.cli.demo import POST_MORTEM
from mnemolog.eventlog.bundle.verifier import verify_bundle
from mnemolog.eventlog.verify.trust import TRUST_GENESIS

from .doors import Doors, ids

QUESTION = "why did workers time out"


def outgoing(links: object) -> set[tuple[str, str]]:
    """Edges out of a memory: the Python API's full view ({"outgoing": [...]}), or the
    compact one the CLI, MCP and HTTP print ([{"to": ..., "relation": ...}])."""
    if isinstance(links, dict):
        return {(e["dst"], e["relation"]) for e in links["outgoing"]}
    assert isinstance(links, list)
    return {(e["to"], e["relation"]) for e in links if "to" in e}


def entries_of(tar_bytes: bytes) -> set[str]:
    with tarfile.open(fileobj=io.BytesIO(tar_bytes)) as t:
        return {m.name.rsplit("/", 1)[-1] for m in t.getmembers() if "/entries/" in m.name}


def test_post_mortem_atomised_recalled_and_bundled_through_every_door(doors: Doors, tmp_path: Path) -> None:
    d = doors
    # Written through three doors: stored by the CLI, atomised over MCP, another note over HTTP.
    parent = d.cli("store", "-", "--title", "Checkout outage post-mortem", "-n", "ops", stdin=POST_MORTEM)
    pid = parent["memory"]["id"]
    done = d.mcp("memory_atomise", id=pid, curator="rules", max_atom_tokens=60)
    atoms = done["atom_ids"]
    assert 2 <= len(atoms) <= 10 and done["source_id"] == pid
    d.post("/memory", {"content": "Checkout runbooks live in the ops wiki.", "namespace": "ops"}, 201)
    before = d.sub.log.size
    again = d.post(f"/memory/{pid}/atomise", {"curator": "rules"})
    # Already atomised: an informational answer naming the same atoms; nothing written.
    assert again["already_atomised"] is True and again["atom_ids"] == atoms
    assert d.sub.log.size == before

    # Recall: one ranking, whatever the door; an atom first, the archived parent hidden.
    by_api = ids(d.sub.recall(QUESTION, limit=5))
    by_cli = ids(d.cli("recall", QUESTION, "--limit", "5")["results"])
    by_mcp = ids(d.mcp("memory_recall", query=QUESTION, limit=5)["results"])
    by_http = ids(d.post("/recall", {"query": QUESTION, "limit": 5})["results"])
    assert by_api == by_cli == by_mcp == by_http
    assert by_api[0] in atoms and pid not in by_api
    with_parent = ids(d.cli("recall", "checkout outage", "--include-archived", "--limit", "20")["results"])
    assert pid in with_parent

    # Lineage: an atom points at its parent and carries the signed edge, on every door.
    atom = by_api[0]
    views = [
        d.sub.get(atom),
        d.cli("get", atom)["memory"],
        d.mcp("memory_get", id=atom)["memory"],
        d.get(f"/memory/{atom}")["memory"],
    ]
    for v in views:
        assert v["atom_of"] == pid
        assert (pid, "derives_from") in outgoing(v["links"]), v
    assert d.sub.get(pid)["atomised_into"] == len(atoms)

    # Bundles: the CLI's file and the HTTP API's tar verify offline and prove the same entries.
    out = tmp_path / "atom.tar"
    d.cli("export-forensic-bundle", "--memory-id", atom, "-o", str(out))
    http_tar = d.http.post("/bundles", json={"memory_id": atom})
    assert http_tar.status_code == 200
    served = tmp_path / "served.tar"
    served.write_bytes(http_tar.content)
    for path in (out, served):
        report = verify_bundle(path, policy=TRUST_GENESIS)
        assert report.ok if hasattr(report, "ok") else report
    assert entries_of(out.read_bytes()) == entries_of(http_tar.content)
    assert d.cli("verify-bundle", str(served))["ok"] is True
