"""Knowledge-loop commands: project, state, capture, interactions, extract, triage, candidates,
promote, reject, decay, domains."""

from __future__ import annotations

import datetime as dt
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import click

from mnemolog.cli.app import Ctx, json_option, parse_json_object
from mnemolog.cli.commands.memory import opened
from mnemolog.cli.commands.memory_front import warn
from mnemolog.cli.tables import date, memory_line, one_line
from mnemolog.eventlog.errors import BadInput, UsageError
from mnemolog.eventlog.vocabulary.knowledge import DOMAIN_DESCRIPTIONS, STATE_CATEGORIES
from mnemolog.projections.knowledge.queries import CANDIDATE_QUEUES
from mnemolog.substrate.events.limits import MAX_CONTENT_BYTES

#: A JSON capture on standard input: two texts at the content limit, and room for the rest.
MAX_CAPTURE_JSON_BYTES = 2 * MAX_CONTENT_BYTES + 64 * 1024
CAPTURE_FIELDS = (
    "prompt",
    "response",
    "project",
    "client",
    "session",
    "context_id",
    "namespace",
    "reinforce",
    "occurred_at",
)


def parse_time(value: str, what: str) -> int:
    """Microseconds since the epoch from an integer or an ISO 8601 date or time (UTC unless given)."""
    text = value.strip()
    if text.lstrip("-").isdigit():
        us = int(text)
    else:
        try:
            parsed = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError as exc:
            raise UsageError(
                f"{what}: expected microseconds since the epoch or an ISO 8601 time; found {value!r}",
                field=what,
            ) from exc
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=dt.UTC)
        us = int(parsed.timestamp() * 1_000_000)
    if us < 0:
        raise UsageError(f"{what}: a time before 1970 is not a clock reading; found {value!r}", field=what)
    return us


# -- projects ---------------------------------------------------------------------------------


@click.group("project")
def project_group() -> None:
    """Projects: names, aliases, and what each holds."""


@project_group.command("add")
@click.argument("name")
@click.option("--alias", "aliases", multiple=True, help="Another name of the project (repeatable).")
@click.option("--description", default="", help="What the project is.")
@json_option
@click.pass_obj
def project_add(ctx: Ctx, name: str, aliases: tuple[str, ...], description: str) -> None:
    """Register project NAME."""
    with opened(ctx) as s:
        p = s.register_project(name, aliases=aliases, description=description)
    ctx.emit(
        {"project": p},
        f"registered project {p['name']}" + (f" ({', '.join(p['aliases'])})" if p["aliases"] else ""),
    )


@project_group.command("alias")
@click.argument("name")
@click.argument("alias")
@json_option
@click.pass_obj
def project_alias(ctx: Ctx, name: str, alias: str) -> None:
    """Make ALIAS another name of project NAME (rows stored under ALIAS resolve to NAME)."""
    with opened(ctx) as s:
        p = s.alias_project(name, alias)
    ctx.emit({"project": p}, f"{alias} -> {p['name']}")


@project_group.command("list")
@json_option
@click.pass_obj
def project_list(ctx: Ctx) -> None:
    """Registered projects with their aliases and counts."""
    with opened(ctx) as s:
        rows = s.projects()

    def text() -> str:
        lines = []
        for p in rows:
            aliases = f" ({', '.join(p['aliases'])})" if p["aliases"] else ""
            lines.append(
                f"{p['name']}{aliases}: {p['memories']} memories, {p['candidates']} candidates, "
                f"{p['interactions']} interactions, {p['state_entries']} state entries"
            )
        return "\n".join(lines) or "(no projects)"

    ctx.emit({"projects": rows}, text)


# -- trusted state -------------------------------------------------------------------------------


def _state_line(e: Mapping[str, Any]) -> str:
    flag = "" if e["state"] == "current" else f"  [{e['state']}]"
    source = f"  (source: {e['source']})" if e.get("source") else ""
    return f"{e['category']}/{e['key']}: {e['value']}{source}{flag}"


@click.group("state")
def state_group() -> None:
    """Trusted project state: curated (project, category, key) = value entries."""


