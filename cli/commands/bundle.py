"""Forensic commands: export-forensic-bundle, verify-bundle, replay, and `log export`."""

from __future__ import annotations

from pathlib import Path

import click

from mnemolog.cli.app import Ctx, json_option
from mnemolog.eventlog import receipt
from mnemolog.eventlog.bundle import verifier as bundle
from mnemolog.eventlog.errors import UsageError
from mnemolog.eventlog.store.fsio import check_replaceable
from mnemolog.eventlog.witness.cosignature import WitnessPolicy
from mnemolog.substrate.api import Substrate
from mnemolog.substrate.forensics import service as forensics


@click.command("export-forensic-bundle")
@click.option("--memory-id", required=True, help="The memory the bundle is about.")
@click.option(
    "--include-atomisation-chain",
    "include_chain",
    type=click.BOOL,
    default=True,
    show_default=True,
    help="Also the memory's whole atomisation chain (parent, atoms, siblings).",
)
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Where to write the bundle (default: ./bundle-<memory id>.tar).",
)
@json_option
@click.pass_obj
def export_forensic_bundle(ctx: Ctx, memory_id: str, include_chain: bool, output: Path | None) -> None:
    """Write a sparse, signed, offline-verifiable bundle of everything about one memory."""
    out = output or Path(f"bundle-{memory_id}.tar")
    check_replaceable(out)  # refused before the bundle is built, not after
    with Substrate.open(ctx.home, long_lived=False) as sub:
        for t in sub.recovered:
            ctx.info(f"mnemolog: recovery: {t.describe()}")
        ex = forensics.export_bundle(sub, memory_id, include_chain)
    forensics.write_output(out, ex.data)
    data = {"path": str(out), **ex.summary()}
    ctx.emit(
        data,
        lambda: (
            f"wrote {out} ({len(ex.data)} bytes): {len(ex.seqs)} entries about "
            f"{len(ex.memories)} memor{'y' if len(ex.memories) == 1 else 'ies'}, "
            f"proven against the checkpoint of size {ex.tree_size}\n"
            f"verify with: mnemolog verify-bundle {out} --trusted-key KEY"
        ),
    )


@click.command("verify-bundle")
@click.argument("file", type=click.Path(path_type=Path))
@click.option("--trusted-key", help="The pinned public key: name+hash+base64, or a file holding one.")
@click.option(
    "--witness-key",
    "witness_keys",
    multiple=True,
    help="A witness's cosigner key (or a file): the bundle's checkpoint must carry its "
    "cosignature (repeatable).",
)
@click.option(
    "--min-witnesses",
    type=click.IntRange(min=1),
    default=None,
    help="How many of the --witness-key witnesses must have cosigned (default: all).",
)
@json_option
@click.pass_obj
def verify_bundle(
    ctx: Ctx, file: Path, trusted_key: str | None, witness_keys: tuple[str, ...], min_witnesses: int | None
) -> None:
    """Verify a forensic bundle offline; exit 8 naming the first failure."""
    witnesses = WitnessPolicy.parse(witness_keys, min_witnesses)
    report = bundle.verify_bundle(file, policy=bundle.trust_policy(trusted_key), witnesses=witnesses)
    ctx.emit(report.to_json(), report.text)


@click.command("replay")
@click.argument("file", type=click.Path(path_type=Path))
@click.option(
    "--home",
    "new_home",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="The new home to build (must not exist, or be empty).",
)
@click.option("--trusted-key", help="The pinned public key: name+hash+base64, or a file holding one.")
@click.option(
    "--signing-key",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="The log's current private key, so the new home can append (else it has public keys only).",
)
@click.option(
    "--keys",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="The data keys that open sealed content (default: FILE.keys beside the export, when there).",
)
@json_option
@click.pass_obj
def replay(
    ctx: Ctx, file: Path, new_home: Path, trusted_key: str | None, signing_key: Path | None, keys: Path | None
) -> None:
    """Rebuild a home from a `log export` that starts at seq 0, verified on the way in."""
    r = forensics.replay(
        file, new_home, policy=bundle.trust_policy(trusted_key), signing_key=signing_key, keys=keys
    )
    data = {
        "home": r.home,
        "entries": r.entries,
        "tree_size": r.tree_size,
        "checkpoint": r.checkpoint,
        "signing_key": r.signing_key,
        "replayed": r.replayed,
        "export": r.export,
        "data_keys": r.data_keys,
        "sealed": r.sealed,
    }

    def text() -> str:
        trust = r.export["trust"]
        anchor = (
            f"pinned key {trust['key']}" if trust["pinned"] else f"genesis key {trust['key']} (not pinned)"
        )
        lines = [
            f"replayed {r.entries} entries into {r.home} (verified; trust: {anchor})",
            f"projections rebuilt from {r.replayed} entries",
        ]
        if not r.signing_key:
            lines.append(
                "note: no --signing-key given: the new home holds public keys only and cannot append"
            )
        if r.sealed:
            lines.append(
                f"note: {r.sealed} sealed fields have no data key here (forgotten, or the export's keys "
                "were not given): they read as sealed"
            )
        return "\n".join(lines)

    ctx.emit(data, text)


@click.command("export")
@click.option("--from", "start", type=click.IntRange(min=0), default=0, show_default=True, help="First seq.")
@click.option(
    "--to", "last", type=click.IntRange(min=0), default=None, help="Last seq (inclusive; default: the end)."
)
@click.option(
    "-o", "--output", required=True, type=click.Path(dir_okay=False, path_type=Path), help="The export file."
)
@click.option(
    "--no-keys",
    is_flag=True,
    help="Do not write the data keys beside the export (a copy that verifies but reads as sealed).",
)
@json_option
@click.pass_obj
def log_export(ctx: Ctx, start: int, last: int | None, output: Path, no_keys: bool) -> None:
    """Export entries FROM..TO with a signed checkpoint and the proofs to check them elsewhere."""
    if last is not None and last < start:
        raise UsageError(f"--to {last} is before --from {start}")
    r = forensics.export_log(ctx.home.require(), start, last, output, with_keys=not no_keys)
    keys = f"; {r.data_keys} data keys in {r.keys}" if r.keys else "; no data keys (content reads as sealed)"
    ctx.emit(
        vars(r),
        f"wrote {r.path} ({r.bytes} bytes): entries {r.start}..{r.last}, proven against the "
        f"checkpoint of size {r.tree_size}{keys}",
    )


@click.command("verify-receipt")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--trusted-key", help="The pinned public key: name+hash+base64, or a file holding one.")
@click.option("--memory-id", help="The memory the erasure must name.")
@json_option
@click.pass_obj
def verify_receipt(ctx: Ctx, file: Path, trusted_key: str | None, memory_id: str | None) -> None:
    """Check an erasure receipt offline: the memory.erased entry, signed and included."""
    data = forensics.read_export(file)
    r = receipt.verify_receipt(data, policy=bundle.trust_policy(trusted_key), memory_id=memory_id)
    names = ", ".join(r["memories"]) or "(no memory)"
    why = f" ({r['reason']})" if r["reason"] else ""
    ctx.emit(
        r,
        f"ok: the content of {names} was erased at seq {r['seq']}{why}; the entry is signed and "
        f"included in the tree of size {r['tree_size']}",
    )


COMMANDS = [export_forensic_bundle, verify_bundle, replay, verify_receipt]
