"""`make demo`: the main job end to end, in a temporary home, through the real CLI.

Each step prints the command it runs and what came back, so a newcomer sees
what an operator would type. It fails loudly (exit 1) if any step does not
behave as described, so the demo doubles as a smoke test.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

POST_MORTEM = """Post-mortem: checkout outage on 14 March.

At 09:12 UTC the checkout service began returning HTTP 500 errors for about 40% of requests. \
The on-call engineer was paged at 09:15 by the error-rate alert. Initial investigation pointed \
at the payment gateway, but its status page showed no incidents.

The root cause was a connection pool exhaustion in the orders database. A deploy at 09:05 had \
raised the worker count from 8 to 32 without raising the pool size, so workers queued for \
connections and timed out after 30 seconds.

Mitigation was a rollback of the deploy at 09:41, after which error rates returned to baseline \
within four minutes. No orders were lost, but roughly 1,900 customers saw a failed checkout.

Action items: the deploy pipeline will check that pool size scales with worker count; the \
error-rate alert will page at 5% instead of 20%; the runbook for checkout will list the orders \
database as a first suspect. Dr. Alvarez owns the pipeline change, due 1 April.
"""

MEMORIES = [
    ("Prefer pg_repack over ALTER TABLE for rewriting large tables online.", "decision", "ops/db"),
    ("The staging database is refreshed from production every Sunday at 02:00 UTC.", "reference", "ops/db"),
    ("Alice prefers terse status updates with the numbers first.", "user", "team"),
    ("When a deploy raises concurrency, raise the connection pool with it.", "feedback", "ops"),
    ("Project Atlas: migrate billing to the new ledger by the end of Q3 2026.", "project", "billing"),
]


class DemoFailed(Exception):
    pass


class Demo:
    def __init__(self, home: Path) -> None:
        self.home = home
        self.env = {**os.environ, "MNEMOLOG_HOME": str(home)}

    def run(
        self, *args: str, expect: int = 0, stdin: str | None = None, show: bool = True, quiet: bool = False
    ) -> subprocess.CompletedProcess[str]:
        shown = " ".join(a if " " not in a else repr(a) for a in args)
        if show:
            print(f"\n$ mnemolog {shown}" + (" < post-mortem.txt" if stdin else ""))
        p = subprocess.run(
            [sys.executable, "-m", "mnemolog.cli.main", *args],
            input=stdin,
            capture_output=True,
            text=True,
            env=self.env,
            check=False,
        )
        if show and not quiet:
            out = p.stdout.rstrip()
            if out:
                lines = out.splitlines()
                print(
                    "\n".join(lines[:24])
                    + (f"\n... ({len(lines) - 24} more lines)" if len(lines) > 24 else "")
                )
            if p.stderr.strip():
                print(p.stderr.rstrip())
        if p.returncode != expect:
            raise DemoFailed(
                f"`mnemolog {shown}` exited {p.returncode}, expected {expect}\n{p.stdout}\n{p.stderr}"
            )
        if show and expect:
            print(f"(exit {p.returncode}, as expected)")
        return p

    def json(self, *args: str, stdin: str | None = None, expect: int = 0) -> dict[str, Any]:
        p = self.run(*args, "--json", stdin=stdin, expect=expect, show=False)
        return json.loads(p.stdout)  # type: ignore[no-any-return]


def section(title: str) -> None:
    print(f"\n{'=' * 78}\n{title}\n{'=' * 78}")


def log_part(d: Demo, work: Path) -> None:
    section("1. The signed event log")
    d.run("init", "--key-name", "demo-key")
    d.run("log", "append", "note.added", "--data", '{"text": "demo started"}')
    d.run("log", "checkpoint")
    d.run("log", "verify")
    d.run("log", "prove", "1")
    # Tamper with a copy: flip one byte in the middle of an entry.
    copy = work / "tampered-home"
    shutil.copytree(d.home, copy)
    seg = copy / "log" / "00000000000000000000.seg"
    raw = bytearray(seg.read_bytes())
    raw[len(raw) // 2] ^= 0x01
    seg.write_bytes(bytes(raw))
    print(f"\n(flipped one bit at byte {len(raw) // 2} of a copy's first segment)")
    d.run("--home", str(copy), "log", "verify", expect=8)


def recall_part(d: Demo) -> list[str]:
    section("2. Memories that recall")
    for text, kind, ns in MEMORIES:
        d.run("store", text, "--kind", kind, "--namespace", ns, "--tag", "demo")
    first = d.json("recall", "how should I rewrite a big table", "--limit", "3")
    d.run("recall", "how should I rewrite a big table", "--limit", "3")
    d.run("search", "database production")
    d.run("list", "--namespace", "ops")
    d.run("rebuild")
    again = d.json("recall", "how should I rewrite a big table", "--limit", "3")
    if [(r["id"], r["score"]) for r in first["results"]] != [(r["id"], r["score"]) for r in again["results"]]:
        raise DemoFailed("recall after rebuild differs from recall before it")
    print("\n(recall after rebuild: identical ids and scores)")
    return [r["id"] for r in first["results"]]


def atomise_part(d: Demo) -> str:
    section("3. Atomisation: a long post-mortem becomes atoms")
    stored = d.json(
        "store", "-", "--title", "Checkout outage post-mortem", "--namespace", "ops", "--tag", "postmortem",
        stdin=POST_MORTEM,
    )  # fmt: skip
    pid = str(stored["memory"]["id"])
    cmd = "store - --title 'Checkout outage post-mortem' --namespace ops --tag postmortem"
    print(f"\n$ mnemolog {cmd} < post-mortem.txt\nstored {pid}")
    curator = "ollama" if os.environ.get("MNEMOLOG_OLLAMA_MODEL") else "rules"
    d.run("atomise", pid, "--curator", curator, "--max-atom-tokens", "60")
    d.run("atomise", pid, "--curator", curator, expect=1)
    res = d.json("recall", "why did workers time out", "--limit", "3")
    d.run("recall", "why did workers time out", "--limit", "3")
    top = res["results"][0]
    if top.get("atom_of") != pid or any(r["id"] == pid for r in res["results"]):
        raise DemoFailed("the pointed recall should return an atom, not the archived parent")
    print("\n(the top hit is an atom of the post-mortem; the archived parent is hidden)")
    d.run("recall", "checkout outage", "--include-archived", "--limit", "3")
    d.run("log", "show", "--type", "atomisation.completed")
    d.run("stats")
    d.run("log", "verify")
    return pid


def bundle_part(d: Demo, work: Path, pid: str) -> None:
    section("4. A forensic bundle, verified offline")
    bundle = work / "postmortem-bundle.tar"
    d.run("export-forensic-bundle", "--memory-id", pid, "-o", str(bundle))
    vkey = d.json("key", "show")["vkey"]
    print("\n(the auditor's side: only the bundle and the public key; no home, no DuckDB)")
    print(f"$ python -m mnemolog.eventlog.bundle {bundle.name} --trusted-key {vkey}")
    p = subprocess.run(
        [sys.executable, "-m", "mnemolog.eventlog.bundle", str(bundle), "--trusted-key", vkey],
        capture_output=True, text=True, check=False, cwd=work,
    )  # fmt: skip
    print(p.stdout.rstrip())
    if p.returncode != 0:
        raise DemoFailed(f"the bundle did not verify:\n{p.stdout}\n{p.stderr}")
    # Tamper with a copy: change one byte of the memory views inside the archive.
    tampered = work / "tampered-bundle.tar"
    raw = bytearray(bundle.read_bytes())
    with tarfile.open(bundle) as tar:
        member = tar.getmember("memories.json")
    raw[member.offset_data + member.size // 2] ^= 0x20
    tampered.write_bytes(bytes(raw))
    print(f"\n(changed one byte of memories.json inside a copy: {tampered.name})")
    d.run("verify-bundle", str(tampered), "--trusted-key", vkey, expect=8)


def vault_part(d: Demo, work: Path) -> None:
    section("5. The store as a Markdown vault (Atomic Agents layout)")
    out = work / "vault"
    d.run("vault", "render", str(out), "--agent", "demo")
    index = (out / "demo" / "memory" / "INDEX.md").read_text()
    print("\n$ head -n 12 vault/demo/memory/INDEX.md\n" + "\n".join(index.splitlines()[:12]))
    d.run("vault", "validate", str(out))
    d.run("vault", "render", str(out), "--agent", "demo")


def main() -> int:
    work = Path(tempfile.mkdtemp(prefix="mnemolog-demo-"))
    d = Demo(work / "home")
    print(f"demo home: {d.home}")
    try:
        log_part(d, work)
        recall_part(d)
        pid = atomise_part(d)
        bundle_part(d, work, pid)
        vault_part(d, work)
    except DemoFailed as exc:
        print(f"\nDEMO FAILED: {exc}", file=sys.stderr)
        return 1
    finally:
        if not os.environ.get("MNEMOLOG_DEMO_KEEP"):
            shutil.rmtree(work, ignore_errors=True)
    section("demo complete")
    return 0


if __name__ == "__main__":
    sys.exit(main())