@state_group.command("set")
@click.argument("project")
@click.argument("category", metavar="CATEGORY")
@click.argument("key")
@click.argument("value")
@click.option("--source", help="Where the value comes from.")
@json_option
@click.pass_obj
def state_set(ctx: Ctx, project: str, category: str, key: str, value: str, source: str | None) -> None:
    """Set CATEGORY/KEY = VALUE for PROJECT."""
    with opened(ctx) as s:
        e = s.set_state(project, category, key, value, source=source)
    ctx.emit({"entry": e}, ("set " if e["changed"] else "unchanged ") + _state_line(e))


state_set.help = f"Set CATEGORY/KEY = VALUE for PROJECT (categories: {', '.join(STATE_CATEGORIES)})."


@state_group.command("get")
@click.argument("project")
@click.option("--category", help="Only this category.")
@click.option("--history", is_flag=True, help="Every value ever set, replaced and invalid ones too.")
@json_option
@click.pass_obj
def state_get(ctx: Ctx, project: str, category: str | None, history: bool) -> None:
    """PROJECT's state entries."""
    with opened(ctx) as s:
        rows = s.get_state(project, category=category, history=history)
    ctx.emit(
        {"project": project, "entries": rows}, lambda: "\n".join(map(_state_line, rows)) or "(no entries)"
    )


@state_group.command("invalidate")
@click.argument("project")
@click.argument("category")
@click.argument("key")
@click.option("--reason", help="Why it no longer holds.")
@json_option
@click.pass_obj
def state_invalidate(ctx: Ctx, project: str, category: str, key: str, reason: str | None) -> None:
    """Mark PROJECT's CATEGORY/KEY as no longer holding (its history stays)."""
    with opened(ctx) as s:
        e = s.invalidate_state(project, category, key, reason=reason)
    ctx.emit({"entry": e}, f"invalidated {e['category']}/{e['key']}")


# -- capture -----------------------------------------------------------------------------------------


