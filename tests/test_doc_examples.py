"""Every output README.md and docs/*.md show is one a test produces and compares.

Inventory: file:line of a shown output -> the test comparing it ("here": this module). Ids,
times, digests and dates are masked where the docs show placeholders; what the docs show
literally is compared literally.

README.md
  171-186 Quick start: the first recall finds the decision, `stored <ID>`, the second recall
          an atom (not the archived parent), `ok: N entries`              -> here (in process);
          verbatim in a clean shell: tests/test_readme.py::test_the_quick_start_runs_verbatim... (slow)
  189-190 `stored <ID>`; `--json` prints one object                          -> here
  218     `No such command 'recal'. Did you mean 'recall'?`, exit 64         -> here
  225     `log show`: seq, time, type, key id, payload                       -> here
  269     `already_stored: true`, `embedding` values  -> tests/substrate/test_idempotent_store.py,
                                                         tests/substrate/embedding/test_service.py
  344-348 `resumed: true`; the orphans' archive reason                       -> here
  361     `vault validate`: `file: field: message`, exit 65                  -> here
  409     `capture` prints its id                                            -> here
  419-432 the knowledge worked example's comments (extract, triage, candidates,
          promote, recall, what the bundle holds)                            -> here
  448     verify-bundle's "complete as of tree size N"                       -> here
  522-532 the p06 context pack        -> tests/acceptance/test_story_context.py::
                                         test_the_readme_context_example_prints_what_the_readme_shows
  639-644 the HTTP block's answers    -> tests/test_readme.py (the slow Quick start test)
  812-813 the `--json` success and error objects                             -> here
  815-828 exit codes   -> tests/test_docs.py::test_the_exit_code_table_is_the_codes_errors_carry
  828     `mnemolog: internal error (please report)`                         -> tests/cli/test_hostile_cli.py
docs/format.md
  465-480 `log prove --json`, `log consistency --json` (keys, order, types)  -> here
  493-579 the worked example (key, entries, hashes, root, checkpoint) -> tests/eventlog/test_format_doc.py
docs/forensics.md
  161, 311-315 verify-bundle's report, its JSON, the failure object          -> here
  433-441 the witness's answers; 509-513 the witness checks
      -> tests/substrate/witness/test_server.py, tests/cli/commands/test_witness.py
docs/context.md
  153-167 the pack's bytes            -> tests/projections/context/test_assemble.py::
                                         test_the_pack_docs_context_md_shows_is_what_assembly_renders
  353-357 the agent folder `vault render` writes                             -> here
  370-374 USER.md's managed region after `persona promote`                   -> here
docs/vault.md
  16-30   the layout (render's part; `_migrations/` is the runner's, `wiki/` a person's) -> here
  169-181 INDEX.md: title line and its seven sections, in order              -> here
  183-188 INDEX.md's lines: archive (superseded, archived) and promoted forms -> here
  401-402 `Snapshot created: <path>`, `Snapshot ref: ...`
          -> tests/substrate/migrations/contract.py, tests/substrate/test_format_contracts.py
docs/knowledge.md
  178-181 the rules extractor's figures (as bench/knowledge_bench.py computes them) -> here
docs/curators.md
  89-91   the atomise envelope; `already_atomised: true` (exit 1)            -> here
docs/recall.md
  197-198 `matched: false` in the recall and search answers (HTTP)          -> here
  398-412 the limits table's "refused with" (slug, exit code)                -> here
docs/robustness.md
  178-179 the orphans' archive reason and `by`                               -> here
  88-98 and the other tables: exit codes per damage -> the tests each row cites ([`tests/...`])
Not compared, and why: the benchmark figures of docs/recall.md (LoCoMo: a data set not in
the repository; latencies and rates: one machine's timings), of docs/surfaces.md and
docs/forensics.md (bench/*: timings and sizes of a run), and the command tables' prose
(behaviour, not output). Tables of fields, formats and configuration are not outputs.
"""

from __future__ import annotations

import io
import json
import re
import shlex
from pathlib import Path
from typing import Any

import cbor2
import pytest

from mnemolog.eventlog.bundle.verifier import read_members
from mnemolog.substrate.home import init_home
from tests.support.cli import Cli

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text(encoding="utf-8")
DOCS = REPO / "docs"
ULID = r"[0-9A-HJKMNP-TV-Z]{26}"
OFFLINE = {"MNEMOLOG_EMBED": "off"}  # no embedder: the examples here are about words and the loop


