"""`mnemolog init`, `mnemolog log ...` and `mnemolog key ...`: the log's operator surface."""

from __future__ import annotations

import base64
import datetime as dt
import json
import time
from typing import Any

import click

from mnemolog.cli.app import Ctx, json_option, parse_json_object, writer_for
from mnemolog.eventlog.errors import NotFound, UsageError, VerificationError
from mnemolog.eventlog.format import merkle
from mnemolog.eventlog.format.entry import Entry
from mnemolog.eventlog.format.note import MAX_NOTE_BYTES
from mnemolog.eventlog.store.fsio import read_regular
from mnemolog.eventlog.store.log import CHECKPOINT_DIR, checkpoint_name
from mnemolog.eventlog.verify.trust import TRUST_GENESIS, PinnedKey, TrustPolicy, parse_key_arg
from mnemolog.eventlog.verify.verifier import verify_log
from mnemolog.substrate.home import init_home

NOTE_PREFIX = "note."


def _iso(ts_us: int) -> str:
    return dt.datetime.fromtimestamp(ts_us / 1e6, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _entry_line(e: Entry) -> str:
    data = json.dumps(e.summary()["data"], sort_keys=True, ensure_ascii=False)
    if len(data) > 160:
        data = data[:157] + "..."
    return f"{e.seq:>8}  {_iso(e.ts)}  {e.type:<24} {e.kid.hex()}  {data}"


def _b64(h: bytes) -> str:
    return base64.b64encode(h).decode()


@click.command()
@click.option(
    "--key-name",
    help="C2SP key name for checkpoint signatures (default: the checkpoint origin, mnemolog/<log id>).",
)
@json_option
@click.pass_obj
def init(ctx: Ctx, key_name: str | None) -> None:
    """Create a home: key, genesis entry, first checkpoint."""
    report = init_home(ctx.home.root, key_name)
    ctx.emit(
        vars(report),
        lambda: (
            f"initialised {report.home}\n"
            f"log id   {report.log_id}\n"
            f"key      {report.vkey}\n"
            f"checkpoint:\n{report.checkpoint}"
        ),
    )


@click.group("log")
def log_group() -> None:
    """The signed event log: show, verify, prove, append notes."""


@log_group.command("show")
@click.option("--from", "start", type=click.IntRange(min=0), default=0, help="First seq.")
@click.option("--to", "stop", type=click.IntRange(min=0), default=None, help="Last seq (inclusive).")
@click.option("--type", "types", multiple=True, help="Only entries of this type (repeatable).")
@click.option("--limit", type=click.IntRange(min=1), default=None, help="At most this many entries.")
@json_option
@click.pass_obj
def log_show(ctx: Ctx, start: int, stop: int | None, types: tuple[str, ...], limit: int | None) -> None:
    """Print entries (seq, time, type, key id, payload)."""
    with ctx.home.open_log() as log:
        end = log.size if stop is None else min(stop + 1, log.size)
        out: list[Entry] = []
        for e in log.iter_entries(start, end):
            if types and e.type not in types:
                continue
            out.append(e)
            if limit and len(out) >= limit:
                break
        size = log.size
    ctx.emit(
        {"size": size, "entries": [e.summary() for e in out]},
        lambda: "\n".join(_entry_line(e) for e in out) or "(no entries)",
    )


@log_group.command("tail")
@click.option("-n", "count", type=click.IntRange(min=1), default=10, help="How many entries.")
@click.option("--follow", "-f", is_flag=True, help="Keep printing entries as they are appended.")
@json_option
@click.pass_obj
def log_tail(ctx: Ctx, count: int, follow: bool) -> None:
    """Print the last entries; with --follow, keep watching (JSON: one object per line)."""
    with ctx.home.open_log() as log:
        start = max(0, log.size - count)
        entries = list(log.iter_entries(start))
        if not follow:
            ctx.emit(
                {"size": log.size, "entries": [e.summary() for e in entries]},
                lambda: "\n".join(_entry_line(e) for e in entries),
            )
            return
        seen = start
        try:
            while True:
                for e in log.iter_entries(seen):
                    click.echo(json.dumps(e.summary()) if ctx.json else _entry_line(e))
                    seen = e.seq + 1
                time.sleep(0.25)
                log.refresh()
        except KeyboardInterrupt:
            return


@log_group.command("checkpoint")
@json_option
@click.pass_obj
def log_checkpoint(ctx: Ctx) -> None:
    """Sign and store a checkpoint of the log as it is now."""
    from mnemolog.substrate.witness.service import publish_checkpoint

    with writer_for(ctx, checkpoint_on_close=False) as w:
        cp, raw = w.checkpoint()
    # After the writer let go: a witness that is slow or down never holds up an append.
    home = ctx.home
    results = publish_checkpoint(home.root, home.log_dir, home.keys_dir, cp.size)
    if results:
        raw = read_regular(home.log_dir / CHECKPOINT_DIR / checkpoint_name(cp.size), MAX_NOTE_BYTES)
    for r in results:
        if r.status != "cosigned":
            ctx.info(f"mnemolog: {r.describe()}")
    alarms = [r for r in results if r.alarming]
    if alarms:
        # The checkpoint is stored, but a witness remembers a larger or another tree: this
        # log was rolled back or forked, and that is a failed verification (as `witness sync`).
        raise VerificationError(
            f"checkpoint of size {cp.size} stored, but " + "; ".join(r.describe() for r in alarms),
            check="witness.rollback",
            size=cp.size,
            witnesses=[r.to_json() for r in results],
        )
    ctx.emit(
        {
            "size": cp.size,
            "root": cp.root.hex(),
            "origin": cp.origin,
            "note": raw.decode(),
            "witnesses": [r.to_json() for r in results],
        },
        raw.decode(),
    )


@log_group.command("verify")
@click.option("--hashes-only", is_flag=True, help="Chain and tree against signed checkpoints only.")
@click.option(
    "--processes",
    type=click.IntRange(min=1),
    default=None,
    help="Worker processes (default: cores).",
)
@click.option(
    "--trusted-key",
    default=None,
    help="Anchor on a pinned public key (name+hash+base64, or a file) the key history must contain.",
)
@click.option(
    "--trust-genesis",
    is_flag=True,
    help="Check the log as a stranger's: anchor on its own genesis key (trust on first use), "
    "ignoring the home's log id, keys and high-water mark.",
)
@click.option(
    "--witness-key",
    "witness_keys",
    multiple=True,
    help="A witness's cosigner key (or a file): the checkpoint of the whole log must carry its "
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
def log_verify(
    ctx: Ctx,
    hashes_only: bool,
    processes: int | None,
    trusted_key: str | None,
    trust_genesis: bool,
    witness_keys: tuple[str, ...],
    min_witnesses: int | None,
) -> None:
    """Check the whole log against the home's trust anchor and high-water mark; exit 8 on failure."""
    from mnemolog.eventlog.witness.cosignature import WitnessPolicy
    from mnemolog.substrate.witness.checks import require_witnessed

    home = ctx.home.require()
    witnesses = WitnessPolicy.parse(witness_keys, min_witnesses)
    if trusted_key is not None and trust_genesis:
        raise UsageError("--trusted-key and --trust-genesis name two different anchors: give one")
    policy: TrustPolicy
    if trusted_key is not None:
        policy = PinnedKey(parse_key_arg(trusted_key))
    elif trust_genesis:
        policy = TRUST_GENESIS
    else:
        policy = home.trust_anchor()
    report = verify_log(
        home.log_dir,
        policy=policy,
        # --trust-genesis checks the log as a stranger's: none of the home's record applies.
        high_water=[] if trust_genesis else home.high_water_marks(),
        hashes_only=hashes_only,
        processes=processes,
    )
    data = report.to_json()
    witnessed = require_witnessed(home.log_dir, report.entries, witnesses) if witnesses else None
    if witnessed is not None:
        data["witnesses"] = witnessed

    def text() -> str:
        mode = "hashes only" if hashes_only else "full"
        lines = [
            f"ok: {report.entries} entries in {report.segments} segment(s) verified ({mode}, "
            f"{report.processes} process(es), {report.seconds:.2f}s)",
            f"root {report.root}",
            f"{report.checkpoints} checkpoint(s) verified; latest covers {report.latest_checkpoint}",
            f"{report.keys} key(s) in the history",
            f"trust anchor: {report.trust.get('anchor')}: {_anchor_text(report.trust)}",
        ]
        if report.high_water:
            for hw in report.high_water:
                lines.append(f"high-water mark {hw['source']}: size {hw['size']}, covered with the same root")
        else:
            lines.append("high-water mark: none recorded (a rollback of log/ could go unnoticed)")
        if report.migrated_from is not None:
            mf = report.migrated_from
            lines.append(
                f"migrated from log {mf['log_id']}: its checkpoint of size {mf['size']} and the hand-off "
                f"are signed by {mf['vkey']} (whether to trust that key is the old log's anchor)"
            )
        if report.back_chains is not None:
            bc = report.back_chains
            lines.append(
                f"back-chains: {bc['pointers_checked']} touch_prev pointer(s) and "
                f"{bc['heads_commitments_checked']} heads commitment(s) agree with the log's fold"
                + (f" ({bc['pointers_missing']} pointer(s) absent)" if bc["pointers_missing"] else "")
            )
        if witnessed is not None:
            names = ", ".join(c["name"] for c in witnessed["cosignatures"])
            lines.append(
                f"witnessed: the checkpoint of size {witnessed['checkpoint']} carries "
                f"{len(witnessed['cosignatures'])} cosignature(s) ({names}); {witnessed['min']} required"
            )
        lines.append("checks: " + ", ".join(report.checks))
        if report.torn_tail:
            lines.append(
                f"note: torn tail of {report.torn_tail['bytes']} bytes at "
                f"{report.torn_tail['segment']}:{report.torn_tail['offset']} (an interrupted, "
                "unacknowledged write; the next writer cuts it)"
            )
        return "\n".join(lines)

    ctx.emit(data, text)


def _anchor_text(trust: dict[str, Any]) -> str:
    if trust.get("anchor") == "pinned":
        return f"pinned key {trust['key']} (in the history from seq {trust.get('epoch_from_seq')})"
    if trust.get("anchor") == "home":
        return f"the home's log id {trust.get('log_id')} and genesis key {trust['key']}"
    return f"genesis key {trust.get('key')} found in the log (trust on first use: NOT anchored)"


@click.command("verify")
@click.option(
    "--log", "check_log", is_flag=True, help="Verify the log (as `log verify`, anchored on the home)."
)
@click.option(
    "--projections",
    "check_projections",
    is_flag=True,
    help="Re-fold the log and compare every projection table with disk, row for row.",
)
@json_option
@click.pass_obj
def verify(ctx: Ctx, check_log: bool, check_projections: bool) -> None:
    """Verify the home: the log, and the projections against the log (default: both); exit 8 on failure."""
    from mnemolog.substrate.api import Substrate

    home = ctx.home.require()
    if not check_log and not check_projections:
        check_log = check_projections = True
    data: dict[str, Any] = {}
    lines: list[str] = []
    if check_log:
        report = verify_log(home.log_dir, policy=home.trust_anchor(), high_water=home.high_water_marks())
        data["log"] = report.to_json()
        lines.append(f"ok: log of {report.entries} entries verified ({_anchor_text(report.trust)})")
    if check_projections:
        from mnemolog.projections.audit import NothingChecked

        with Substrate.open(home, long_lived=False, worker=False) as sub:
            try:
                proj = sub.verify_projections()
            except NothingChecked as exc:
                if check_log:  # what was verified still counts; the exit code says the rest did not
                    raise NothingChecked(f"{lines[0]}; projections: {exc.message}", log=data["log"]) from exc
                raise
        data["projections"] = proj
        lines.append(
            f"ok: {proj['rows']} projection rows in {len(proj['tables'])} tables equal a fresh fold of "
            f"the first {proj['entries']} entries"
        )
    ctx.emit(data, "\n".join(lines))


@log_group.command("prove")
@click.argument("seq", type=click.IntRange(min=0))
@json_option
@click.pass_obj
def log_prove(ctx: Ctx, seq: int) -> None:
    """Inclusion proof of entry SEQ against the latest checkpoint."""
    with ctx.home.open_log() as log:
        cp, raw = log.latest_checkpoint()
        if seq >= cp.size:
            raise NotFound(
                f"entry {seq} is not covered by the latest checkpoint (size {cp.size}); "
                "run `mnemolog log checkpoint` first",
                seq=seq,
            )
        leaf = log.leaf(seq)
        proof = log.inclusion_proof(seq, cp.size)
        merkle.verify_inclusion(seq, cp.size, leaf, proof, cp.root)
    data: dict[str, Any] = {
        "seq": seq,
        "tree_size": cp.size,
        "leaf_hash": _b64(leaf),
        "root": _b64(cp.root),
        "proof": [_b64(h) for h in proof],
        "checkpoint": raw.decode(),
    }
    ctx.emit(
        data,
        lambda: "\n".join(
            [
                f"entry {seq} is in the tree of size {cp.size} (proof verified)",
                f"leaf  {data['leaf_hash']}",
                f"root  {data['root']}",
                *[f"proof {p}" for p in data["proof"]],
            ]
        ),
    )


@log_group.command("consistency")
@click.argument("old_size", type=click.IntRange(min=1))
@click.argument("new_size", type=click.IntRange(min=1))
@json_option
@click.pass_obj
def log_consistency(ctx: Ctx, old_size: int, new_size: int) -> None:
    """Consistency proof that the tree of NEW_SIZE extends the tree of OLD_SIZE."""
    if old_size > new_size:
        raise UsageError(f"OLD_SIZE ({old_size}) must not exceed NEW_SIZE ({new_size})")
    with ctx.home.open_log() as log:
        if new_size > log.size:
            raise NotFound(f"the log has {log.size} entries, not {new_size}")
        # The proof first: it checks the index nodes it uses before the roots are read.
        proof = log.consistency_proof(old_size, new_size)
        r1, r2 = log.root(old_size), log.root(new_size)
        merkle.verify_consistency(old_size, new_size, r1, r2, proof)
    data: dict[str, Any] = {
        "old_size": old_size,
        "new_size": new_size,
        "old_root": _b64(r1),
        "new_root": _b64(r2),
        "proof": [_b64(h) for h in proof],
    }
    ctx.emit(
        data,
        lambda: "\n".join(
            [
                f"the tree of size {new_size} extends the tree of size {old_size} (proof verified)",
                f"old root {data['old_root']}",
                f"new root {data['new_root']}",
                *[f"proof    {p}" for p in data["proof"]],
            ]
        ),
    )


@log_group.command("append")
@click.argument("type_", metavar="TYPE")
@click.option("--data", "data_json", required=True, help="The payload, a JSON object.")
@json_option
@click.pass_obj
def log_append(ctx: Ctx, type_: str, data_json: str) -> None:
    """Append an operator annotation (types under note. only)."""
    if not type_.startswith(NOTE_PREFIX) or len(type_) <= len(NOTE_PREFIX):
        raise UsageError(
            f"only operator annotations can be appended by hand: the type must start with "
            f"'{NOTE_PREFIX}' (e.g. note.added), not {type_!r}"
        )
    data = parse_json_object(data_json, "--data")
    with writer_for(ctx) as w:
        r = w.append(type_, data)
    ctx.emit({"seq": r.seq, "type": r.type, "leaf_hash": r.leaf.hex()}, f"appended {r.type} as {r.seq}")


@click.group("key")
def key_group() -> None:
    """The signing key and its history."""


@key_group.command("show")
@json_option
@click.pass_obj
def key_show(ctx: Ctx) -> None:
    """The active public key and the key history recorded in the log."""
    home = ctx.home.require()
    with home.open_log() as log:
        epochs = log.key_history()
    active = epochs[-1].key
    data: dict[str, Any] = {
        "name": active.name,
        "kid": active.kid.hex(),
        "vkey": active.vkey(),
        "note_key_hash": active.note_hash.hex(),
        "history": [
            {
                "from_seq": ep.first_seq,
                "event_seq": ep.event_seq,
                "kid": ep.key.kid.hex(),
                "vkey": ep.key.vkey(),
            }
            for ep in epochs
        ],
    }
    ctx.emit(
        data,
        lambda: "\n".join(
            [f"active  {active.vkey()}  (kid {active.kid.hex()})"]
            + [f"from seq {h['from_seq']:>8}: {h['vkey']}" for h in data["history"]]
        ),
    )


@key_group.command("rotate")
@click.option("--name", help="Key name of the new key (default: keep the current name).")
@json_option
@click.pass_obj
def key_rotate(ctx: Ctx, name: str | None) -> None:
    """Rotate to a new key, announced by a key.rotated entry signed by the old key."""
    home = ctx.home.require()
    with writer_for(ctx) as w:
        old = w.key
        new, seq = home.rotate_key(w, name)
    ctx.emit(
        {
            "seq": seq,
            "old_kid": old.kid.hex(),
            "new_kid": new.kid.hex(),
            "vkey": new.verifier.vkey(),
        },
        f"rotated at seq {seq}: {old.kid.hex()} -> {new.kid.hex()}\nnew key {new.verifier.vkey()}",
    )
