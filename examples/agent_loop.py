"""An agent loop with mnemolog as its memory: recall before answering, store what matters.

    python examples/agent_loop.py              # a short scripted conversation
    python examples/agent_loop.py --interactive

The home is $MNEMOLOG_HOME (created if it does not exist yet) or, when that
is unset, a temporary one. `answer` stands in for your model: replace it
with a call to the LLM you use, giving it the recalled memories as context.
Nothing here needs a network or a model.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from mnemolog.eventlog.errors import MnemologError
from mnemolog.substrate.api import Substrate
from mnemolog.substrate.home import Home, init_home

SCRIPT = [
    "We decided to use pg_repack instead of ALTER TABLE for big table rewrites.",
    "Remember that Alice wants status updates with the numbers first.",
    "How should I rewrite the orders table, it has 200 million rows?",
    "What does Alice like in a status update?",
]

# What an agent keeps: decisions, preferences, corrections. A real agent would let
# the model decide (the MCP prompt `use-memory` says how); a keyword rule keeps this
# example deterministic.
KEEP = {
    "decided": "decision",
    "decision": "decision",
    "remember": "user",
    "prefer": "user",
    "wrong": "feedback",
}


def answer(question: str, memories: list[dict[str, Any]]) -> str:
    """Your model goes here. This stand-in quotes the best memory it was given."""
    if not memories:
        return "I have nothing on that yet."
    best = memories[0]
    return f"From memory ({best['kind']}, {best['id'][:8]}...): {best['content']}"


def turn(mem: Substrate, text: str, namespace: str) -> str:
    hits = mem.recall(text, limit=3, namespace=namespace)
    reply = answer(text, hits)
    kind = next((k for word, k in KEEP.items() if word in text.lower()), None)
    if kind is not None:
        stored = mem.store(text, kind=kind, namespace=namespace, source="conversation:agent_loop")
        reply += f"\n  (stored as {kind} {stored['id']})"
    return reply


def open_home() -> Path:
    root = Path(os.environ.get("MNEMOLOG_HOME") or Path(tempfile.mkdtemp()) / "home")
    if not Home(root).exists():
        init_home(root)
    return root


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--interactive", action="store_true", help="Read turns from standard input.")
    ap.add_argument("--namespace", default="agent/example")
    args = ap.parse_args()
    home = open_home()
    print(f"memory home: {home}")
    turns = (line.strip() for line in sys.stdin) if args.interactive else iter(SCRIPT)
    try:
        with Substrate.open(home) as mem:
            for text in turns:
                if not text:
                    continue
                print(f"\nuser:  {text}\nagent: {turn(mem, text, args.namespace)}")
    except MnemologError as exc:
        print(f"mnemolog: {exc.message}", file=sys.stderr)
        return exc.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
