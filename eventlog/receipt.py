"""Erasure receipts: a signed statement, checked offline, that a memory's content was erased.

A receipt is a log export (eventlog.logexport) of exactly one entry, the
`memory.erased` entry, against a checkpoint that covers it: the header
carries the signed checkpoint, the key history with its inclusion proofs,
and the entry's own inclusion proof (the range proof of a one-entry
range). Verifying it checks the entry's signature under the key history,
its inclusion under the signed root, and that it is an erasure; the
report says which memories, interactions and documents it names, at which
seq, why, and the tree it is proven against. It holds no content: the
erased content was never in the entry.

Standard library, cbor2 and pynacl only, like the bundle verifier:

    python -m mnemolog.eventlog.receipt RECEIPT [--trusted-key KEY] [--memory-id ID] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mnemolog.eventlog.bundle import logexport, offline
from mnemolog.eventlog.errors import MnemologError, NotFound
from mnemolog.eventlog.format.note import peek_checkpoint
from mnemolog.eventlog.store.fsio import read_regular
from mnemolog.eventlog.verify.trust import TRUST_GENESIS, PinnedKey, TrustPolicy, parse_key_arg
from mnemolog.eventlog.vocabulary.events import MEMORY_ERASED, read_str

__all__ = ["MAX_RECEIPT_BYTES", "main", "verify_receipt"]

MAX_RECEIPT_BYTES = 16 * 1024 * 1024


def _ids(value: Any) -> list[str]:
    return [x for x in value if isinstance(x, str)] if isinstance(value, list) else []


def verify_receipt(
    data: bytes, *, policy: TrustPolicy = TRUST_GENESIS, memory_id: str | None = None
) -> dict[str, Any]:
    """Check a receipt (see the module docstring); the report, or the VerificationError of the first failure.

    With `memory_id`, the erasure must name that memory.
    """
    ex = logexport.verify_export(data, policy=policy)
    if ex.count != 1 or ex.entries[0].type != MEMORY_ERASED:
        found = ex.entries[0].type if ex.count == 1 else f"{ex.count} entries"
        raise offline.fail(
            f"a receipt holds exactly one {MEMORY_ERASED} entry; this holds {found}",
            "receipt.entry",
            expected=MEMORY_ERASED,
            found=found,
        )
    e = ex.entries[0]
    ids = _ids(e.data.get("ids"))
    if memory_id is not None and memory_id not in ids:
        raise offline.fail(
            f"the erasure at seq {e.seq} does not name memory {memory_id}",
            "receipt.memory",
            seq=e.seq,
            expected=memory_id,
        )
    cp = peek_checkpoint(ex.checkpoint)
    return {
        "seq": e.seq,
        "ts": e.ts,
        "memories": ids,
        "interactions": _ids(e.data.get("interactions")),
        "documents": _ids(e.data.get("documents")),
        "reason": read_str(e.data.get("reason")),
        "requested_by": read_str(e.data.get("requested_by")),
        "tree_size": cp.size,
        "root": cp.root.hex(),
        "origin": cp.origin,
        "trust": ex.trust,
    }


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m mnemolog.eventlog.receipt",
        description="Verify a mnemolog erasure receipt offline (needs only cbor2 and pynacl).",
    )
    p.add_argument("receipt", help="the receipt file")
    p.add_argument("--trusted-key", help="the pinned public key: name+hash+base64, or a file holding one")
    p.add_argument("--memory-id", help="the memory the erasure must name")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    args = p.parse_args(argv)
    try:
        try:
            data = read_regular(Path(args.receipt), MAX_RECEIPT_BYTES)
        except FileNotFoundError as exc:
            raise NotFound(f"no receipt at {args.receipt}", file=args.receipt) from exc
        except OSError as exc:
            raise offline.fail(
                f"cannot read {args.receipt}: {exc}", "receipt.read", file=args.receipt
            ) from exc
        policy = PinnedKey(parse_key_arg(args.trusted_key)) if args.trusted_key else TRUST_GENESIS
        report = verify_receipt(data, policy=policy, memory_id=args.memory_id)
    except MnemologError as err:
        if args.json:
            print(json.dumps(err.to_json(), default=str))
        else:
            print(f"mnemolog: {err.message}", file=sys.stderr)
        return err.exit_code
    if args.json:
        print(json.dumps({"ok": True, **report}, default=str))
    else:
        names = ", ".join(report["memories"]) or "(no memory)"
        print(
            f"ok: the content of {names} was erased at seq {report['seq']}"
            + (f" ({report['reason']})" if report["reason"] else "")
            + f"; the entry is signed and included in the tree of size {report['tree_size']} "
            f"(root {report['root']}, {report['origin']})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
