"""How long a whole `mnemolog` process takes, beside the processes that bound it.

Every case is a fresh process, timed from spawn to exit, and the cases are
run in turns (one of each per round) so a noisy machine slows all of them
alike. Reported per case: the median wall time and the median peak RSS of
the process (from wait4, the child alone). The bounds, measured in the same
run:

  * `mnemolog --help` against `python -c pass` (target: at most 3x), and its
    peak RSS (target: at most 60 MiB);
  * `store`, `recall` and `get` on a home of 10,000 memories against a process
    that only imports duckdb, pydantic, nacl, cbor2 and click (target: at
    most 1.5x): the libraries every such command needs, so the ratio is what
    mnemolog adds on top of them.

The same three commands are also run with a `mnemolog serve` of the home
running (`store_handoff`, `recall_handoff`, `get_handoff`): they hand the call
to it over its Unix socket (cli.handoff) and print its answer. The in-process
cases run beside them with MNEMOLOG_HANDOFF=0; the server's own CPU per
handed-off call (from /proc, in clock ticks, so a mean over the rounds) is
reported beside, and the server's count of calls it answered is checked.

CPU time (user + system, from wait4) is the target's measure: it moves far
less than wall time when other work shares the machine (wall time is
reported beside it). `get`'s peak RSS has its own target (at most 100 MiB).

The home is filled once (N memories written straight to the log, then
caught up) and can be kept: `--home DIR` builds it in DIR when DIR does not
exist and reuses it when it does, so later runs measure the same home
without paying the fill again (every run's `store` adds memories to it).
`--embed off` records embeddings off in a new home, so `store` and `recall`
measure what a process costs without a model; by default the home keeps the
default embedder, whose model `store` (and `recall`, once vectors exist)
must load in process.

`python -m bench.cli_bench [--memories N] [--rounds R] [--home DIR] [--embed off]`;
prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.recall_bench import Corpus, fill
from mnemolog.substrate.api import Substrate
from mnemolog.substrate.home import Home, init_home

TARGETS = {
    "help_vs_python_max": 3.0,
    "command_vs_imports_max": 1.5,
    "help_peak_rss_mib_max": 60.0,
    "get_peak_rss_mib_max": 100.0,
}
# pydantic 2 makes `import pydantic` a lazy stub: its models load with the first
# `BaseModel`, which any user of pydantic touches. The bound imports that too;
# the literal reading (`import pydantic` alone) is reported beside it.
BASE_IMPORTS = "import duckdb, nacl.signing, cbor2, click; from pydantic import BaseModel"
BARE_IMPORTS = "import duckdb, pydantic, nacl.signing, cbor2, click"
COMMANDS = ("store", "recall", "get")
HANDED = tuple(f"{c}_handoff" for c in COMMANDS)


def log(msg: str) -> None:
    print(f"cli_bench: {msg}", file=sys.stderr, flush=True)


def min_max_ms(xs: list[float]) -> list[float]:
    return [round(min(xs) * 1e3, 1), round(max(xs) * 1e3, 1)]


def mnemolog_argv() -> list[str]:
    exe = Path(sys.executable).with_name("mnemolog")
    if exe.exists():
        return [str(exe)]
    return [sys.executable, "-m", "mnemolog.cli.main"]


# The processes are started by a small helper process, not by this one: Linux
# counts the peak RSS of the process a child was forked from into the child's
# ru_maxrss, and this one holds a 10k-memory home in memory. The helper's own
# peak (that of `python -c pass`) is the floor every figure shares.
_SPAWNER = r"""
import json, os, sys, time
for line in sys.stdin:
    argv, env = json.loads(line)
    t0 = time.perf_counter()
    pid = os.posix_spawn(argv[0], argv, env, file_actions=[
        (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0),
        (os.POSIX_SPAWN_OPEN, 2, os.devnull, os.O_WRONLY, 0)])
    _, status, ru = os.wait4(pid, 0)
    wall = time.perf_counter() - t0
    print(json.dumps([os.waitstatus_to_exitcode(status), wall, ru.ru_utime + ru.ru_stime, ru.ru_maxrss]),
          flush=True)