def doc(name: str) -> str:
    return (DOCS / name).read_text(encoding="utf-8")


def commands(block: str) -> list[tuple[list[str], str]]:
    """The commands of a ```sh block, each with its trailing `# comment` (what it shows)."""
    out, acc = [], ""
    for line in block.splitlines(keepends=True):
        acc += line
        try:
            argv = shlex.split(acc, comments=True)
        except ValueError:
            continue  # a quoted argument continues on the next line
        comment = acc.rsplit("  # ", 1)[1].strip() if "  # " in acc else ""
        out.append((argv, comment))
        acc = ""
    return out


@pytest.fixture
def home(tmp_path: Path) -> Path:
    h = tmp_path / "home"
    init_home(h)
    return h


# README.md:189 and 811: `stored <ID>`, and one `{"ok": ...}` object with --json.


def test_store_prints_stored_and_the_id_and_json_prints_one_object(cli: Cli, home: Path) -> None:
    assert "`mnemolog store` prints `stored <ID>`" in README
    ran = cli(home, "store", "Prefer pg_repack over ALTER TABLE for large tables", env=OFFLINE)
    code, out = ran.code, ran.stdout
    assert code == 0 and re.fullmatch(rf"stored ({ULID})\n", out), out
    ran = cli(home, "store", "Raise the pool with the workers", json=True, env=OFFLINE)
    code, obj = ran.code, ran.single
    assert code == 0 and obj["ok"] is True


def test_the_json_error_object_is_the_one_the_readme_shows(cli: Cli, home: Path) -> None:
    shown = re.search(r'`(\{"ok": false, "error": SLUG, [^`]*\})`', README)
    assert shown is not None
    keys = re.findall(r'"(\w+)":', shown.group(1))
    assert keys == ["ok", "error", "message", "exit_code", "details"]
    ran = cli(home, "get", "01ARZ3NDEKTSV4RRFFQ69G5FAV", json=True, env=OFFLINE)
    code, obj = ran.code, ran.single
    assert list(obj) == keys
    assert obj["ok"] is False and obj["exit_code"] == code == 2
    assert obj["error"] == "not_found" and isinstance(obj["message"], str)
    assert isinstance(obj["details"], dict)


# README.md:420-432: the knowledge loop's worked example, run as written; its comments are the claims.


def readme_knowledge_example() -> list[tuple[list[str], str]]:
    start = README.index("A worked example: knowledge earned on one project reaches another.")
    block = re.search(r"```sh\n(.*?)```", README[start:], re.S)
    assert block is not None
    return commands(block.group(1))


