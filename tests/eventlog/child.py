"""A child process for the crash, concurrency and reader tests (run as a script, never imported).

    child.py append LOG_DIR --mode fsync|group --count N --size BYTES --threads T --seeds 7,8,9 --tag X
    child.py rotate LOG_DIR --seeds 7,8,9 --pause SECONDS
    child.py read LOG_DIR --stop-file PATH

`append` prints the seq of every acknowledged entry (after append() returns),
one per line, flushed. `read` polls the log and checks every entry it sees
(strict decoding, contiguous seq, the prev chain); it prints the number of
entries seen, or "BAD ..." and exits 1.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path

from mnemolog.eventlog.errors import NotFound
from mnemolog.eventlog.format.keys import SigningKey
from mnemolog.eventlog.store.log import Log
from mnemolog.eventlog.store.writer import Durability, LogWriter


def keys_from(seeds: str) -> list[SigningKey]:
    return [SigningKey(bytes([int(s)]) * 32, f"key-{s}") for s in seeds.split(",")]


def append(args: argparse.Namespace) -> int:
    keys = keys_from(args.seeds)
    out = threading.Lock()
    dur = Durability(args.mode, max_entries=64, max_ms=2)
    with LogWriter(Path(args.log), keys, durability=dur, checkpoint_on_close=not args.no_checkpoint) as w:

        def work(t: int) -> None:
            for i in range(args.count):
                r = w.append("note.added", {"tag": args.tag, "t": t, "i": i, "pad": "p" * args.size})
                with out:
                    sys.stdout.write(f"{r.seq}\n")
                    sys.stdout.flush()

        threads = [threading.Thread(target=work, args=(t,)) for t in range(args.threads)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    return 0


def rotate(args: argparse.Namespace) -> int:
    keys = keys_from(args.seeds)
    with LogWriter(Path(args.log), keys) as w:
        for k in keys:
            time.sleep(args.pause)
            if k.kid != w.key.kid:
                r = w.rotate_key(k)
                sys.stdout.write(f"{r.seq}\n")
                sys.stdout.flush()
    return 0


def read(args: argparse.Namespace) -> int:
    stop = Path(args.stop_file)
    seen, prev = 0, bytes(32)
    log = Log(Path(args.log))
    polls = 0
    while True:
        done = stop.exists()
        log.refresh()
        polls += 1
        try:
            for e in log.iter_entries(seen):
                strict = log.entry(e.seq)  # canonical bytes, v1 shape
                if e.seq != seen or e.prev != prev or strict.raw != e.raw:
                    print(f"BAD entry {e.seq} (expected {seen})", flush=True)
                    return 1
                prev = e.leaf
                seen += 1
        except NotFound:
            pass
        if done:
            break
    print(f"{seen} {polls}", flush=True)
    return 0


def main() -> int:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from tests.support import slow_writes

    slow_writes.install_from_env()
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("append")
    a.add_argument("log")
    a.add_argument("--mode", default="fsync")
    a.add_argument("--count", type=int, default=10**9)
    a.add_argument("--size", type=int, default=10)
    a.add_argument("--threads", type=int, default=1)
    a.add_argument("--seeds", default="7")
    a.add_argument("--tag", default="a")
    a.add_argument("--no-checkpoint", action="store_true")
    r = sub.add_parser("rotate")
    r.add_argument("log")
    r.add_argument("--seeds", default="7")
    r.add_argument("--pause", type=float, default=0.05)
    rd = sub.add_parser("read")
    rd.add_argument("log")
    rd.add_argument("--stop-file", required=True)
    args = ap.parse_args()
    return {"append": append, "rotate": rotate, "read": read}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