def _read_capture_json() -> dict[str, Any]:
    raw = sys.stdin.buffer.read(MAX_CAPTURE_JSON_BYTES + 1)
    if len(raw) > MAX_CAPTURE_JSON_BYTES:
        raise BadInput(
            f"the capture on standard input is larger than {MAX_CAPTURE_JSON_BYTES} bytes "
            f"(prompt and response are each at most {MAX_CONTENT_BYTES} bytes)",
            field="stdin",
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadInput(f"standard input is not valid UTF-8 (byte {exc.start})", field="stdin") from exc
    obj = parse_json_object(text, "the capture on standard input")
    unknown = sorted(set(obj) - set(CAPTURE_FIELDS))
    if unknown:
        raise BadInput(
            f"the capture has unknown field(s) {unknown}; expected some of {list(CAPTURE_FIELDS)}",
            field="stdin",
        )
    return obj


@click.command("capture")
@click.option("--prompt", help="What the person asked (else a JSON object on standard input).")
@click.option("--response", help="What the agent answered.")
@click.option("--project", help="The project it happened in.")
@click.option("--client", help="Which client captured it (e.g. claude-code).")
@click.option("--session", "session_id", help="The conversation it belongs to.")
@click.option("--context", "context_id", help="The context pack it answered from.")
@click.option("--namespace", "-n", help="Namespace of what is extracted from it (default 'default').")
@click.option("--reinforce", is_flag=True, default=None, help="Reinforce the memories the response echoes.")
@click.option(
    "--occurred-at",
    "occurred_at",
    help="When it happened, if not now (2023-05-08 or 2023-05-08T14:30Z): what is extracted is dated by it.",
)
@json_option
@click.pass_obj
def capture(
    ctx: Ctx,
    prompt: str | None,
    response: str | None,
    project: str | None,
    client: str | None,
    session_id: str | None,
    context_id: str | None,
    namespace: str | None,
    reinforce: bool | None,
    occurred_at: str | None,
) -> None:
    """Record one interaction and print its id. Changes no memory unless --reinforce."""
    given: dict[str, Any] = {} if prompt is not None else _read_capture_json()
    for name, value in (
        ("prompt", prompt),
        ("response", response),
        ("project", project),
        ("client", client),
        ("session", session_id),
        ("context_id", context_id),
        ("namespace", namespace),
        ("reinforce", reinforce),
        ("occurred_at", occurred_at),
    ):
        if value is not None:
            given[name] = value
    if not isinstance(given.get("prompt"), str):
        raise BadInput("a capture needs a prompt (text)", field="prompt")
    reinforce_value = given.get("reinforce", False)
    if not isinstance(reinforce_value, bool):
        raise BadInput("reinforce must be true or false", field="reinforce")
    for name in ("response", "project", "client", "session", "context_id", "namespace"):
        if name in given and given[name] is not None and not isinstance(given[name], str):
            raise BadInput(f"{name} must be text", field=name)
    with opened(ctx) as s:
        out = s.capture(
            given["prompt"],
            given.get("response") or "",
            project=given.get("project") or "",
            client=given.get("client"),
            session=given.get("session"),
            context_id=given.get("context_id"),
            namespace=given.get("namespace") or "default",
            reinforce=reinforce_value,
            occurred_at=given.get("occurred_at"),
        )

    def text() -> str:
        lines = [out["id"]]
        lines += [
            f"reinforced {r['id']} ({r['mode']}, {r['overlap']}/{r['size']} terms)" for r in out["reinforced"]
        ]
        return "\n".join(lines)

    ctx.emit({"interaction": out}, text)


# -- interactions ----------------------------------------------------------------------------------------


@click.group("interactions")
def interactions_group() -> None:
    """Captured interactions."""


@interactions_group.command("list")
@click.option("--project", help="Only this project.")
@click.option("--session", "session_id", help="Only this conversation.")
@click.option("--since", help="Only from this time on (ISO 8601, or microseconds).")
@click.option("--limit", type=click.IntRange(1, 1000), default=50, show_default=True, help="At most N.")
@json_option
@click.pass_obj
def interactions_list(
    ctx: Ctx, project: str | None, session_id: str | None, since: str | None, limit: int
) -> None:
    """Interactions, newest first."""
    since_us = parse_time(since, "--since") if since is not None else None
    with opened(ctx) as s:
        rows = s.interactions(project=project, session=session_id, since=since_us, limit=limit)

    def text() -> str:
        return (
            "\n".join(
                f"{r['id']}  {date(r['captured_at'])}  {r['project'] or '-':<16} {r['extraction']:<9} "
                f"{one_line(r['prompt'], 60)}"
                for r in rows
            )
            or "(no interactions)"
        )

    ctx.emit({"interactions": rows}, text)


@interactions_group.command("show")
@click.argument("interaction_id")
@json_option
@click.pass_obj
def interactions_show(ctx: Ctx, interaction_id: str) -> None:
    """One interaction, with the candidates extracted from it."""
    with opened(ctx) as s:
        r = s.interaction(interaction_id)

    def text() -> str:
        lines = [
            f"{k:<11} {r[k]}"
            for k in ("id", "project", "namespace", "client", "session", "context_id")
            if r[k]
        ]
        lines.append(f"captured    {date(r['captured_at'])} (seq {r['seq']})")
        lines.append(f"extraction  {r['extraction']} ({r['failures']} failed attempt(s))")
        if r["candidates"]:
            lines.append(f"candidates  {', '.join(r['candidates'])}")
        lines += ["", "prompt:", r["prompt"], "", "response:", r["response"]]
        return "\n".join(lines)

    ctx.emit({"interaction": r}, text)


# -- extraction and triage -----------------------------------------------------------------------------------


def _retries_option(f: Any) -> Any:
    return click.option(
        "--max-retries", type=click.IntRange(0, 10), default=None, help="Model retries (default: config)."
    )(f)


@click.command("extract")
@click.option("--interaction", "interaction_ids", multiple=True, help="An interaction id (repeatable).")
@click.option("--pending", is_flag=True, help="Every interaction not yet extracted.")
@click.option(
    "--extractor", type=click.Choice(["rules", "ollama"]), default=None, help="Default: config (rules)."
)
@click.option("--limit", type=click.IntRange(1, 1000), default=100, help="At most N pending interactions.")
@_retries_option
@json_option
@click.pass_obj
def extract(
    ctx: Ctx,
    interaction_ids: tuple[str, ...],
    pending: bool,
    extractor: str | None,
    limit: int,
    max_retries: int | None,
) -> None:
    """Turn interactions into candidate memories (never recalled until promoted)."""
    with opened(ctx) as s:
        out = s.extract(
            interaction_ids=interaction_ids,
            pending=pending,
            extractor=extractor,
            limit=limit,
            max_retries=max_retries,
        )

    def text() -> str:
        lines = []
        for r in out["results"]:
            lines.append(f"{r['interaction']}: {r['outcome']}")
            for c in r.get("candidates", []):
                where = c["project"] or ",".join(c["domains"]) or "-"
                lines.append(f"  {c['id']}  {c['layer']:<10} {where:<16} {one_line(c['content'], 60)}")
        return "\n".join(lines)

    ctx.emit(out, text)


@click.command("triage")
@click.argument("candidate_ids", nargs=-1)
@click.option("--pending", is_flag=True, help="Every candidate not yet triaged.")
@click.option(
    "--triager", type=click.Choice(["rules", "ollama"]), default=None, help="Default: config (rules)."
)
@click.option("--dry-run", is_flag=True, help="Show the verdicts and decisions; write nothing.")
@click.option("--limit", type=click.IntRange(1, 1000), default=100, help="At most N pending candidates.")
@_retries_option
@json_option
@click.pass_obj
def triage(
    ctx: Ctx,
    candidate_ids: tuple[str, ...],
    pending: bool,
    triager: str | None,
    dry_run: bool,
    limit: int,
    max_retries: int | None,
) -> None:
    """Give candidates verdicts: promote, reject, needs_human or contradicts."""
    with opened(ctx) as s:
        out = s.triage(
            candidate_ids=candidate_ids,
            pending=pending,
            triager=triager,
            dry_run=dry_run,
            limit=limit,
            max_retries=max_retries,
        )

    def text() -> str:
        lines = [
            f"{r['id']}: {r.get('verdict', r['outcome'])} "
            + (f"{r['confidence']:.2f} -> {r['action']} ({r['why']})" if "action" in r else "")
            for r in out["results"]
        ]
        if dry_run:
            lines.append("(dry run: nothing written)")
        return "\n".join(lines)

    ctx.emit(out, text)


@click.group("candidates")
def candidates_group() -> None:
    """Candidate memories and their queues."""


@candidates_group.command("list")
@click.option(
    "--status",
    "queues",
    multiple=True,
    type=click.Choice(CANDIDATE_QUEUES),
    help="pending (untriaged), needs_human, promoted, rejected (repeatable; default: the first two).",
)
@click.option("--project", help="Only this project.")
@click.option("--limit", type=click.IntRange(1, 1000), default=50, show_default=True, help="At most N.")
@json_option
@click.pass_obj
def candidates_list(ctx: Ctx, queues: tuple[str, ...], project: str | None, limit: int) -> None:
    """Candidates, oldest first."""
    with opened(ctx) as s:
        rows = s.candidates(queues=queues or ("pending", "needs_human"), project=project, limit=limit)

    def text() -> str:
        lines = []
        for m in rows:
            info = m.get("candidate", {})
            why = f"  -- {info['why']}" if info.get("why") else ""
            lines.append(f"{info.get('queue', '?'):<11} {memory_line(m)}{why}")
        return "\n".join(lines) or "(no candidates)"

    ctx.emit({"candidates": rows}, text)


@click.command("promote")
@click.argument("memory_id")
@click.option("--project", help="Promote into this project ('' for every project).")
@click.option("--domain", "domains", multiple=True, help="Replace the domain tags (repeatable).")
@click.option("--reason", help="Why.")
@json_option
@click.pass_obj
def promote(
    ctx: Ctx, memory_id: str, project: str | None, domains: tuple[str, ...], reason: str | None
) -> None:
    """Promote candidate MEMORY_ID to an active memory."""
    with opened(ctx) as s:
        m = s.promote(memory_id, project=project, domains=list(domains) if domains else None, reason=reason)
    warn(ctx, m)
    ctx.emit({"memory": m}, f"promoted {memory_id}")


@click.command("reject")
@click.argument("memory_id")
@click.option("--reason", required=True, help="Why it is not worth keeping.")
@json_option
@click.pass_obj
def reject(ctx: Ctx, memory_id: str, reason: str) -> None:
    """Reject candidate MEMORY_ID (it becomes invalid and stays in the log)."""
    with opened(ctx) as s:
        m = s.reject(memory_id, reason=reason)
    warn(ctx, m)
    ctx.emit({"memory": m}, f"rejected {memory_id}")


@click.command("supersede")
@click.argument("memory_id")
@click.option("--by", "by_memory", help="The memory that replaces it.")
@click.option("--reason", required=True, help="Why it no longer holds.")
@json_option
@click.pass_obj
def supersede(ctx: Ctx, memory_id: str, by_memory: str | None, reason: str) -> None:
    """Retire active memory MEMORY_ID (it stays in the log; --status superseded shows it)."""
    with opened(ctx) as s:
        m = s.supersede(memory_id, reason=reason, by_memory=by_memory)
    warn(ctx, m)
    ctx.emit({"memory": m}, f"superseded {memory_id}")


# -- decay and domains ---------------------------------------------------------------------------------------


@click.group("decay")
def decay_group() -> None:
    """Confidence decay of memories nobody references."""


@decay_group.command("run")
@click.option("--now", help="The clock to decay at (ISO 8601 or microseconds; default: now).")
@click.option("--dry-run", is_flag=True, help="Show what would be superseded; write nothing.")
@json_option
@click.pass_obj
def decay_run(ctx: Ctx, now: str | None, dry_run: bool) -> None:
    """Supersede memories whose decayed confidence fell below the floor.

    What it retires is listed on standard error before anything is written;
    `restore ID` brings one back. Pinned memories, the personal kinds, memories
    stored directly and memories a context pack included are exempt by default
    ([knowledge.decay] in config.toml).

    Example: mnemolog decay run --now 2027-06-01 --dry-run
    """
    at = parse_time(now, "--now") if now is not None else None

    def announce(retiring: list[dict[str, Any]]) -> None:
        # Before the write, so a person watching sees what goes (and can restore it after).
        verb = "would retire" if dry_run else "retiring"
        click.echo(f"decay: {verb} {len(retiring)} memor{'y' if len(retiring) == 1 else 'ies'}", err=True)
        for r in retiring:
            title = one_line(str(r.get("title") or ""), 60)
            click.echo(f"  {r['id']}  {r['kind']}  confidence {r['confidence']:.3f}  {title}", err=True)

    with opened(ctx) as s:
        out = s.decay(now=at, dry_run=dry_run, announce=announce)

    def text() -> str:
        verb = "would supersede" if dry_run else "superseded"
        exempt = ", ".join(f"{k} {n}" for k, n in out["exempt"].items() if n) or "none"
        lines = [
            f"checked {out['checked']}, exempt ({exempt}), decaying {out['decaying']}, "
            f"{verb} {out['superseded_count']}"
        ]
        lines += [f"  {r['id']}  confidence {r['confidence']:.3f}" for r in out["superseded"]]
        if out["superseded"] and not dry_run:
            lines.append("bring one back with: mnemolog restore ID")
        return "\n".join(lines)

    ctx.emit(out, text)


@click.group("domains")
def domains_group() -> None:
    """Knowledge domains: the vocabulary and the old "[domain]" prefixes."""


@domains_group.command("list")
@json_option
@click.pass_obj
def domains_list(ctx: Ctx) -> None:
    """The home's domains (the built-in ten and any configured)."""
    with opened(ctx) as s:
        names = list(s.knowledge.settings.domains)
    rows = [{"name": n, "description": DOMAIN_DESCRIPTIONS.get(n, "(configured)")} for n in names]
    ctx.emit({"domains": rows}, "\n".join(f"{r['name']:<14} {r['description']}" for r in rows))


@domains_group.command("migrate-prefixes")
@click.option("--dry-run", is_flag=True, help="Show what would change; write nothing.")
@json_option
@click.pass_obj
def domains_migrate(ctx: Ctx, dry_run: bool) -> None:
    """Move a leading "[domain]" of old content into the domains field (a recorded migration)."""
    with opened(ctx) as s:
        out = s.migrate_domain_prefixes(dry_run=dry_run)
    verb = "would change" if dry_run else "changed"
    ctx.emit(
        out,
        lambda: "\n".join(
            [f"{verb} {out['changed']} memories, skipped {out['skipped']}"]
            + [f"  {c['id']}  [{c['domain']}]" for c in out["changes"]]
        ),
    )


COMMANDS: Sequence[click.Command] = [
    project_group,
    state_group,
    capture,
    interactions_group,
    extract,
    triage,
    candidates_group,
    promote,
    reject,
    supersede,
    decay_group,
    domains_group,
]
