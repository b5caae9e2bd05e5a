"""Helpers shared by the projection and recall tests: homes, a clock, snapshots of what is stored."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import duckdb

from mnemolog.eventlog.store.writer import Clock
from mnemolog.projections import schema
from mnemolog.substrate.api import Substrate
from mnemolog.substrate.home import CONFIG_NAME, Home, init_home


class FakeClock:
    """Microseconds that advance by one millisecond per reading: deterministic timestamps."""

    def __init__(self, start: int = 1_700_000_000_000_000) -> None:
        self.now = start

    def __call__(self) -> int:
        self.now += 1000
        return self.now


def new_home(path: Path, *, timed_checkpoints: bool = False, clock: Clock | None = None) -> Home:
    """A fresh home. Unless `timed_checkpoints`, its writers never sign a checkpoint because
    wall-clock time passed (`log.checkpoint_max_s` at its largest), only by count and at
    close, so a test that compares the log before and after a call cannot see the periodic
    checkpointer fire in between on a slow machine (tests/eventlog covers the timer).

    `clock` stamps the home's first entries. A log's timestamps never go back, so a later
    writer's fake clock that runs behind the wall clock would stamp every entry with the
    day the home was made: a test whose outputs hold dates gives it a fake clock here too."""
    init_home(path, key_name="test", **({"clock": clock} if clock is not None else {}))
    if not timed_checkpoints:
        config = path / CONFIG_NAME
        text = config.read_text()
        assert "\ncheckpoint_max_s = 5\n" in text, "the config template changed"
        config.write_text(text.replace("\ncheckpoint_max_s = 5\n", "\ncheckpoint_max_s = 86400\n"))
    return Home(path)


def open_sub(home: Home | Path, **kw: Any) -> Substrate:
    kw.setdefault("long_lived", False)
    return Substrate.open(home if isinstance(home, Home) else Home(home), **kw)


def log_digest(home: Home | Path) -> tuple[int, str]:
    """Total size and SHA-256 of every file under the home's log directory (index included).

    Lock files aside: opening a writer creates them, and they hold no data.
    """
    root = (home.log_dir if isinstance(home, Home) else Path(home) / "log").resolve()
    h = hashlib.sha256()
    total = 0
    for p in sorted(root.rglob("*")):
        if p.is_file() and p.name not in (".lock", ".lock.wait", ".checkpoint.lock"):
            data = p.read_bytes()
            total += len(data)
            h.update(str(p.relative_to(root)).encode() + b"\0" + data)
    return total, h.hexdigest()


def segments_size(home: Home | Path) -> int:
    root = home.log_dir if isinstance(home, Home) else Path(home) / "log"
    return sum(p.stat().st_size for p in root.glob("*.seg"))


def table_rows(conn: duckdb.DuckDBPyConnection) -> dict[str, list[tuple[Any, ...]]]:
    """Every projection table's rows, sorted, for row-identical comparisons."""
    out: dict[str, list[tuple[Any, ...]]] = {}
    for t in schema.TABLES:
        rows = conn.execute(f"SELECT * FROM {t}").fetchall()
        out[t] = sorted(rows, key=repr)
    return out


def logical_rows(conn: duckdb.DuckDBPyConnection) -> dict[str, list[tuple[Any, ...]]]:
    """Like table_rows, but blind to how the index is split between main and delta (compaction)."""
    out = table_rows(conn)
    out["postings"] = sorted(out.pop("postings") + out.pop("postings_delta"), key=repr)
    out["proj_state"] = [r[:6] for r in out["proj_state"]]  # without main_rows, delta_rows
    return out


def snapshot(sub: Substrate) -> dict[str, list[tuple[Any, ...]]]:
    with sub.projections.session() as conn:
        return table_rows(conn)


def guard_hidden_ids(conn: duckdb.DuckDBPyConnection) -> set[str]:
    """The ids the archive guard hides, evaluated directly over memories."""
    return {
        r[0] for r in conn.execute(f"SELECT m.id FROM memories m WHERE NOT {schema.visible('m')}").fetchall()
    }


def check_invariants(conn: duckdb.DuckDBPyConnection) -> None:
    """What the fold maintains besides rows: the hidden set, BM25's statistics, the index parts."""
    hidden = {r[0]: r[1] for r in conn.execute("SELECT id, doc FROM hidden").fetchall()}
    assert set(hidden) == guard_hidden_ids(conn)
    for mid, doc in hidden.items():
        assert conn.execute("SELECT stored_seq FROM memories WHERE id = ?", [mid]).fetchone() == (doc,)
    # `inactive` is exactly the memories whose status is not active, by their stored_seq.
    inactive = sorted(conn.execute("SELECT id, doc FROM inactive").fetchall())
    assert inactive == sorted(
        conn.execute("SELECT id, stored_seq FROM memories WHERE status <> 'active'").fetchall()
    )
    st = conn.execute("SELECT docs, total_len, main_rows, delta_rows FROM proj_state").fetchone()
    assert st is not None
    docs, total_len, main_rows, delta_rows = st
    n, tl = conn.execute("SELECT count(*), coalesce(sum(doc_len), 0) FROM memories").fetchone() or (0, 0)
    assert (docs, total_len) == (n, tl)
    assert main_rows == (conn.execute("SELECT count(*) FROM postings").fetchone() or (0,))[0]
    assert delta_rows == (conn.execute("SELECT count(*) FROM postings_delta").fetchone() or (0,))[0]
    # The postings are exactly the memories' current terms, with their lengths.
    index = conn.execute(
        "SELECT term, doc, tf, dl FROM (SELECT * FROM postings UNION ALL SELECT * FROM postings_delta) "
        "ORDER BY ALL"
    ).fetchall()
    expected = conn.execute(
        """SELECT term, stored_seq, count(*)::INTEGER, any_value(doc_len)
           FROM (SELECT stored_seq, doc_len,
                        unnest(ml_doc_terms(title, tags, content, coalesce(occurred_at, created_at))) AS term
                 FROM memories)
           GROUP BY term, stored_seq ORDER BY ALL"""
    ).fetchall()
    assert index == expected
    lens = conn.execute(
        "SELECT doc_len, len(ml_doc_terms(title, tags, content, coalesce(occurred_at, created_at))) "
        "FROM memories"
    ).fetchall()
    assert all(a == b for a, b in lens)
    # Every memory is found through its primary key (the index a killed process must not lose).
    ids = [r[0] for r in conn.execute("SELECT id FROM memories").fetchall()]
    assert all(conn.execute("SELECT 1 FROM memories WHERE id = ?", [i]).fetchone() for i in ids)
