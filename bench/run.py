"""Run every benchmark module `bench/*_bench.py` and print their JSON results.

`python -m bench.run [NAME ...]` runs each module as `python -m bench.<name>` in
its own process (so one benchmark's caches and worker pools cannot colour the
next), collects the JSON object each prints last on stdout, and prints one
JSON object keyed by module name. Extra arguments after `--` go to every module.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent


def discover() -> list[str]:
    return sorted(p.stem for p in BENCH_DIR.glob("*_bench.py"))


def run_one(name: str, extra: list[str]) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, "-m", f"bench.{name}", *extra],
        cwd=BENCH_DIR.parent,
        stdout=subprocess.PIPE,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        return {"ok": False, "exit_code": proc.returncode, "stdout_tail": proc.stdout[-2000:]}
    # The module's result is the last line that parses as a JSON object.
    for line in reversed(proc.stdout.strip().splitlines()):
        try:
            value = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict):
            return value
    try:
        value = json.loads(proc.stdout)
    except json.JSONDecodeError:
        return {"ok": False, "error": "no JSON object on stdout", "stdout_tail": proc.stdout[-2000:]}
    return value if isinstance(value, dict) else {"ok": False, "result": value}


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    extra: list[str] = []
    if "--" in args:
        i = args.index("--")
        args, extra = args[:i], args[i + 1 :]
    names = args or discover()
    unknown = [n for n in names if n not in discover()]
    if unknown:
        print(f"unknown benchmark(s): {', '.join(unknown)}; found {', '.join(discover())}", file=sys.stderr)
        return 64
    results: dict[str, Any] = {}
    for name in names:
        print(f"running bench.{name} ...", file=sys.stderr, flush=True)
        results[name] = run_one(name, extra)
    print(json.dumps(results, indent=2, sort_keys=True))
    return 0 if all(r.get("ok", True) is not False for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
