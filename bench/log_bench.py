"""Benchmark of the event log: append, verify, overhead, each beside the bound that limits it.

    python -m bench.log_bench [--entries N] [--verify-entries M] [--fsync-entries F] [--dir D]
    python -m bench.log_bench --verify-rounds R [--entries N]     (log verify only, interleaved)

Every figure is measured in this one run and reported as a rate and as a
ratio to its bound, measured in the same run, so a noisy machine moves both
sides together:

  append, group commit   producer submitting as fast as it can  vs  a sign-only loop
  periodic checkpoints   the same, publishing checkpoints (default policy) and a
                         high-water mark                        vs  the same run without (alternated)
  append, fsync/append   one append at a time                    vs  a raw write+fdatasync loop
  verify, full           1 and 2 processes                       vs  a single-core verify-only loop
  verify, interleaved    R rounds of: the bare loop over the log's own signatures, 1 process,
                         2 processes (the order rotating), medians of the per-round ratios
  verify, hashes only    1 pass of SHA-256 against checkpoints   vs  a raw SHA-256 loop
  overhead               (segment + index bytes - payload bytes) / entries

Prints one JSON object on stdout (progress on stderr).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import nacl.bindings

from mnemolog.eventlog.format.entry import encode_payload, make_entry
from mnemolog.eventlog.format.keys import SigningKey
from mnemolog.eventlog.store.checkpoints import CheckpointPolicy
from mnemolog.eventlog.store.log import Log
from mnemolog.eventlog.store.segments import list_segments
from mnemolog.eventlog.store.writer import Durability, LogWriter
from mnemolog.eventlog.verify.trust import TRUST_GENESIS, KeySchedule
from mnemolog.eventlog.verify.verifier import verify_log

TYPE = "memory.stored"
TARGETS = {
    "group_commit_vs_sign_only": 0.5,
    "fsync_append_vs_raw_fsync": 0.8,
    "verify_1proc_vs_verify_only": 0.85,  # issue 21 target 5
    "verify_2proc_vs_verify_only": 1.6,  # issue 21 target 5
    "hashes_only_entries_per_s": 200_000,
    "overhead_bytes_per_entry": 160,
    "periodic_checkpoints_vs_none": 0.9,
}


def payload(i: int) -> dict[str, Any]:
    """A memory.stored-like payload of realistic size (~180 bytes of CBOR)."""
    return {
        "id": f"m-{i:016d}",
        "ns": "agent/default",
        "text": f"observation {i}: " + "the user prefers concise answers with sources cited " * 2,
        "tags": ["preference", "style"],
    }


def say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def timed(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def rate(n: int, seconds: float) -> float:
    return round(n / seconds, 1) if seconds > 0 else 0.0


def sample_entry(key: SigningKey) -> tuple[bytes, bytes, bytes]:
    """(to-be-signed bytes, signature, entry bytes) of a typical entry."""
    e = make_entry(
        seq=123_456,
        ts=time.time_ns() // 1000,
        type_=TYPE,
        tv=1,
        data=payload(123_456),
        prev=bytes(32),
        signer=key,
    )
    return e.tbs(), e.sig, e.raw


# -- bounds ---------------------------------------------------------------------


def sign_only(key: SigningKey, n: int) -> float:
    tbs, _, _ = sample_entry(key)
    sign = key.sign
    return rate(n, timed(lambda: [sign(tbs) for _ in range(n)]))


def verify_only(key: SigningKey, n: int) -> float:
    tbs, sig, _ = sample_entry(key)
    pk = key.public_key
    opn = nacl.bindings.crypto_sign_open

    def loop() -> None:
        for _ in range(n):
            opn(sig + tbs, pk)

    return rate(n, timed(loop))


def sha_only(key: SigningKey, n: int) -> float:
    _, _, raw = sample_entry(key)
    sha = hashlib.sha256

    def loop() -> None:
        for _ in range(n):
            sha(b"\x00" + raw).digest()

    return rate(n, timed(loop))


def raw_fsync(path: Path, record_len: int, n: int) -> float:
    rec = os.urandom(record_len)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:

        def loop() -> None:
            for _ in range(n):
                os.write(fd, rec)
                os.fdatasync(fd)

        return rate(n, timed(loop))
    finally:
        os.close(fd)
        path.unlink()


# -- the log ----------------------------------------------------------------------


def new_log(root: Path, name: str, key: SigningKey) -> Path:
    d = root / name
    LogWriter.create(d, key)
    return d


def append_group(
    d: Path, key: SigningKey, n: int, start: int = 0, policy: CheckpointPolicy | None = None
) -> float:
    hw = [d.parent / f"{d.name}.high-water"] if policy is not None else []
    w = LogWriter(d, [key], durability=Durability("group"), checkpoint_policy=policy, high_water=hw)
    try:
        payloads = [payload(start + i) for i in range(n)]
        t0 = time.perf_counter()
        submit = w.submit
        last = None
        for p in payloads:
            last = submit(TYPE, p)
        assert last is not None
        last.result()
        seconds = time.perf_counter() - t0
    finally:
        w.close()
    return rate(n, seconds)


def append_fsync(d: Path, key: SigningKey, n: int) -> float:
    w = LogWriter(d, [key], durability=Durability("fsync"))
    try:
        payloads = [payload(i) for i in range(n)]
        append = w.append
        seconds = timed(lambda: [append(TYPE, p) for p in payloads])
    finally:
        w.close()
    return rate(n, seconds)


def periodic_vs_none(root: Path, key: SigningKey, n: int, rounds: int = 5) -> dict[str, Any]:
    """Group commit with periodic checkpoints beside the same run without, interleaved.

    The side that goes first alternates round by round (a fixed order hands the
    second side a warmer page cache and the first a colder one), and the figures
    are medians with their min-max, the ratio taken round by round.
    """
    with_cp: list[float] = []
    without: list[float] = []
    ratios: list[float] = []
    checkpoints = 0
    sides: list[tuple[str, CheckpointPolicy | None]] = [("with", CheckpointPolicy()), ("without", None)]
    for r in range(rounds):
        got: dict[str, float] = {}
        for label, policy in sides if r % 2 == 0 else sides[::-1]:
            d = new_log(root, f"periodic-{label}-{r}", key)
            got[label] = append_group(d, key, n, policy=policy)
            if policy is not None:
                checkpoints = max(checkpoints, len(list((d / "checkpoints").iterdir())))
            shutil.rmtree(d)
        with_cp.append(got["with"])
        without.append(got["without"])
        ratios.append(ratio(got["with"], got["without"]))
    return {
        "entries": n,
        "rounds": rounds,
        "order": "interleaved, the first side alternating round by round",
        "with_checkpoints_entries_per_s": spread(with_cp),
        "without_entries_per_s": spread(without),
        "checkpoints_written": checkpoints,
        "periodic_checkpoints_vs_none": round(statistics.median(ratios), 3),
        "ratio_min_max": [min(ratios), max(ratios)],
    }


def spread(xs: list[float]) -> dict[str, float]:
    """Median with min and max: a figure on a shared machine is a range, not a best case."""
    return {"median": round(statistics.median(xs), 1), "min": round(min(xs), 1), "max": round(max(xs), 1)}


def disk_bytes(d: Path) -> tuple[int, int]:
    seg = sum(p.stat().st_size for _, p in list_segments(d))
    idx = sum(p.stat().st_size for p in (d / "index").iterdir() if p.is_file())
    return seg, idx


def overhead(d: Path) -> dict[str, Any]:
    seg, idx = disk_bytes(d)
    with Log(d) as log:
        n = log.size
        pay = sum(len(encode_payload(e.data)) for e in log.iter_entries())
    return {
        "entries": n,
        "segment_bytes": seg,
        "index_bytes": idx,
        "payload_bytes": pay,
        "envelope_bytes_per_entry": round((seg - pay) / n, 1),
        "index_bytes_per_entry": round(idx / n, 1),
        "overhead_bytes_per_entry": round((seg + idx - pay) / n, 1),
    }


def verify_rates(d: Path, n: int, key: SigningKey) -> dict[str, Any]:
    """Each verification beside its bound, measured right before it (the load may change)."""
    out: dict[str, Any] = {"entries": n}
    for label, kw in (
        ("full_1proc", {"processes": 1}),
        ("full_2proc", {"processes": 2}),
        ("hashes_only", {"hashes_only": True}),
    ):
        bound_label = "sha256_only_per_s" if kw.get("hashes_only") else "verify_only_1core_per_s"
        bound = sha_only(key, 200_000) if kw.get("hashes_only") else verify_only(key, 20_000)
        say(f"  verify {label} on {n} entries")
        t0 = time.perf_counter()
        report = verify_log(d, progress=False, policy=TRUST_GENESIS, **kw)  # type: ignore[arg-type]
        seconds = time.perf_counter() - t0
        assert report.entries == n, (report.entries, n)
        r = rate(n, seconds)
        out[label] = {
            "entries_per_s": r,
            "seconds": round(seconds, 3),
            "processes": report.processes,
            "index_hint": report.index_hint,
            bound_label: bound,
            "ratio": ratio(r, bound),
        }
    return out


def log_signatures(d: Path) -> tuple[list[bytes], bytes]:
    """The log's own signed messages (signature || to-be-signed bytes) and its key."""
    with Log(d) as log:
        entries = list(log.iter_entries())
    pk = KeySchedule.from_genesis(entries[0]).current.public_key
    return [e.sig + e.tbs() for e in entries], pk