"""


class Spawner:
    def __init__(self) -> None:
        self.p = subprocess.Popen(
            [sys.executable, "-c", _SPAWNER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )

    def run(self, argv: list[str], env: Mapping[str, str]) -> tuple[float, float, float]:
        """Wall seconds, CPU seconds and peak RSS (MiB) of one process; it must exit 0."""
        assert self.p.stdin and self.p.stdout
        self.p.stdin.write(json.dumps([argv, env]) + "\n")
        self.p.stdin.flush()
        code, wall, cpu, maxrss_kib = json.loads(self.p.stdout.readline())
        if code != 0:
            raise SystemExit(f"{argv} exited {code}")
        return wall, cpu, maxrss_kib / 1024

    def close(self) -> None:
        assert self.p.stdin
        self.p.stdin.close()
        self.p.wait()


def compile_package() -> None:
    """Write the package's bytecode, as `pip install` does for an installed package.

    An editable install compiles on import instead, and writes nothing when
    PYTHONDONTWRITEBYTECODE is set: every process would then pay for
    compiling mnemolog's sources, which no installed copy ever does.
    """
    import compileall

    import mnemolog.cli

    root = Path(mnemolog.cli.__file__).resolve().parents[1]
    for pkg in ("eventlog", "projections", "curators", "substrate", "cli"):
        compileall.compile_dir(str(root / pkg), quiet=1)


def make_home(root: Path, n: int, embed: str | None) -> str:
    """A home of n memories (built unless `root` holds one already); returns the id `get` reads."""
    if not (root / "config.toml").exists():
        log(f"filling a home with {n} memories in {root}")
        init_home(root, key_name="bench")
        home = Home(root)
        fill(home, Corpus(), n)
        with Substrate.open(home, long_lived=False, worker=False) as s:
            if embed is not None:
                s.set_embedder(embed)
            s.stats()  # projections caught up, as on any home in use
    else:
        log(f"reusing the home in {root}")
    with Substrate.open(Home(root), long_lived=False, worker=False) as s:
        return s.list(limit=1)[0]["id"]


def cpu_ticks_s(pid: int) -> float:
    """User + system CPU seconds of a running process (Linux /proc; clock-tick resolution)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextmanager
def server(home: Path, env: Mapping[str, str]) -> Iterator[subprocess.Popen[bytes]]:
    """A `mnemolog serve` of `home` on a free loopback port, announced for the command line."""
    import socket
    import time

    from mnemolog.cli import handoff

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    p = subprocess.Popen(
        [*mnemolog_argv(), "serve", "--listen", f"127.0.0.1:{port}"],
        env=dict(env),
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 120
        while handoff.find(str(home)) is None:
            if p.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("the server did not start")
            time.sleep(0.1)
        yield p
    finally:
        p.terminate()
        p.wait(60)


def served(home: Path) -> dict[str, int]:
    """The server's count of handed-off calls (GET /cli/served over its socket)."""
    import socket

    s = socket.socket(socket.AF_UNIX)
    s.connect(str(home / "run" / "serve.sock"))
    s.sendall(b"GET /cli/served HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
    raw = b""
    while chunk := s.recv(65536):
        raw += chunk
    s.close()
    counts: dict[str, int] = json.loads(raw.split(b"\r\n\r\n", 1)[1])["served"]
    return counts


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--memories", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument(
        "--home",
        type=Path,
        default=None,
        help="build the home here once and reuse it on later runs (default: a temporary home, removed)",
    )
    ap.add_argument("--embed", choices=["off"], default=None, help="record embeddings off in a new home")
    args = ap.parse_args(argv)

    work = Path(tempfile.mkdtemp(prefix="mnemolog-cli-bench-"))
    spawner = Spawner()
    try:
        compile_package()
        home = args.home.resolve() if args.home is not None else work / "home"
        some_id = make_home(home, args.memories, args.embed)
        base = {k: v for k, v in os.environ.items() if k != "MNEMOLOG_HANDOFF"}
        env_on = {**base, "MNEMOLOG_HOME": str(home)}
        env_off = {**env_on, "MNEMOLOG_HANDOFF": "0"}
        m = mnemolog_argv()
        store_argv = [*m, "store", "the bench stores one more memory about table rewrites", "-n", "bench"]
        cases: dict[str, list[str]] = {
            "python_pass": [sys.executable, "-c", "pass"],
            "help": [*m, "--help"],
            "imports_only": [sys.executable, "-c", BASE_IMPORTS],
            "imports_only_bare": [sys.executable, "-c", BARE_IMPORTS],
            "store": store_argv,
            "recall": [*m, "recall", "how do I rewrite a big table"],
            "get": [*m, "get", some_id],
        }
        for c in COMMANDS:
            cases[f"{c}_handoff"] = cases[c]
        walls: dict[str, list[float]] = {k: [] for k in cases}
        cpus: dict[str, list[float]] = {k: [] for k in cases}
        rss: dict[str, list[float]] = {k: [] for k in cases}
        server_cpu: dict[str, list[float]] = {k: [] for k in HANDED}
        with server(home, env_on) as srv:
            for name, cmd in cases.items():  # warm the page cache (and the server) once; not measured
                spawner.run(cmd, env_on if name in HANDED else env_off)
            before = served(home)
            names = list(cases)
            for r in range(args.rounds):
                # The first case rotates round by round, so none always runs on the coldest machine.
                for name in names[r % len(names) :] + names[: r % len(names)]:
                    cmd = cases[name]
                    handed = name in HANDED
                    c0 = cpu_ticks_s(srv.pid) if handed else 0.0
                    w, c, mib = spawner.run(cmd, env_on if handed else env_off)
                    if handed:
                        server_cpu[name].append(cpu_ticks_s(srv.pid) - c0)
                    walls[name].append(w)
                    cpus[name].append(c)
                    rss[name].append(mib)
                log(f"round {r + 1}/{args.rounds}")
            after = served(home)
        handed_off = {c: after[c] - before[c] for c in COMMANDS}
        if any(n != args.rounds for n in handed_off.values()):
            raise SystemExit(f"the server answered {handed_off}, not {args.rounds} of each")
        wall = {k: statistics.median(v) for k, v in walls.items()}
        cpu = {k: statistics.median(v) for k, v in cpus.items()}

        def ratios(med: dict[str, float]) -> dict[str, float]:
            return {
                "help_vs_python": round(med["help"] / med["python_pass"], 2),
                **{f"{c}_vs_imports": round(med[c] / med["imports_only"], 2) for c in COMMANDS},
                **{f"{c}_vs_bare_imports": round(med[c] / med["imports_only_bare"], 2) for c in COMMANDS},
                **{f"{c}_vs_imports": round(med[c] / med["imports_only"], 2) for c in HANDED},
            }

        with Substrate.open(Home(home), long_lived=False, worker=False) as s:
            status = s.embedding_status()
            memories = s.stats()["memories"]
        out: dict[str, Any] = {
            "memories": memories,
            "embedder": {k: status[k] for k in ("recorded", "configured", "vectors", "pending")},
            "rounds": args.rounds,
            "median_wall_ms": {k: round(v * 1e3, 1) for k, v in wall.items()},
            "wall_min_max_ms": {k: min_max_ms(v) for k, v in walls.items()},
            "cpu_min_max_ms": {k: min_max_ms(v) for k, v in cpus.items()},
            "load_avg_after": os.getloadavg(),
            "median_cpu_ms": {k: round(v * 1e3, 1) for k, v in cpu.items()},
            "median_peak_rss_mib": {k: round(statistics.median(v), 1) for k, v in rss.items()},
            "handed_off_calls": handed_off,
            "server_cpu_ms_mean_per_call": {
                k: round(statistics.fmean(v) * 1e3, 1) for k, v in server_cpu.items()
            },
            "wall_ratios": ratios(wall),
            "cpu_ratios": ratios(cpu),
            "targets": TARGETS,
        }
        r = out["cpu_ratios"]
        rss_med = out["median_peak_rss_mib"]
        out["met"] = {
            "help_vs_python": r["help_vs_python"] <= TARGETS["help_vs_python_max"],
            **{
                f"{c}_vs_imports": r[f"{c}_vs_imports"] <= TARGETS["command_vs_imports_max"] for c in COMMANDS
            },
            "help_peak_rss": rss_med["help"] <= TARGETS["help_peak_rss_mib_max"],
            "get_peak_rss": rss_med["get"] <= TARGETS["get_peak_rss_mib_max"],
            **{f"{c}_vs_imports": r[f"{c}_vs_imports"] <= TARGETS["command_vs_imports_max"] for c in HANDED},
            "get_handoff_peak_rss": rss_med["get_handoff"] <= TARGETS["get_peak_rss_mib_max"],
        }
        out["ok"] = all(out["met"].values())
        print(json.dumps(out))
        return 0
    finally:
        spawner.close()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