def test_the_readme_knowledge_example_does_what_its_comments_say(
    cli: Cli, home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # the bundle is written to the working directory
    outputs: dict[str, str] = {}
    chosen = ""
    for argv, comment in readme_knowledge_example():
        assert argv[0] == "mnemolog"
        args = [a.replace("<ID>", chosen) for a in argv[1:]]
        ran = cli(home, *args, env=OFFLINE)
        code, out = ran.code, ran.stdout
        assert code == 0, (args, out)
        outputs[args[0]] = out
        if args[0] == "candidates":
            (row,) = out.splitlines()  # one candidate waits for a person: the lesson
            chosen = row.split()[1]
        if comment:
            outputs[args[0] + "#"] = comment
    # extract: "a p04 decision candidate and a [materials] one, project empty"
    rows = outputs["extract"].splitlines()[1:]
    assert len(rows) == 2, outputs["extract"]
    assert re.match(rf"\s+{ULID}\s+project\s+p04-gigabit\s+CTE gradient analysis", rows[0]), rows
    assert re.match(rf"\s+{ULID}\s+domain\s+materials\s+Zerodur CTE gradient", rows[1]), rows
    # triage: "the labelled decision is promoted; the lesson waits for a person"
    decision, lesson = outputs["triage"].splitlines()
    assert re.match(rf"{ULID}: promote [\d.]+ -> promote \(promoted", decision), decision
    assert re.match(rf"{ULID}: needs_human [\d.]+ -> wait \(", lesson), lesson
    assert lesson.startswith(chosen) and "Zerodur" in outputs["candidates"]
    assert "needs_human" in outputs["candidates"]
    assert outputs["promote"] == f"promoted {chosen}\n"
    # recall --domain materials: "working on p06: there it is"
    assert chosen in outputs["recall"] and "Zerodur CTE gradient dominates" in outputs["recall"]
    # the bundle: "holds the interaction, the candidate, the verdict, the promotion"
    m = re.match(r"wrote (bundle-\S+\.tar) ", outputs["export-forensic-bundle"])
    assert m is not None, outputs["export-forensic-bundle"]
    members = read_members(tmp_path / m.group(1))
    stream = io.BytesIO(members["entries.cbor"])
    types = set()
    while stream.tell() < len(members["entries.cbor"]):
        types.add(cbor2.load(stream)["type"])
    assert {"interaction.captured", "candidate.triaged", "memory.promoted"} <= types, types
    assert any(t.startswith("candidate.") and t != "candidate.triaged" for t in types), types


# docs/format.md:467 and 477: the JSON of `log prove` and `log consistency`.


def shown_json(text: str, after: str) -> dict[str, Any]:
    block = re.search(r"```json\n(.*?)```", text[text.index(after) :], re.S)
    assert block is not None
    obj: dict[str, Any] = json.loads(block.group(1).replace("\n", " "))
    return obj


def same_shape(shown: dict[str, Any], got: dict[str, Any]) -> None:
    """Same keys in the same order; a `<placeholder>` stands for any string, numbers for any int."""
    assert list(got) == list(shown), (list(got), list(shown))
    for k, v in shown.items():
        if isinstance(v, bool):
            assert got[k] is v
        elif isinstance(v, int):
            assert isinstance(got[k], int) and not isinstance(got[k], bool)
        elif isinstance(v, list):
            assert isinstance(got[k], list) and all(isinstance(x, str) for x in got[k])
        else:
            assert isinstance(got[k], str) and got[k]


def test_log_prove_and_consistency_print_the_json_format_md_shows(cli: Cli, home: Path) -> None:
    text = doc("format.md")
    for i in range(5):
        assert cli(home, "store", f"memory number {i} for the proofs", env=OFFLINE).code == 0
    ran = cli(home, "log", "prove", "3", json=True, env=OFFLINE)
    code, prove = ran.code, ran.single
    assert code == 0
    same_shape(shown_json(text, "`mnemolog --json log prove SEQ` prints"), prove)
    assert prove["seq"] == 3 and prove["checkpoint"].endswith("\n")
    assert prove["checkpoint"].splitlines()[1] == str(prove["tree_size"])
    ran = cli(home, "log", "consistency", "2", "6", json=True, env=OFFLINE)
    code, cons = ran.code, ran.single
    assert code == 0
    same_shape(shown_json(text, "`mnemolog --json log consistency OLD NEW` prints"), cons)
    assert (cons["old_size"], cons["new_size"]) == (2, 6) and cons["proof"]


# docs/knowledge.md:180-183: the rules extractor's figures, as bench/knowledge_bench.py computes them.


def test_the_extraction_figures_are_what_the_bench_computes() -> None:
    from mnemolog.curators.knowledge.extract_rules import RulesExtractor
    from tests.support.extraction_labels import DATA, load, score

    text = doc("knowledge.md")
    figures = r" (\d+) \| (\d+) \| (\d+) \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \|$"
    rows = re.findall(r"^\| (labelled|held out)[^|]*\|" + figures, text, re.M)
    assert [r[0] for r in rows] == ["labelled", "held out"]
    rules = RulesExtractor()
    # As bench/knowledge_bench.py's extraction_quality, which prints the figures.
    for row, path in zip(rows, (DATA, DATA.with_name("extraction_heldout.json")), strict=True):
        items = load(path)
        g = score(items, lambda i: rules.extract(i).candidates).to_json()
        assert [int(x) for x in row[1:4]] == [len(items), g["expected"], g["proposed"]], (row, g)
        shown = [row[4], row[5], row[6]]
        assert shown == [f"{g[k]:.2f}" for k in ("precision", "recall", "domain_accuracy")], (row, g)


# docs/vault.md:18-30 and 171-181, docs/context.md:352-374: what `vault render` writes.


def code_block_after(text: str, after: str) -> str:
    block = re.search(r"```\n(.*?)```", text[text.index(after) :], re.S)
    assert block is not None
    return block.group(1)


def test_vault_render_writes_the_folders_and_index_the_docs_show(
    cli: Cli, home: Path, tmp_path: Path
) -> None:
    for content, kind in (
        ("Pool size must match workers", "feedback"),
        ("Prefer pg_repack over ALTER TABLE", "decision"),
        ("Antoine prefers short answers", "user"),
        ("Zerodur CTE gradient dominates WFE", "knowledge"),
    ):
        assert cli(home, "store", content, "--kind", kind, env=OFFLINE).code == 0
    role = "Mechanical/optical engineer at Atomaste"
    ran = cli(home, "store", role, "--kind", "user", "--title", "role", env=OFFLINE)
    code, out = ran.code, ran.stdout
    assert code == 0
    memory_id = out.split()[1]
    assert (
        cli(
            home, "capture", "--prompt", "What did the thermal study show?", "--response", "CTE.", env=OFFLINE
        ).code
        == 0
    )
    assert cli(home, "extract", "--pending", env=OFFLINE).code == 0  # a run: the run log of the day
    promote = ("persona", "promote", memory_id, "--file", "USER.md", "--section", "Role and context")
    assert cli(home, *promote, env=OFFLINE).code == 0
    root = tmp_path / "vault"
    ran = cli(home, "vault", "render", str(root), "--agent", "ada", env=OFFLINE)
    code, out = ran.code, ran.stdout
    assert code == 0, out
    agent = root / "ada"

    # docs/vault.md's layout: the part render writes (not _migrations/, not wiki/).
    layout = code_block_after(doc("vault.md"), "## Layout")
    for name in (".mnemolog-vault.json", "memory/", "INDEX.md"):
        assert name in layout
    assert (agent / ".mnemolog-vault.json").is_file() and (agent / "memory" / "INDEX.md").is_file()
    for note in (agent / "memory").glob("*.md"):
        assert note.name == "INDEX.md" or re.fullmatch(r"[a-z]+_[a-z0-9_]+\.md", note.name), note.name

    # docs/vault.md's INDEX.md: its title line and its seven sections, in order.
    shown = code_block_after(doc("vault.md"), "### INDEX.md")
    index = (agent / "memory" / "INDEX.md").read_text()
    assert index.splitlines()[0] == shown.splitlines()[0].replace("<agent>", "ada")
    shown_sections = [re.split(r"\s{2,}", line)[0] for line in shown.splitlines() if line.startswith("## ")]
    assert [line for line in index.splitlines() if line.startswith("## ")] == shown_sections
    assert len(shown_sections) == 7

    # docs/context.md's agent folder.
    tree = code_block_after(doc("context.md"), "## 10. The agent folder")
    persona = re.search(r"├── (.*)\n", tree)
    assert persona is not None
    for name in persona.group(1).split():
        assert (agent / name).is_file(), name
    (journal,) = list((agent / "journal").glob("*/*.md"))
    day = r"\d{4}-\d{2}/\d{4}-\d{2}-\d{2}"
    assert re.fullmatch(day + r"\.md", journal.relative_to(agent / "journal").as_posix())
    (runlog,) = list((agent / "logs").glob("*/*.jsonl"))
    assert re.fullmatch(day + r"\.jsonl", runlog.relative_to(agent / "logs").as_posix())
    assert ".mnemolog-agentfiles.json" in tree and (agent / ".mnemolog-agentfiles.json").is_file()

    # docs/context.md's managed region, the date, digest and note's file name masked.
    region = code_block_after(doc("context.md"), "mnemolog keeps one *managed region*")
    pattern = re.escape(region)
    pattern = re.sub(r"sha256=[0-9a-f]{16}", "sha256=[0-9a-f]{16}", pattern)
    pattern = pattern.replace(re.escape("2026-05-06"), r"\d{4}-\d{2}-\d{2}")
    pattern = pattern.replace(re.escape("user_role.md"), r"user_\w+\.md")
    assert re.search(pattern, (agent / "USER.md").read_text()), (agent / "USER.md").read_text()


# README.md:342-347: an atomisation killed part way; the JSON and the archive reason it shows.


class Killed(BaseException):
    """The process dying between two appends (BaseException: nothing on the way catches it)."""


def killed_atomise(home: Path, mid: str, monkeypatch: pytest.MonkeyPatch, when: str, budget: int) -> None:
    from mnemolog.substrate import session as sm
    from mnemolog.substrate.api import Substrate

    real = sm.Session.append_many
    seen = {"atoms": 0}

    def append_many(self: Any, payloads: Any) -> Any:
        out = real(self, payloads)
        for p in payloads:
            if type(p).__name__ == "MemoryStored" and getattr(p, "atom_of", None):
                seen["atoms"] += 1
                if when == "atoms:3" and seen["atoms"] == 3:
                    raise Killed
            if type(p).__name__ == "AtomisationCompleted" and when == "completed":
                raise Killed
        return out

    with monkeypatch.context() as m:
        m.setattr(sm.Session, "append_many", append_many)
        with pytest.raises(Killed), Substrate.open(home, long_lived=False, worker=False) as s:
            s.atomise(mid, curator="rules", max_atom_tokens=budget)


def test_an_interrupted_atomisation_resumes_as_the_readme_says(
    cli: Cli, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mnemolog.eventlog.store.log import Log
    from tests.support.long_texts import LONG_POST_MORTEM

    section = README[README.index("An atomisation killed part way") :][:800]
    assert "the JSON says `resumed: true`" in section
    shown_reason = re.search(r"with the reason `([^`]+)`", section)
    assert shown_reason is not None
    monkeypatch.setenv("MNEMOLOG_EMBED", "off")

    # A completion without the parent's archive: the next run writes it, `resumed: true`.
    ran = cli(home, "store", LONG_POST_MORTEM, env=OFFLINE)
    code, out = ran.code, ran.stdout
    mid = out.split()[1]
    killed_atomise(home, mid, monkeypatch, "completed", 200)
    ran = cli(home, "atomise", mid, "--curator", "rules", json=True, env=OFFLINE)
    code, env = ran.code, ran.single
    assert code == 0 and env["resumed"] is True, env

    # Atoms no completion lists, and a curator giving others: those are archived, with the reason shown.
    other = home
    mid = cli(other, "store", LONG_POST_MORTEM + "\nA second copy.", env=OFFLINE).stdout.split()[1]
    killed_atomise(other, mid, monkeypatch, "atoms:3", 200)
    ran = cli(other, "atomise", mid, "--curator", "rules", "--max-atom-tokens", "120", json=True, env=OFFLINE)
    code, env = ran.code, ran.single
    assert code == 0 and len(env["archived_orphan_ids"]) == 3, env
    with Log(other / "log") as log:
        archived = [e.data for e in log.iter_entries(0) if e.type == "memory.archived"]
    reasons = {d["id"]: d.get("reason") for d in archived}
    archived_by = {d["id"]: d.get("by") for d in archived}
    robustness = " ".join(doc("robustness.md").split())
    also = re.search(r"archived once, by `(\w+)`, with the reason `([^`]+)`", robustness)
    assert also is not None
    for shown in (shown_reason.group(1), also.group(2)):  # README.md:347, docs/robustness.md:178
        pattern = re.escape(" ".join(shown.split())).replace(re.escape("<parent id>"), ULID)
        for orphan in env["archived_orphan_ids"]:
            assert re.fullmatch(pattern, reasons[orphan]), reasons[orphan]
    assert {archived_by[orphan] for orphan in env["archived_orphan_ids"]} == {also.group(1)}


# README.md:448 and docs/forensics.md:161, 311-315: what verify-bundle reports.


def test_verify_bundle_reports_what_forensics_md_says(cli: Cli, home: Path, tmp_path: Path) -> None:
    forensics = " ".join(doc("forensics.md").split())
    assert "The report then says **complete as of tree size L**." in forensics
    assert 'so the report can say "complete as of tree size N"' in README
    mid = cli(home, "store", "The pool was exhausted", env=OFFLINE).stdout.split()[1]
    assert cli(home, "update", mid, "--tag", "incident", env=OFFLINE).code == 0
    bundle = tmp_path / "b.tar"
    assert cli(home, "export-forensic-bundle", "--memory-id", mid, "-o", str(bundle), env=OFFLINE).code == 0
    ran = cli(home, "verify-bundle", str(bundle), env=OFFLINE)
    code, out = ran.code, ran.stdout
    assert code == 0 and re.search(r"^complete\s+as of tree size \d+\b", out, re.M), out
    ran = cli(home, "verify-bundle", str(bundle), json=True, env=OFFLINE)
    code, report = ran.code, ran.single
    # "with the memory, the memory set, the checkpoint and its signer, the trust anchor, the
    # entries' seqs, the envelopes, the files, the context packs checked and the list of checks"
    assert '`--json` prints `{"ok": true, ...}` with the memory, the memory set, the checkpoint' in forensics
    assert report["ok"] is True and report["memory_id"] == mid and report["memories"] == [mid]
    for key in (
        "tree_size",
        "root",
        "checkpoint_key",
        "trust",
        "seqs",
        "envelopes",
        "files",
        "packs",
        "checks",
    ):
        assert key in report, key
    assert "completeness" in report["checks"]
    # "a failure prints the error object ... ({"ok": false, "error", "message", "exit_code", "details"})"
    shown = re.search(r'\(`\{"ok": false, ("\w+"(?:, "\w+")*)\}`\)', forensics)
    assert shown is not None
    bad = tmp_path / "bad.tar"
    data = bytearray(bundle.read_bytes())
    data[len(data) // 2] ^= 1
    bad.write_bytes(bytes(data))
    ran = cli(home, "verify-bundle", str(bad), json=True, env=OFFLINE)
    code, failure = ran.code, ran.single
    assert code == 8 and failure["ok"] is False
    assert list(failure) == ["ok", *re.findall(r'"(\w+)"', shown.group(1))]


# docs/recall.md:398-412: the limits table, each row's "refused with" (error slug and exit code).

UNKNOWN = "01ARZ3NDEKTSV4RRFFQ69G5FAV"
LIMIT_CASES: dict[str, list[tuple[str, ...]]] = {
    "content": [("store", " "), ("store", "x" * (256 * 1024 + 1))],
    "title": [("store", "x", "--title", "t" * 513)],
    "tags": [("store", "x", "--tag", "two words")],
    "metadata": [("store", "x", "--meta", "[1]"), ("store", "x", "--meta", '{"n": 18446744073709551616}')],
    "source": [("store", "x", "--source", "s" * 2049)],
    "confidence": [("store", "x", "--confidence", "2")],
    "namespace": [("store", "x", "--namespace", "a//b")],
    "kind, relation": [
        ("store", "x", "--kind", "nonsense"),
        ("link", UNKNOWN, UNKNOWN, "--relation", "nope"),
    ],
    "limit": [("recall", "x", "--limit", "0"), ("recall", "x", "--limit", "1001")],
    "query": [("recall", " ")],
    "unknown id": [("get", UNKNOWN)],
}


def test_the_limits_table_is_what_the_commands_refuse_with(cli: Cli, home: Path) -> None:
    text = doc("recall.md")
    table = text[text.index("## Limits") :].split("\n\n", 2)[1]
    rows = re.findall(r"^\| ([^|]+?) \|[^|]*\| (`.*) \|$", table, re.M)
    assert [r[0] for r in rows] == list(LIMIT_CASES)  # a new row needs its case here
    for what, cell in rows:
        shown = {(slug, int(code)) for slug, code in re.findall(r"`(\w+)` \((\d+)\)", cell)}
        got = set()
        for args in LIMIT_CASES[what]:
            ran = cli(home, *args, json=True, env=OFFLINE)
            code, err = ran.code, ran.single
            assert err["exit_code"] == code, err
            got.add((err["error"], code))
        assert got == shown, (what, got, shown)


# docs/curators.md:89-91: the result envelope and a second run.


def test_the_atomise_envelope_is_the_one_curators_md_shows(cli: Cli, home: Path) -> None:
    from tests.support.long_texts import LONG_POST_MORTEM

    text = " ".join(doc("curators.md").split())
    shown = re.search(r"A run returns `\{([\w, ]+)\}`", text)
    assert shown is not None and "`already_atomised: true` (exit 1, informational)" in text
    keys = [k.strip() for k in shown.group(1).split(",")]
    mid = cli(home, "store", LONG_POST_MORTEM, env=OFFLINE).stdout.split()[1]
    ran = cli(home, "atomise", mid, "--curator", "rules", json=True, env=OFFLINE)
    code, env = ran.code, ran.single
    assert code == 0 and env["ok"] is True
    assert set(keys) <= set(env), (keys, list(env))
    assert env["atom_count"] == len(env["atom_ids"]) > 0 and env["source_id"] == mid
    ran = cli(home, "atomise", mid, "--curator", "rules", json=True, env=OFFLINE)
    code, again = ran.code, ran.single
    assert code == 1 and again["already_atomised"] is True and again["atom_ids"] == env["atom_ids"]


# README.md:176-186, in process: the Quick start's commands after `make demo`, and what their comments say.
# (tests/test_readme.py runs the block verbatim in a clean shell, marked slow; this is the fast check.)


def test_the_quick_start_commands_print_what_the_readme_says(
    cli: Cli, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    start = README.index("\n## Quick start\n")
    block = re.search(r"```sh\n(.*?)```", README[start:], re.S)
    assert block is not None
    lines = [ln for ln in block.group(1).splitlines() if ln.startswith(("mnemolog ", "ID="))]
    assert [ln.split()[1] for ln in lines] == ["init", "store", "recall", "store", "atomise", "recall", "log"]
    monkeypatch.chdir(REPO)  # examples/post-mortem.txt
    memory_id = ""
    outs = []
    for line in lines[1:]:
        if line.startswith("ID="):
            m = re.fullmatch(r"ID=\$\((mnemolog store - .*) < (\S+) \| cut -d\' \' -f2\)", line)
            assert m is not None, line
            argv = shlex.split(m.group(1))[1:]
            r = cli(home, *argv, stdin=(REPO / m.group(2)).read_text(), env=OFFLINE)
            assert r.code == 0 and re.fullmatch(rf"stored {ULID}\n", r.stdout), r.stdout
            memory_id = r.stdout.split(" ")[1].strip()  # `cut -d' ' -f2`
            continue
        comment = line.split("  # ", 1)[1] if "  # " in line else ""
        argv = shlex.split(line.replace('"$ID"', memory_id), comments=True)[1:]
        ran = cli(home, *argv, env=OFFLINE)
        code, out = ran.code, ran.stdout
        assert code == 0, (argv, out)
        outs.append((argv, comment, out))
    (_, _, stored), (_, _, first), (_, _, atomised), (_, comment, second), (_, _, verified) = outs
    assert re.fullmatch(rf"stored {ULID}\n", stored)
    assert "Prefer pg_repack over ALTER TABLE" in first.splitlines()[0]  # the decision, first
    assert memory_id in atomised and "atomised" in atomised
    assert comment == "an atom, not the archived parent"
    hits = [row.split()[1] for row in second.splitlines()]
    assert hits and memory_id not in hits  # the parent is archived: not among the hits
    assert all("atom-of:" in row for row in second.splitlines()), second
    assert re.match(r"ok: \d+ entries", verified), verified


# README.md (command tables): `log show` prints "seq, time, type, key id, payload"; `vault validate`
# prints every problem "as `file: field: message`"; `capture` prints the interaction's id.


def test_log_show_vault_validate_and_capture_print_what_the_tables_say(
    cli: Cli, home: Path, tmp_path: Path
) -> None:
    assert "| print entries (seq, time, type, key id, payload) |" in README
    assert "every problem printed as `file: field: message`; exit 65 when any is an error" in README
    assert "record an interaction and print its id" in README
    ran = cli(home, "capture", "--prompt", "Why did checkout fail?", "--response", "The pool.", env=OFFLINE)
    code, out = ran.code, ran.stdout
    assert code == 0 and re.fullmatch(rf"{ULID}\n", out), out
    ran = cli(home, "log", "show", "--type", "interaction.captured", env=OFFLINE)
    code, out = ran.code, ran.stdout
    assert code == 0
    (row,) = out.splitlines()
    m = re.fullmatch(r"\s*(\d+)\s+(\d{4}-\d\d-\d\dT[\d:.]+Z)\s+(\S+)\s+([0-9a-f]{16})\s+(\{.*)", row)
    assert m is not None and m.group(3) == "interaction.captured", row
    root = tmp_path / "vault"
    assert cli(home, "vault", "render", str(root), "--agent", "ada", env=OFFLINE).code == 0
    (root / "ada" / "memory" / "feedback_stray.md").write_text("no frontmatter\n")
    ran = cli(home, "vault", "validate", str(root), env=OFFLINE)
    code, out = ran.code, ran.stdout
    assert code == 65 and out.splitlines(), out
    for line in out.splitlines():
        assert re.fullmatch(r"ada/memory/feedback_stray\.md: [\w.-]+: .+", line), line


# README.md:218: a mistyped command, the message quoted literally.


def test_a_mistyped_command_prints_the_message_the_readme_quotes(cli: Cli, home: Path) -> None:
    shown = re.search(r"\(`(No such command 'recal'\. Did you mean 'recall'\?)`, exit 64\)", README)
    assert shown is not None
    r = cli(home, "recal", "x")
    assert r.code == 64 and shown.group(1) in r.stderr, r.stderr


# docs/vault.md:183-188: INDEX.md's lines, in the archive and the promoted section.


def test_the_index_lines_are_the_ones_vault_md_shows(cli: Cli, home: Path, tmp_path: Path) -> None:
    text = " ".join(doc("vault.md").split())
    assert "``- [`Title`](feedback_debt_priority_order.md) — hook``" in text
    forms = re.search(
        r"in the archive it is `(superseded by <file>, <captured date of the newer>)` or "
        r"`(archived <last_seen>: <hook>)`; in the promoted section `(promoted <date> from <file>)`",
        text,
    )
    assert forms is not None
    old = cli(home, "store", "Old pool rule", "--kind", "decision", env=OFFLINE).stdout.split()[1]
    new = cli(home, "store", "New pool rule", "--kind", "decision", env=OFFLINE).stdout.split()[1]
    gone = cli(
        home, "store", "Archived thing", "--kind", "reference", "--title", "Arch", env=OFFLINE
    ).stdout.split()[1]
    tea = cli(home, "store", "Likes tea", "--kind", "user", env=OFFLINE).stdout.split()[1]
    assert cli(home, "link", new, old, "--relation", "supersedes", env=OFFLINE).code == 0
    assert cli(home, "archive", gone, env=OFFLINE).code == 0
    assert cli(home, "persona", "promote", tea, env=OFFLINE).code == 0
    assert cli(home, "vault", "render", str(tmp_path / "v"), "--agent", "ada", env=OFFLINE).code == 0
    lines = (tmp_path / "v" / "ada" / "memory" / "INDEX.md").read_text().splitlines()
    date = r"\d{4}-\d{2}-\d{2}"
    masks = {
        "<file>": r"\w+\.md",
        "<captured date of the newer>": date,
        "<last_seen>": date,
        "<date>": date,
        "<hook>": "Archived thing",
    }

    def line(title: str, form: str) -> str:
        pattern = re.escape(form)
        for placeholder, mask in masks.items():
            pattern = pattern.replace(re.escape(placeholder), mask)
        return rf"- \[`{re.escape(title)}`\]\(\w+\.md\) — {pattern}"

    for title, form in (("Old pool rule", 1), ("Arch", 2), ("Likes tea", 3)):
        assert any(re.fullmatch(line(title, forms.group(form)), x) for x in lines), (title, lines)
    assert (
        "- [`Old pool rule`](decision_old_pool_rule.md) — superseded by decision_new_pool_rule.md, "
        in "\n".join(lines)
    )


# docs/recall.md:197-198: the HTTP (and MCP: one operations module) answers carry `matched: false`.


def test_recall_and_search_answers_say_matched_false_when_nothing_matched(cli: Cli, home: Path) -> None:
    from starlette.testclient import TestClient

    from mnemolog.cli.agents import http_api
    from mnemolog.substrate.api import Substrate

    text = " ".join(doc("recall.md").split())
    assert "and `memory_search` carry `matched: false` when nothing matched." in text
    assert cli(home, "store", "Prefer pg_repack over ALTER TABLE for large tables", env=OFFLINE).code == 0
    with Substrate.open(home, long_lived=False) as s:
        client = TestClient(http_api.app(s, http_api.HttpSettings()), base_url="http://127.0.0.1")
        for route in ("/recall", "/search"):
            hit = client.post(route, json={"query": "pg_repack"})
            miss = client.post(route, json={"query": "zebra"})
            assert hit.status_code == miss.status_code == 200, (hit.text, miss.text)
            assert hit.json()["matched"] is True and hit.json()["results"]
            assert miss.json()["matched"] is False and miss.json()["results"] == []
