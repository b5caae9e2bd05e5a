"""Property: `log verify` with the home's anchor and high-water mark never passes a log that lost
an acknowledged entry, whatever mix of truncations, rollbacks, checkpoint deletions and swaps an
attacker with write access to `log/` applies."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mnemolog.eventlog.errors import VerificationError
from mnemolog.eventlog.store.log import Log
from mnemolog.eventlog.store.segments import list_segments
from mnemolog.eventlog.store.writer import Durability
from mnemolog.eventlog.verify.verifier import verify_log
from mnemolog.substrate.home import Home, init_home

attack = st.one_of(
    st.tuples(st.just("truncate"), st.floats(0.0, 0.999)),
    st.tuples(st.just("drop_last_segment"), st.booleans()),
    st.tuples(st.just("delete_checkpoints"), st.lists(st.floats(0.0, 0.999), max_size=4)),
    st.tuples(st.just("delete_all_checkpoints"), st.none()),
    st.tuples(st.just("restore_snapshot"), st.none()),
    st.tuples(st.just("swap_checkpoints"), st.tuples(st.floats(0, 0.999), st.floats(0, 0.999))),
    st.tuples(st.just("delete_index"), st.none()),
)


def _entries(log_dir: Path) -> list[bytes]:
    """The leaf hashes of the complete entries on disk, in order, read from the segments."""
    try:
        with Log(log_dir) as log:
            log._trust_index = False
            log.refresh()
            return [e.leaf for e in log.iter_entries()]
    except Exception:
        return []


def _apply(home: Home, snapshot: Path, name: str, arg: object) -> None:
    log_dir = home.log_dir
    cps = sorted((log_dir / "checkpoints").iterdir())
    if name == "truncate":
        with Log(log_dir) as log:
            keep = max(1, int(float(arg) * log.size))  # type: ignore[arg-type]
            loc = log.location(keep - 1)
        seg = log_dir / f"{loc.segment:020d}.seg"
        with open(seg, "r+b") as f:
            f.truncate(loc.offset + loc.length)
        for first, path in list_segments(log_dir):
            if first > keep - 1 and path != seg:
                path.unlink()
    elif name == "drop_last_segment":
        segs = list_segments(log_dir)
        if len(segs) > 1:
            first, path = segs[-1]
            path.unlink()
            if arg:  # and its checkpoints
                for p in cps:
                    if int(p.name) > first:
                        p.unlink()
    elif name == "delete_checkpoints" and cps:
        for f in arg:  # type: ignore[attr-defined]
            cps[int(f * len(cps))].unlink(missing_ok=True)
    elif name == "delete_all_checkpoints":
        for p in cps:
            p.unlink()
    elif name == "restore_snapshot":
        shutil.rmtree(log_dir)
        shutil.copytree(snapshot, log_dir)
    elif name == "swap_checkpoints" and len(cps) > 1:
        a, b = (cps[int(f * len(cps))] for f in arg)  # type: ignore[attr-defined]
        da, db = a.read_bytes(), b.read_bytes()
        a.write_bytes(db)
        b.write_bytes(da)
    elif name == "delete_index":
        shutil.rmtree(log_dir / "index", ignore_errors=True)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    n=st.integers(1, 30),
    checkpoints=st.sets(st.integers(1, 30), max_size=5),
    snapshot_at=st.integers(0, 30),
    segment_bytes=st.sampled_from([4096, 1 << 20]),
    attacks=st.lists(attack, min_size=1, max_size=3),
)
def test_verify_never_passes_a_log_that_lost_an_acknowledged_entry(
    tmp_path_factory: pytest.TempPathFactory,
    n: int,
    checkpoints: set[int],
    snapshot_at: int,
    segment_bytes: int,
    attacks: list[tuple[str, object]],
) -> None:
    root = tmp_path_factory.mktemp("hw") / "home"
    init_home(root, key_name="prop")
    home = Home(root)
    cfg = home.config_path
    cfg.write_text(cfg.read_text().replace("segment_bytes = 67108864", f"segment_bytes = {segment_bytes}"))
    snapshot = root.parent / "snapshot"
    shutil.copytree(home.log_dir, snapshot)
    with home.open_writer(durability=Durability("group"), periodic_checkpoints=False) as w:
        for i in range(n):
            w.append("note.added", {"i": i, "pad": "p" * 300})
            if i + 1 in checkpoints:
                w.checkpoint()
            if i + 1 == snapshot_at:
                w.checkpoint()
                shutil.rmtree(snapshot)
                shutil.copytree(home.log_dir, snapshot)
    acked = _entries(home.log_dir)
    assert len(acked) == n + 1
    verify_log(home.log_dir, policy=home.trust_anchor(), high_water=home.high_water_marks())
    for name, arg in attacks:
        _apply(home, snapshot, name, arg)
    now = _entries(home.log_dir)
    lost = now[: len(acked)] != acked
    if lost:
        with pytest.raises(VerificationError):
            verify_log(home.log_dir, policy=home.trust_anchor(), high_water=home.high_water_marks())
