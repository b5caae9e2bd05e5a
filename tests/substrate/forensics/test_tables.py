"""An auditor's SQL: a v3 bundle's tables answer "every change to memory X" with DuckDB alone."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest

from mnemolog.eventlog.bundle import memview, parquet
from mnemolog.eventlog.bundle import verifier as bundle
from mnemolog.eventlog.bundle.build import resign_manifest
from mnemolog.eventlog.bundle.format import (
    DATAKEYS,
    ENVELOPES,
    FORMAT_V2,
    FORMAT_V4,
    HEADS,
    KEYS,
    MANIFEST,
    MEMORIES,
    PARQUET,
    TOUCHES,
    VERIFY_MD,
    entries_parquet,
    verify_md,
)
from mnemolog.eventlog.bundle.offline import parse_entries
from mnemolog.eventlog.errors import VerificationError
from mnemolog.eventlog.format import codec
from mnemolog.eventlog.format.keys import load_private_key
from mnemolog.eventlog.verify.trust import TRUST_GENESIS
from mnemolog.projections.memory import queries
from mnemolog.substrate.api import Substrate
from mnemolog.substrate.forensics import service as forensics
from mnemolog.substrate.home import Home
from tests.support.forensic_data import Atomised, atomised_home, members_of


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Atomised:
    a = atomised_home(tmp_path_factory.mktemp("tables") / "home")
    with Substrate.open(a.home, long_lived=False) as sub:
        sub.update(a.parent, title="Post-mortem, revised", tags=["incident", "db"])
        sub.link(a.parent, a.other, "related_to")
    return a


@pytest.fixture(scope="module")
def members(world: Atomised) -> dict[str, bytes]:
    with Substrate.open(world.home, long_lived=False) as sub:
        return members_of(forensics.export_bundle(sub, world.parent, True).data)


@pytest.fixture
def tables(members: dict[str, bytes], tmp_path: Path) -> Iterator[duckdb.DuckDBPyConnection]:
    for name in (PARQUET, TOUCHES):
        (tmp_path / name).write_bytes(members[name])
    conn = duckdb.connect()
    conn.execute(f"SET file_search_path = '{tmp_path}'")
    yield conn
    conn.close()


def test_every_change_to_a_memory_is_one_join(
    world: Atomised, members: dict[str, bytes], tables: duckdb.DuckDBPyConnection
) -> None:
    rows = tables.execute(
        "SELECT e.seq, e.type FROM 'entries.parquet' e JOIN 'touches.parquet' t USING (seq) "
        "WHERE t.memory_id = ? ORDER BY e.seq",
        [world.parent],
    ).fetchall()
    with Substrate.open(world.home, long_lived=False) as sub, sub.projections.session() as conn:
        want = sorted(queries.touching_seqs(conn, {world.parent}, 1 << 62))
    assert [s for s, _ in rows] == want  # the projection's own record of what touched it
    types = [t for _, t in rows]
    assert types[0] == "memory.stored" and "memory.updated" in types and "link.created" in types


def test_payloads_are_typed_columns_and_hashes_are_blobs(
    world: Atomised, tables: duckdb.DuckDBPyConnection
) -> None:
    kinds = dict(
        tables.execute("SELECT column_name, column_type FROM (DESCRIBE 'entries.parquet')").fetchall()
    )
    for name in ("kid", "prev", "leaf_hash", "sig", "entry"):
        assert kinds[name] == "BLOB"
    assert kinds["ts"] == "TIMESTAMP" and kinds["seq"] == "BIGINT"
    assert kinds["p_sealed"] == "VARCHAR" and kinds["p_id"] == "VARCHAR"
    assert "p_content" not in kinds and "p_title" not in kinds  # content is sealed (format.md §17)
    assert kinds["p_confidence"] in ("DOUBLE", "VARCHAR")  # DOUBLE unless some payload holds another kind
    boxes = tables.execute(
        "SELECT p_sealed FROM 'entries.parquet' WHERE type = 'memory.updated' AND p_id = ? "
        "AND p_sealed IS NOT NULL",
        [world.parent],
    ).fetchall()
    assert any('"fields":["tags","title"]' in b[0] for b in boxes)  # maps are compact JSON
    # A field an entry does not have is NULL, not an empty string.
    assert tables.execute(
        "SELECT count(*) FROM 'entries.parquet' WHERE type = 'log.created' AND p_sealed IS NOT NULL"
    ).fetchone() == (0,)


def test_the_heads_entry_is_a_row(members: dict[str, bytes], tables: duckdb.DuckDBPyConnection) -> None:
    heads = parse_entries(codec.decode(members[HEADS])["entry"], HEADS)[0]
    row = tables.execute(
        "SELECT type, leaf_hash, entry FROM 'entries.parquet' WHERE seq = ?", [heads.seq]
    ).fetchone()
    assert row == ("heads.committed", heads.leaf, heads.raw)
    man = codec.decode(members[MANIFEST])
    assert heads.seq not in man["seqs"]  # a row of the table, not a selected entry
    assert man["format"] == FORMAT_V4


def test_a_forged_touches_table_is_refused_even_re_signed(world: Atomised, members: dict[str, bytes]) -> None:
    key = load_private_key(world.home.signing_key_path)
    empty = parquet.write_table((parquet.Column("memory_id", "string"), parquet.Column("seq", "int64")), [])
    with pytest.raises(VerificationError) as info:
        bundle.verify_members(resign_manifest({**members, TOUCHES: empty}, key), policy=TRUST_GENESIS)
    assert info.value.check == "view.touches"
    missing = {k: v for k, v in members.items() if k != TOUCHES}
    with pytest.raises(VerificationError) as info:
        bundle.verify_members(resign_manifest(missing, key), policy=TRUST_GENESIS)
    assert info.value.check == "manifest.files" and "touches.parquet" in info.value.message


def test_a_cut_key_file_is_refused_even_re_signed(world: Atomised, members: dict[str, bytes]) -> None:
    """A bundle's datakeys.cbor is written in one piece: a cut is damage, whichever keys it drops
    (the cut a home's own key file forgives as a crash mid-append)."""
    key = load_private_key(world.home.signing_key_path)
    raw = members[DATAKEYS]
    for cut in (raw[:-1], raw[: len(raw) // 2]):
        with pytest.raises(VerificationError) as info:
            bundle.verify_members(resign_manifest({**members, DATAKEYS: cut}, key), policy=TRUST_GENESIS)
        assert info.value.check == "datakeys.decode" and "cut short" in info.value.message


def test_a_v2_bundle_still_verifies(world: Atomised, members: dict[str, bytes]) -> None:
    """What the exporter wrote before v3 (v1 tables, no touches.parquet) is read as it was."""
    key = load_private_key(world.home.signing_key_path)
    man = codec.decode(members[MANIFEST])
    everything = sorted(
        [*parse_entries(members[KEYS], KEYS), *parse_entries(members["entries.cbor"], "entries.cbor")],
        key=lambda e: e.seq,
    )
    old = {k: v for k, v in members.items() if k not in (TOUCHES, DATAKEYS)}
    old[PARQUET] = entries_parquet(everything)
    # Before v4 a bundle carried no keys: its views are the sealed ones.
    views = memview.fold_views(everything, man["memories"])
    old[MEMORIES] = memview.render_views(views)
    old[ENVELOPES] = memview.render_envelopes(views)
    old[VERIFY_MD] = verify_md(
        man["memory_id"], man["include_chain"], man["origin"], man["tree_size"], len(everything), FORMAT_V2
    )
    report = bundle.verify_members(resign_manifest(old, key, format=FORMAT_V2), policy=TRUST_GENESIS)
    assert report.completeness is not None and "parquet" in report.checks
    # ...and a v2 manifest over v3 tables is refused: the format decides what the tables must be.
    with pytest.raises(VerificationError):
        bundle.verify_members(resign_manifest(dict(members), key, format=FORMAT_V2), policy=TRUST_GENESIS)


def test_the_standalone_cli_names_the_new_format(world: Atomised, tmp_path: Path) -> None:
    home = Home(tmp_path / "home")
    shutil.copytree(world.home.root, home.root)
    out = tmp_path / "b.tar"
    with Substrate.open(home, long_lived=False) as sub:
        out.write_bytes(forensics.export_bundle(sub, world.parent, False).data)
    report = bundle.verify_bundle(out, policy=TRUST_GENESIS)
    assert report.checks[-1] == "parquet" and report.memory_id == world.parent
