"""What a `forget` erases: the selection and its cascade, read from the projection.

`select` resolves a selector (ids, namespace, project, document,
interaction, a time) to the memories, interactions and documents whose
content goes, following what derives from them: atoms of an erased memory
(to any depth), the interaction a candidate was extracted from (its
extraction holds the candidate's text), the candidates of an erased
interaction, the packs that quoted any of it, and the text hashes of their
vectors (the embedding cache's keys). Nothing here writes.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import duckdb

from mnemolog.projections.fold import id_set

__all__ = ["Selection", "erased", "erased_keys", "namespace_ages", "older_than", "sealing_seqs", "select"]


@dataclass
class Selection:
    """Everything one forget erases (ids sorted)."""

    memories: list[str] = field(default_factory=list)
    atoms: list[str] = field(default_factory=list)  # among memories: reached through atom_of
    candidates: list[str] = field(default_factory=list)  # among memories: extracted candidates
    interactions: list[str] = field(default_factory=list)
    documents: list[str] = field(default_factory=list)
    packs: list[str] = field(default_factory=list)
    links: int = 0
    chunks: int = 0
    vectors: int = 0
    shas: list[bytes] = field(default_factory=list)  # embedding cache keys of the erased texts

    @property
    def subjects(self) -> list[str]:
        """Every data key the erasure destroys.

        Not the packs': a pack seals each quoted entry under its own subject's
        key, so the packs in `packs` lose exactly the erased entries (they
        re-render them as gaps) and keep the rest, their query included.
        """
        return sorted({*self.memories, *self.interactions, *self.documents})

    def empty(self) -> bool:
        return not (self.memories or self.interactions or self.documents)

    def to_json(self) -> dict[str, Any]:
        return {
            "memories": self.memories,
            "atoms": self.atoms,
            "candidates": self.candidates,
            "interactions": self.interactions,
            "documents": self.documents,
            "packs": self.packs,
            "links": self.links,
            "chunks": self.chunks,
            "vectors": self.vectors,
            "embedding_cache": len(self.shas),
        }


def _col(conn: duckdb.DuckDBPyConnection, sql: str, args: list[Any] | None = None) -> list[Any]:
    return [r[0] for r in conn.execute(sql, args).fetchall()]


def _col_in(
    conn: duckdb.DuckDBPyConnection, sql: str, ids: Iterable[str] | Iterable[int], *, ints: bool = False
) -> list[Any]:
    """`sql` with `{ids}` standing for the set `ids`: one statement over the whole set."""
    with id_set(conn, "ml_selected", ids, ints=ints) as rel:
        return _col(conn, sql.format(ids=rel))


def _has(conn: duckdb.DuckDBPyConnection, table: str) -> bool:
    return conn.execute("SELECT 1 FROM duckdb_tables() WHERE table_name = ?", [table]).fetchone() is not None


def select(
    conn: duckdb.DuckDBPyConnection,
    *,
    ids: list[str] | None = None,
    namespace: str | None = None,
    project: str | None = None,
    document: str | None = None,
    interaction: str | None = None,
    before_us: int | None = None,
) -> Selection:
    """The selection of the given selectors (all that are given must hold), with its cascade."""
    with id_set(conn, "ml_selected_ids", ids or []) as given:
        return _select(
            conn, given if ids is not None else None, namespace, project, document, interaction, before_us
        )


def _select(
    conn: duckdb.DuckDBPyConnection,
    given: str | None,
    namespace: str | None,
    project: str | None,
    document: str | None,
    interaction: str | None,
    before_us: int | None,
) -> Selection:
    conds: list[str] = []
    args: list[Any] = []
    iconds: list[str] = []
    iargs: list[Any] = []
    if given is not None:
        conds.append(f"id IN {given}")
    if namespace is not None:
        for c, a in ((conds, args), (iconds, iargs)):
            c.append("(namespace = ? OR starts_with(namespace, ?))")
            a += [namespace, namespace.rstrip("/") + "/"]
    if project is not None:
        conds.append("project = ?")
        args.append(project)
        iconds.append("project = ?")
        iargs.append(project)
    if before_us is not None:
        conds.append("created_at < ?")
        args.append(before_us)
        iconds.append("captured_at < ?")
        iargs.append(before_us)
    base: set[str] = set()
    inter: set[str] = set()
    docs: set[str] = set()
    if interaction is not None:
        inter.add(interaction)
    if document is not None:
        docs.update(
            _col(
                conn,
                "SELECT DISTINCT document_id FROM ctx_document_versions WHERE document_id = ?",
                [document],
            )
        )
    if conds:
        base.update(_col(conn, f"SELECT id FROM memories WHERE {' AND '.join(conds)}", args))
    if iconds and given is None:
        inter.update(_col(conn, f"SELECT id FROM interactions WHERE {' AND '.join(iconds)}", iargs))
    inter = (
        set(_col_in(conn, "SELECT id FROM interactions WHERE id IN {ids}", sorted(inter))) if inter else set()
    )
    # The candidates of an erased interaction go with it.
    cands = set(_col_in(conn, "SELECT id FROM candidates WHERE interaction_id IN {ids}", sorted(inter)))
    mems = base | cands
    # Atoms of erased memories, to any depth (a cycle cannot grow the set for ever).
    frontier = set(mems)
    atoms: set[str] = set()
    while frontier:
        found = set(_col_in(conn, "SELECT id FROM memories WHERE atom_of IN {ids}", sorted(frontier)))
        frontier = found - mems
        atoms |= frontier
        mems |= frontier
    ml = sorted(mems)
    dl = sorted(docs)
    with id_set(conn, "ml_selected_memories", ml) as mset, id_set(conn, "ml_selected_documents", dl) as dset:
        # A candidate's text is also in its interaction's extraction, sealed under that interaction's key.
        cand_rows = _col(conn, f"SELECT id FROM candidates WHERE id IN {mset}")
        inter |= set(_col(conn, f"SELECT interaction_id FROM candidates WHERE id IN {mset}"))
        sel = Selection(
            memories=ml,
            atoms=sorted(atoms),
            candidates=sorted(cand_rows),
            interactions=sorted(inter),
            documents=dl,
        )
        sel.links = int(
            conn.execute(f"SELECT count(*) FROM links WHERE src IN {mset} OR dst IN {mset}").fetchone()[0]  # type: ignore[index]
        )
        sel.chunks = int(
            conn.execute(f"SELECT count(*) FROM ctx_chunks WHERE document_id IN {dset}").fetchone()[0]  # type: ignore[index]
        )
        sel.packs = sorted(
            _col(
                conn,
                f"SELECT DISTINCT pack_id FROM ctx_pack_members WHERE (source = 'memory' AND id IN {mset}) "
                f"OR (source = 'chunk' AND regexp_replace(id, '/[0-9]+/[0-9]+$', '') IN {dset})",
            )
        )
        shas: set[bytes] = set()
        if _has(conn, "vectors"):
            for sql in (
                f"SELECT sha FROM vectors WHERE doc IN (SELECT stored_seq FROM memories WHERE id IN {mset})",
                "SELECT sha FROM chunk_vectors WHERE doc IN "
                f"(SELECT doc FROM ctx_chunks WHERE document_id IN {dset})",
            ):
                got = _col(conn, sql)
                sel.vectors += len(got)
                shas |= {bytes(x) for x in got}
    sel.shas = sorted(shas)
    return sel


def namespace_ages(conn: duckdb.DuckDBPyConnection) -> dict[str, int]:
    """Every namespace that has memories, with its oldest memory's created_at."""
    rows = conn.execute("SELECT namespace, min(created_at) FROM memories GROUP BY namespace").fetchall()
    return {str(r[0]): int(r[1]) for r in rows}