def verify_own(signed: list[bytes], pk: bytes) -> float:
    """The bare loop over the signatures the verifier checks: libsodium's Ed25519 verify is
    variable-time, so one message repeated (`verify_only`) is not the same work; on this
    machine one hot message ran 2-8% faster or slower than the log's own, message by message."""
    opn = nacl.bindings.crypto_sign_open

    def loop() -> None:
        for sm in signed:
            opn(sm, pk)

    return rate(len(signed), timed(loop))


def cpu_seconds() -> float:
    """CPU time of this process and of its children reaped so far (a verify's workers are
    reaped when it returns)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def verify_interleaved(d: Path, n: int, key: SigningKey, rounds: int) -> dict[str, Any]:
    """`log verify` in 1 and 2 processes beside the bare verify loop, round by round.

    Each round runs the three sides in an order that rotates, so none always
    follows another; the ratios are taken within a round, then the median
    across rounds (the machine is shared: a figure is a range).
    """
    signed, pk = log_signatures(d)
    assert len(signed) == n, (len(signed), n)

    def full(procs: int) -> Callable[[], float]:
        def run() -> float:
            t0 = time.perf_counter()
            report = verify_log(d, progress=False, policy=TRUST_GENESIS, processes=procs)
            seconds = time.perf_counter() - t0
            assert report.entries == n and report.index_hint == "used", report
            assert report.processes == procs, (report.processes, procs)
            return rate(n, seconds)

        return run

    sides: dict[str, Callable[[], float]] = {
        "bare": lambda: verify_own(signed, pk),
        "full_1proc": full(1),
        "full_2proc": full(2),
    }
    names = list(sides)
    got: dict[str, list[float]] = {k: [] for k in names}
    cpu: dict[str, list[float]] = {k: [] for k in names}
    r1: list[float] = []
    r2: list[float] = []
    c1: list[float] = []
    c2: list[float] = []
    hot: list[float] = []
    for r in range(rounds):
        order = names[r % 3 :] + names[: r % 3]
        say(f"  round {r + 1}/{rounds}: {', '.join(order)}")
        this: dict[str, float] = {}
        for k in order:
            c0 = cpu_seconds()
            this[k] = sides[k]()
            cpu[k].append(cpu_seconds() - c0)
        for k in names:
            got[k].append(this[k])
        r1.append(ratio(this["full_1proc"], this["bare"]))
        r2.append(ratio(this["full_2proc"], this["bare"]))
        # CPU time does not move with the other processes on the machine as wall time does:
        # one process's ratio, and what two processes would reach on two free cores.
        c1.append(ratio(cpu["bare"][-1], cpu["full_1proc"][-1]))
        c2.append(ratio(2 * cpu["bare"][-1], cpu["full_2proc"][-1]))
        hot.append(verify_only(key, 10_000))
    return {
        "entries": n,
        "rounds": rounds,
        "order": "interleaved, rotating round by round; ratios within a round, then medians",
        "bare_own_signatures_per_s": spread(got["bare"]),
        "bare_one_message_per_s": spread(hot),
        "full_1proc_per_s": spread(got["full_1proc"]),
        "full_2proc_per_s": spread(got["full_2proc"]),
        "full_1proc_vs_verify_only": round(statistics.median(r1), 3),
        "full_1proc_ratio_min_max": [min(r1), max(r1)],
        "full_2proc_vs_verify_only": round(statistics.median(r2), 3),
        "full_2proc_ratio_min_max": [min(r2), max(r2)],
        "cpu_us_per_entry": {k: round(statistics.median(v) / n * 1e6, 2) for k, v in cpu.items()},
        "cpu_1proc_vs_verify_only": round(statistics.median(c1), 3),
        "cpu_2proc_on_two_free_cores_vs_verify_only": round(statistics.median(c2), 3),
        "targets": {
            "verify_1proc_vs_verify_only": {
                "value": round(statistics.median(r1), 3),
                "target": f">= {TARGETS['verify_1proc_vs_verify_only']}",
                "met": statistics.median(r1) >= TARGETS["verify_1proc_vs_verify_only"],
            },
            "verify_2proc_vs_verify_only": {
                "value": round(statistics.median(r2), 3),
                "target": f">= {TARGETS['verify_2proc_vs_verify_only']}",
                "met": statistics.median(r2) >= TARGETS["verify_2proc_vs_verify_only"],
            },
        },
    }


def ratio(a: float, b: float) -> float:
    return round(a / b, 3) if b else 0.0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.log_bench", description=__doc__.splitlines()[0])
    ap.add_argument("--entries", type=int, default=100_000)
    ap.add_argument(
        "--verify-entries", type=int, default=1_000_000, help="size of the large verify log (0: skip)"
    )
    ap.add_argument(
        "--fsync-entries", type=int, default=None, help="appends in fsync mode (default: --entries)"
    )
    ap.add_argument("--dir", type=Path, default=None, help="scratch directory (default: a temp dir)")
    ap.add_argument("--keep", action="store_true", help="keep the scratch logs")
    ap.add_argument(
        "--verify-rounds",
        type=int,
        default=0,
        help="only `log verify`: this many interleaved rounds on a log of --entries entries",
    )
    args = ap.parse_args(argv)
    n = args.entries
    if args.verify_rounds:
        return verify_main(args)
    nf = args.fsync_entries or n
    root = Path(tempfile.mkdtemp(prefix="mnemolog-bench-", dir=args.dir))
    key = SigningKey.generate("bench")
    result: dict[str, Any] = {
        "ok": True,
        "entries": n,
        "cpus": os.cpu_count(),
        "python": sys.version.split()[0],
    }
    try:
        say(f"bounds: sign-only on {min(n, 100_000)}")
        sign_rate = sign_only(key, min(n, 100_000))
        _, _, sample_raw = sample_entry(key)
        say(f"bound: raw write+fdatasync of {len(sample_raw)}-byte records, {nf}")
        fsync_rate = raw_fsync(root / "raw-fsync.bin", len(sample_raw), nf)

        say(f"append: group commit, {n}")
        d_group = new_log(root, "group", key)
        group_rate = append_group(d_group, key, n)
        say(f"append: fsync per append, {nf}")
        d_fsync = new_log(root, "fsync", key)
        fsync_append_rate = append_fsync(d_fsync, key, nf)
        shutil.rmtree(d_fsync)

        result["append"] = {
            "group_commit_entries_per_s": group_rate,
            "sign_only_per_s": sign_rate,
            "group_commit_vs_sign_only": ratio(group_rate, sign_rate),
            "fsync_entries": nf,
            "fsync_append_entries_per_s": fsync_append_rate,
            "raw_fsync_per_s": fsync_rate,
            "fsync_append_vs_raw_fsync": ratio(fsync_append_rate, fsync_rate),
        }
        result["overhead"] = overhead(d_group)
        say(f"append: group commit with and without periodic checkpoints, {n} x 5 interleaved rounds")
        result["periodic_checkpoints"] = periodic_vs_none(root, key, n)

        say(f"verify at {n}")
        v = verify_rates(d_group, n + 1, key)
        v["full_2proc_vs_verify_only"] = v["full_2proc"]["ratio"]
        v["full_1proc_vs_verify_only"] = v["full_1proc"]["ratio"]
        v["hashes_only_vs_sha256_only"] = v["hashes_only"]["ratio"]
        result["verify"] = v

        if args.verify_entries:
            m = args.verify_entries
            say(f"building a log of {m} entries (group commit)")
            d_big = new_log(root, "big", key)
            build_rate = append_group(d_big, key, m)
            say(f"verify at {m}")
            vb = verify_rates(d_big, m + 1, key)
            vb["build_group_commit_entries_per_s"] = build_rate
            vb["full_2proc_vs_verify_only"] = vb["full_2proc"]["ratio"]
            vb["full_1proc_vs_verify_only"] = vb["full_1proc"]["ratio"]
            vb["hashes_only_vs_sha256_only"] = vb["hashes_only"]["ratio"]
            result["verify_large"] = vb
            shutil.rmtree(d_big)

        a, ov = result["append"], result["overhead"]
        result["targets"] = {
            "group_commit_vs_sign_only": {
                "value": a["group_commit_vs_sign_only"],
                "target": f">= {TARGETS['group_commit_vs_sign_only']}",
                "met": a["group_commit_vs_sign_only"] >= TARGETS["group_commit_vs_sign_only"],
            },
            "fsync_append_vs_raw_fsync": {
                "value": a["fsync_append_vs_raw_fsync"],
                "target": f">= {TARGETS['fsync_append_vs_raw_fsync']}",
                "met": a["fsync_append_vs_raw_fsync"] >= TARGETS["fsync_append_vs_raw_fsync"],
            },
            "verify_2proc_vs_verify_only": {
                "value": v["full_2proc_vs_verify_only"],
                "target": f">= {TARGETS['verify_2proc_vs_verify_only']}",
                "met": v["full_2proc_vs_verify_only"] >= TARGETS["verify_2proc_vs_verify_only"],
            },
            "hashes_only_entries_per_s": {
                "value": v["hashes_only"]["entries_per_s"],
                "target": f">= {TARGETS['hashes_only_entries_per_s']}",
                "met": v["hashes_only"]["entries_per_s"] >= TARGETS["hashes_only_entries_per_s"],
            },
            **(
                {
                    "verify_2proc_vs_verify_only_large": {
                        "value": result["verify_large"]["full_2proc_vs_verify_only"],
                        "target": f">= {TARGETS['verify_2proc_vs_verify_only']}",
                        "met": result["verify_large"]["full_2proc_vs_verify_only"]
                        >= TARGETS["verify_2proc_vs_verify_only"],
                    },
                    "hashes_only_entries_per_s_large": {
                        "value": result["verify_large"]["hashes_only"]["entries_per_s"],
                        "target": f">= {TARGETS['hashes_only_entries_per_s']}",
                        "met": result["verify_large"]["hashes_only"]["entries_per_s"]
                        >= TARGETS["hashes_only_entries_per_s"],
                    },
                }
                if "verify_large" in result
                else {}
            ),
            "periodic_checkpoints_vs_none": {
                "value": result["periodic_checkpoints"]["periodic_checkpoints_vs_none"],
                "target": f">= {TARGETS['periodic_checkpoints_vs_none']}",
                "met": result["periodic_checkpoints"]["periodic_checkpoints_vs_none"]
                >= TARGETS["periodic_checkpoints_vs_none"],
            },
            "overhead_bytes_per_entry": {
                "value": ov["overhead_bytes_per_entry"],
                "target": f"<= {TARGETS['overhead_bytes_per_entry']}",
                "met": ov["overhead_bytes_per_entry"] <= TARGETS["overhead_bytes_per_entry"],
            },
        }
    finally:
        if args.keep:
            say(f"kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    print(json.dumps(result, indent=2))
    return 0


def verify_main(args: argparse.Namespace) -> int:
    root = Path(tempfile.mkdtemp(prefix="mnemolog-bench-", dir=args.dir))
    key = SigningKey.generate("bench")
    result: dict[str, Any] = {"ok": True, "cpus": os.cpu_count(), "python": sys.version.split()[0]}
    try:
        say(f"building a log of {args.entries} entries (group commit)")
        d = new_log(root, "verify", key)
        append_group(d, key, args.entries, policy=CheckpointPolicy())
        result["verify"] = verify_interleaved(d, args.entries + 1, key, args.verify_rounds)
    finally:
        if args.keep:
            say(f"kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