def older_than(conn: duckdb.DuckDBPyConnection, namespace: str, cutoff_us: int) -> list[str]:
    """The memories of exactly this namespace created before the cutoff."""
    return sorted(
        str(x)
        for x in _col(
            conn, "SELECT id FROM memories WHERE namespace = ? AND created_at < ?", [namespace, cutoff_us]
        )
    )


def erased_keys(conn: duckdb.DuckDBPyConnection) -> list[str]:
    """The ids of every data key an erasure named (each must be gone)."""
    return [str(x) for x in _col(conn, "SELECT DISTINCT subject FROM erasures WHERE kind = 'key'", [])]


def sealing_seqs(conn: duckdb.DuckDBPyConnection, sel: Selection) -> list[int]:
    """The seqs of every entry that may hold a selected subject's sealed content."""
    seqs = set(
        _col_in(
            conn,
            "SELECT DISTINCT seq FROM touches WHERE memory_id IN {ids}",
            sorted({*sel.memories, *sel.interactions}),
        )
    )
    with id_set(conn, "ml_selected_documents", sorted(sel.documents)) as dset:
        seqs |= set(_col(conn, f"SELECT seq FROM ctx_document_versions WHERE document_id IN {dset}"))
        # The packs that quoted a chunk of an erased document sealed it under that document's key.
        seqs |= set(
            _col(
                conn,
                "SELECT DISTINCT seq FROM ctx_pack_members WHERE source = 'chunk' "
                f"AND regexp_replace(id, '/[0-9]+/[0-9]+$', '') IN {dset}",
            )
        )
    return sorted(int(x) for x in seqs)


def erased(conn: duckdb.DuckDBPyConnection, subjects: list[str]) -> dict[str, tuple[int, str | None]]:
    """The subjects among these that were erased: subject -> (seq of the erasure, reason)."""
    with id_set(conn, "ml_selected", subjects) as ids:
        rows = conn.execute(f"SELECT subject, seq, reason FROM erasures WHERE subject IN {ids}").fetchall()
    return {str(r[0]): (int(r[1]), r[2]) for r in rows}
