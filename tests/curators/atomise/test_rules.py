"""The rules curator: sentence heuristics, the envelope, budgets and hostile input."""

from __future__ import annotations

import re
import time

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from mnemolog.curators.atomise.rules import MAX_SOURCE_TOKENS, RulesCurator, _blocks, _sections
from mnemolog.curators.base import CurationResult, Curator, CuratorFailed, SourceTooSmall
from mnemolog.curators.tokens import (
    MAX_ATOM_TOKENS,
    MIN_ATOM_TOKENS,
    count_tokens,
    tolerated_tokens,
)
from mnemolog.eventlog.errors import UsageError
from tests.support.long_texts import LONG_POST_MORTEM

RULES = RulesCurator()


def atoms(text: str, **kw: int) -> list[str]:
    return [a.text for a in RULES.curate(text, **kw).atoms]


def _heading_chars(text: str) -> set[int]:
    out: set[int] = set()
    for block in _blocks(text):
        if block.kind == "heading":
            out.update(range(block.start, block.end))
    return out


def _occurrence(text: str, atom: str, start: int, headings: set[int]) -> int:
    """Where `atom` stands in `text` from `start`: the first place it is more than heading text.

    An atom's words may also stand inside an earlier heading (a heading that
    repeats its section's first sentence); the atom is the body's copy.
    """
    first = found = text.find(atom, start)
    while found >= 0:
        if any(c not in headings for c in range(found, found + len(atom)) if re.match(r"\w", text[c])):
            return found
        found = text.find(atom, found + 1)
    return first


def check_result(text: str, result: CurationResult, budget: int) -> None:
    """The invariants every successful rules curation satisfies."""
    assert 2 <= len(result.atoms) <= 10
    selected = any(w.startswith("selected ") for w in result.warnings)
    blocks = _blocks(text)
    of_block, contexts = _sections(text, blocks)
    headings = _heading_chars(text)
    position = 0
    for atom in result.atoms:
        assert atom.text, "no empty atoms"
        assert atom.text == atom.text.strip()
        assert atom.tokens == count_tokens(atom.text)
        assert atom.tokens <= tolerated_tokens(budget)
        assert atom.over_budget == (atom.tokens > budget)
        # Verbatim, in order, non-overlapping.
        found = _occurrence(text, atom.text, position, headings)
        assert found >= 0, f"atom is not a verbatim slice of the source: {atom.text!r}"
        end = found + len(atom.text)
        # Never only a heading, never two sections. An atom with no word character at all (the
        # last symbol of a prose run cut at the token budget) is judged by its visible characters.
        visible = [c for c in range(found, end) if not text[c].isspace()]
        words = [c for c in visible if re.match(r"\w", text[c])]
        assert any(c not in headings for c in (words or visible)), atom.text
        inside = {of_block[i] for i, b in enumerate(blocks) if b.start < end and b.end > found}
        assert len(inside) == 1, f"atom spans sections {inside}: {atom.text!r}"
        assert atom.context == contexts[inside.pop()]
        assert atom.title and len(atom.title) <= 80
        assert not re.search(r"[\x00-\x1f\x7f]", atom.title), atom.title
        position = end
    # Nothing with a letter or digit is lost between atoms but headings (the
    # atoms' context), unless the curator says it selected.
    if not selected:
        position = 0
        for atom in result.atoms:
            found = _occurrence(text, atom.text, position, headings)
            for c in range(position, found):
                assert c in headings or not re.match(r"\w", text[c]), f"content outside every atom at {c}"
            position = found + len(atom.text)
        for c in range(position, len(text)):
            assert c in headings or not re.match(r"\w", text[c]), f"content outside every atom at {c}"
    else:
        assert all(not a.over_budget for a in result.atoms), "selection stays within the budget"
    assert result.curator == "rules"
    assert result.model is None
    assert result.prompt_sha256 is None
    assert result.attempts == 1
    assert result.responses == ()
    assert result.dropped == ()
    assert result.input_tokens == count_tokens(text)
    assert result.output_tokens == sum(a.tokens for a in result.atoms)


# -- the protocol ------------------------------------------------------------------------


def test_rules_curator_satisfies_the_protocol() -> None:
    assert isinstance(RULES, Curator)
    assert (RULES.name, RULES.model) == ("rules", None)


def test_two_sentences_give_two_verbatim_atoms() -> None:
    text = "The backup failed on Monday night. The team restored it from the replica."
    result = RULES.curate(text)
    assert [a.text for a in result.atoms] == [
        "The backup failed on Monday night.",
        "The team restored it from the replica.",
    ]
    check_result(text, result, 200)


# -- sentence boundaries -----------------------------------------------------------------


def test_abbreviations_initials_and_acronyms_do_not_end_sentences() -> None:
    text = (
        "Dr. Smith met Mr. Jones near St. Mary's church. "
        "J. R. Tolkien served in the U.S. Army, e.g. in France. "
        "The note cites No. 5 and Fig. 2 as evidence. "
        "The release was on Jan. 3 at 5 p.m. The next day was calm."
    )
    assert atoms(text) == [
        "Dr. Smith met Mr. Jones near St. Mary's church.",
        "J. R. Tolkien served in the U.S. Army, e.g. in France.",
        "The note cites No. 5 and Fig. 2 as evidence.",
        "The release was on Jan. 3 at 5 p.m.",
        "The next day was calm.",
    ]


def test_decimals_versions_and_domains_do_not_end_sentences() -> None:
    text = (
        "Latency rose by 3.5 ms after version v1.2.3 shipped. "
        "The status page at status.example.com stayed green for 0.75 hours."
    )
    assert atoms(text) == [
        "Latency rose by 3.5 ms after version v1.2.3 shipped.",
        "The status page at status.example.com stayed green for 0.75 hours.",
    ]


def test_lowercase_after_a_period_continues_the_sentence() -> None:
    text = "Costs rose vs. last year, i.e. more than planned. The budget was revised in May."
    assert atoms(text) == [
        "Costs rose vs. last year, i.e. more than planned.",
        "The budget was revised in May.",
    ]


def test_question_and_exclamation_marks_and_closing_quotes() -> None:
    text = 'Did the alert fire at all? The pager stayed silent! "Check the routing rules." The fix went out.'
    assert atoms(text) == [
        "Did the alert fire at all?",
        "The pager stayed silent!",
        '"Check the routing rules."',
        "The fix went out.",
    ]


# -- lines, lists, headings --------------------------------------------------------------


def test_soft_wrapped_lines_stay_one_sentence() -> None:
    text = (
        "This paragraph is soft wrapped at about seventy columns, as\n"
        "plain-text notes often are, and the sentence continues on the next\n"
        "line until it finally ends here. A second sentence follows it."
    )
    assert atoms(text) == [
        "This paragraph is soft wrapped at about seventy columns, as\n"
        "plain-text notes often are, and the sentence continues on the next\n"
        "line until it finally ends here.",
        "A second sentence follows it.",
    ]


def test_short_lines_are_lines_of_their_own() -> None:
    text = "Host: db1 in rack four\nPort: 5432 for the primary\nOwner: the storage team"
    assert atoms(text) == [
        "Host: db1 in rack four",
        "Port: 5432 for the primary",
        "Owner: the storage team",
    ]


def test_list_items_stay_with_their_lead_in() -> None:
    text = (
        "The runbook has three steps:\n"
        "- restart the worker\n"
        "- drain the queue\n"
        "- page the on-call engineer\n"
        "\n"
        "After that, the incident was closed by the storage team."
    )
    assert atoms(text) == [
        "The runbook has three steps:\n- restart the worker\n- drain the queue\n- page the on-call engineer",
        "After that, the incident was closed by the storage team.",
    ]


@pytest.mark.parametrize("marker", ["1.", "2)", "(a)", "*", "•", "+"])
def test_list_markers(marker: str) -> None:
    text = f"{marker} Install the package with pip.\n{marker} Run the migration script now."
    assert atoms(text) == [
        f"{marker} Install the package with pip.",
        f"{marker} Run the migration script now.",
    ]


def test_indented_lines_continue_a_list_item() -> None:
    text = (
        "- The first item is long enough that it wraps onto\n"
        "  a second, indented line of its own.\n"
        "- The second item is short."
    )
    assert atoms(text) == [
        "- The first item is long enough that it wraps onto\n  a second, indented line of its own.",
        "- The second item is short.",
    ]


def test_a_heading_joins_what_follows() -> None:
    text = "# Incident 42\nThe disk filled up on db1. The nightly job failed afterwards."
    assert atoms(text) == [
        "# Incident 42\nThe disk filled up on db1.",
        "The nightly job failed afterwards.",
    ]


def test_blank_lines_and_separators_split_blocks() -> None:
    text = "The first block ends without a period\n\n---\n\nThe second block starts here"
    assert atoms(text) == ["The first block ends without a period", "The second block starts here"]


# -- gluing fragments ----------------------------------------------------------------------


def test_pronoun_openings_join_the_sentence_before() -> None:
    text = (
        "The cache was cold after the deploy. It took five minutes to warm up. "
        "The index was rebuilt overnight."
    )
    assert atoms(text) == [
        "The cache was cold after the deploy. It took five minutes to warm up.",
        "The index was rebuilt overnight.",
    ]


def test_fragments_join_their_neighbour() -> None:
    text = "The migration finished at noon. Done. The replica caught up an hour later."
    assert atoms(text) == [
        "The migration finished at noon. Done.",
        "The replica caught up an hour later.",
    ]


def test_gluing_never_leaves_fewer_than_two_atoms() -> None:
    text = "The deploy failed at noon. It was rolled back."
    assert atoms(text) == ["The deploy failed at noon.", "It was rolled back."]


def test_gluing_respects_the_budget() -> None:
    first = "The deploy " + "really " * 40 + "failed."
    text = first + " It " + "was " * 20 + "rolled back. The team met."
    result = RULES.curate(text, max_atom_tokens=50)
    check_result(text, result, 50)
    assert all(not a.over_budget for a in result.atoms)


# -- the envelope ----------------------------------------------------------------------------


def sentences(n: int, words: int = 6) -> str:
    return " ".join(f"Sentence {i} says " + " ".join(["something"] * (words - 3)) + "." for i in range(n))


def test_more_than_ten_propositions_are_merged_into_ten_or_fewer() -> None:
    text = sentences(37)
    result = RULES.curate(text)
    check_result(text, result, 200)
    assert len(result.atoms) == 10
    sizes = [a.tokens for a in result.atoms]
    assert max(sizes) - min(sizes) <= 20, "merging keeps atoms roughly even"


def test_over_budget_only_when_ten_atoms_cannot_hold_the_text() -> None:
    per_atom = tolerated_tokens(50)
    text = sentences(60, words=8)
    total = count_tokens(text)
    assert 10 * 50 < total <= 10 * per_atom
    result = RULES.curate(text, max_atom_tokens=50)
    check_result(text, result, 50)
    assert any(a.over_budget for a in result.atoms)
    assert any("kept over budget" in w for w in result.warnings)


@pytest.mark.parametrize("count", [100, 400])
def test_text_beyond_ten_atoms_is_selected_from_within_budget(count: int) -> None:
    text = sentences(count)
    result = RULES.curate(text, max_atom_tokens=50)
    check_result(text, result, 50)
    assert len(result.atoms) == 10
    assert any(
        w.startswith("selected 10 atoms") and "the archived parent keeps the full text" in w
        for w in result.warnings
    )


def test_text_beyond_the_selection_limit_fails_with_envelope() -> None:
    text = sentences(12_000)
    assert count_tokens(text) > MAX_SOURCE_TOKENS
    with pytest.raises(CuratorFailed) as caught:
        RULES.curate(text, max_atom_tokens=50)
    failure = caught.value
    assert failure.reason == "envelope"
    assert failure.exit_code == 4
    assert failure.details["limit"] == MAX_SOURCE_TOKENS


def test_a_long_sentence_is_split_at_clause_boundaries() -> None:
    clause = "the worker restarted after the queue drained"
    text = ", ".join([clause] * 12) + ". The team closed the incident."
    result = RULES.curate(text, max_atom_tokens=50)
    check_result(text, result, 50)
    assert all(a.text.endswith((",", ".")) for a in result.atoms), "cut after commas"


# -- SourceTooSmall --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    ["", " ", "\n\n\t", "One sentence only.", "\x00\x01\x02", "--- *** ---", "- a single item"],
)
def test_fewer_than_two_propositions_is_too_small(text: str) -> None:
    with pytest.raises(SourceTooSmall) as caught:
        RULES.curate(text)
    assert caught.value.exit_code == 1
    assert caught.value.slug == "source_too_small"
    assert caught.value.reason == "too_small"


# -- arguments -------------------------------------------------------------------------------


@pytest.mark.parametrize("budget", [0, 49, 1001, -5])
def test_budget_out_of_range_is_a_usage_error(budget: int) -> None:
    with pytest.raises(UsageError) as caught:
        RULES.curate(sentences(3), max_atom_tokens=budget)
    assert caught.value.exit_code == 64


def test_negative_retries_are_a_usage_error() -> None:
    with pytest.raises(UsageError):
        RULES.curate(sentences(3), max_retries=-1)


def test_every_budget_in_range_is_respected() -> None:
    text = sentences(30, words=9)  # about 400 tokens: tight at 50, loose at 1000
    succeeded = 0
    for budget in range(MIN_ATOM_TOKENS, MAX_ATOM_TOKENS + 1):
        try:
            result = RULES.curate(text, max_atom_tokens=budget)
        except CuratorFailed as failure:
            assert failure.reason == "envelope"
            continue
        # The cheap invariants for every budget; the full check is below.
        assert 2 <= len(result.atoms) <= 10
        assert all(a.tokens <= tolerated_tokens(budget) for a in result.atoms)
        assert "".join(a.text for a in result.atoms).count("Sentence") == 30
        succeeded += 1
    assert succeeded == MAX_ATOM_TOKENS - MIN_ATOM_TOKENS + 1
    check_result(text, RULES.curate(text, max_atom_tokens=50), 50)
    check_result(text, RULES.curate(text, max_atom_tokens=1000), 1000)


# -- hostile input ---------------------------------------------------------------------------


def test_very_long_single_sentence_without_punctuation() -> None:
    text = " ".join(f"word{i % 50}" for i in range(600))
    result = RULES.curate(text)
    check_result(text, result, 200)
    assert any("word boundaries" in w for w in result.warnings)


def test_one_giant_word_is_cut_between_characters() -> None:
    text = "x" * 3000
    result = RULES.curate(text, max_atom_tokens=200)
    check_result(text, result, 200)
    assert "".join(a.text for a in result.atoms) == text
    assert any("character boundaries" in w for w in result.warnings)


def test_control_characters_are_kept_verbatim_and_separate_sentences() -> None:
    text = "\x00\x01 The deploy failed.\x07 It was bad.\x1b[31m Red text appeared on screen."
    result = RULES.curate(text)
    check_result(text, result, 200)
    assert result.atoms[-1].text == "\x1b[31m Red text appeared on screen."


def test_special_token_text_is_ordinary_text() -> None:
    text = "<|endoftext|> The model saw a special token. The tokenizer treated it as text."
    check_result(text, RULES.curate(text), 200)


def test_huge_input_fails_fast() -> None:
    text = sentences(40_000)  # about 1.4 MB
    started = time.monotonic()
    with pytest.raises(CuratorFailed) as caught:
        RULES.curate(text, max_atom_tokens=1000)
    assert caught.value.reason == "envelope"
    assert time.monotonic() - started < 10.0


def test_many_newlines_and_mixed_whitespace() -> None:
    text = "\r\n".join(["", "The first line has a full sentence.", "", "\t", "The second one too.", ""])
    result = RULES.curate(text)
    check_result(text, result, 200)
    assert len(result.atoms) == 2


# -- properties ------------------------------------------------------------------------------

WORDS = ["the", "deploy", "failed", "Dr.", "e.g.", "3.5", "It", "db1", "U.S.", "and", "vs."]
word = st.sampled_from(WORDS) | st.from_regex(r"[A-Za-z]{1,12}", fullmatch=True)
sentence = st.builds(
    lambda ws, end: " ".join(ws) + end,
    st.lists(word, min_size=1, max_size=30),
    st.sampled_from([".", "!", "?", "", ":", "...", '."']),
)
separator = st.sampled_from([" ", "  ", "\n", "\n\n", "\n- ", "\n1. ", "\n# ", "\t", "\r\n"])
document = st.builds(
    lambda parts: "".join(s + sep for s, sep in parts),
    st.lists(st.tuples(sentence, separator), min_size=0, max_size=60),
)
anything = document | st.text(max_size=600)
budgets = st.integers(min_value=MIN_ATOM_TOKENS, max_value=MAX_ATOM_TOKENS)


def outcome(text: str, budget: int) -> CurationResult | str:
    try:
        return RulesCurator().curate(text, max_atom_tokens=budget)
    except SourceTooSmall:
        return "too_small"
    except CuratorFailed as failure:
        assert failure.reason == "envelope"
        return "envelope"


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(anything, budgets)
def test_same_input_same_atoms(text: str, budget: int) -> None:
    assert outcome(text, budget) == outcome(text, budget)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(anything, budgets)
# A heading that repeats its section's first sentence: the atom is the body's copy.
@example(
    "the.\n# BZDAD e.g. BCAAAAAC the deploy AAACAAA the AAA e.g. AA the. the.\n"
    "ZDAD e.g. BCAAAAAC the deploy AAACAAA the AAA e.g. AA the. ",
    50,
)
# A budget cut that leaves a last atom of one modifier symbol (no word character): CI found it.
@example("0000000000000000000000\x810\x810000:0:0\x810\x810\x81\x81\x81\x81\x81\x81ÅÅÒØØØ˒", 50)
def test_every_result_keeps_the_envelope_and_the_budget(text: str, budget: int) -> None:
    result = outcome(text, budget)
    if isinstance(result, CurationResult):
        check_result(text, result, budget)


@settings(max_examples=100, deadline=None)
@given(st.lists(sentence, min_size=2, max_size=8), budgets)
def test_two_to_ten_real_sentences_always_atomise(parts: list[str], budget: int) -> None:
    text = " ".join(p.rstrip('.!?:"') + "." for p in parts)
    result = outcome(text, budget)
    assert isinstance(result, CurationResult) or result == "too_small"
    if isinstance(result, CurationResult):
        check_result(text, result, budget)


# -- long, sectioned memories (issue: most long memories never atomised) ---------------------


def test_a_long_post_mortem_atomises_within_the_default_budget() -> None:
    text = LONG_POST_MORTEM
    assert count_tokens(text) > 2600  # far beyond ten atoms of 200 tokens
    result = RULES.curate(text)
    check_result(text, result, 200)
    assert all(not a.over_budget for a in result.atoms)
    contexts = [a.context for a in result.atoms]
    assert "Root cause" in contexts, "the densest sections are kept"
    assert "Why it was so bad" in contexts
    assert "Action items" in contexts
    for atom in result.atoms:
        assert atom.title is not None and atom.context is not None
        assert atom.title.startswith(atom.context)


def test_no_atom_runs_from_one_section_into_the_next() -> None:
    text = (
        "Impact\n\nCustomers could not pay for three hours, and support received two thousand "
        "tickets in the first hour. No data was lost.\n\n"
        "Why it was so bad.\n\n"
        "The primary refused every write it could not replicate. Nobody on the team knew that "
        "this safe mode existed, and the runbook did not mention it."
    )
    result = RULES.curate(text, max_atom_tokens=200)
    check_result(text, result, 200)
    assert all(not ("No data was lost." in a.text and "Why it was so bad" in a.text) for a in result.atoms)
    assert [a.context for a in result.atoms][-1] == "Why it was so bad"


def test_setext_markdown_and_title_headings_are_context_not_atoms() -> None:
    text = (
        "Release notes for version 4\n\n"
        "Storage\n=======\n\nThe segment size is now configurable. Old segments are read as before.\n\n"
        "## Network\n\nConnections are reused across requests. The pool size defaults to eight.\n\n"
        "## Trailing heading with nothing under it\n"
    )
    result = RULES.curate(text)
    check_result(text, result, 200)
    # The title has no body of its own: it is the outer part of the first section's context.
    assert {a.context for a in result.atoms} == {"Release notes for version 4 › Storage", "Network"}
    assert all("Trailing heading" not in a.text for a in result.atoms)
    assert all(a.title and a.context and a.title.startswith(a.context + ": ") for a in result.atoms)


def test_an_empty_section_lends_its_heading_to_the_next() -> None:
    text = (
        "# Part two\n## Costs\n\nThe bill rose by a third in May. It fell again in June.\n\n"
        "More text follows here."
    )
    result = RULES.curate(text)
    check_result(text, result, 200)
    assert result.atoms[0].context == "Part two › Costs"


def test_a_lead_in_heads_only_its_list() -> None:
    text = (
        "## Follow-up\n\nThe review took two hours and everyone attended it.\n\n"
        "Action items:\n- Document the safe mode in the runbook.\n- Page on unlabelled alerts.\n\n"
        "The next review is in a month, and it will check the items above."
    )
    result = RULES.curate(text, max_atom_tokens=50)
    check_result(text, result, 50)
    by_text = {a.text.split("\n")[0]: a.context for a in result.atoms}
    assert by_text["Action items:"] == "Action items"
    assert by_text["The next review is in a month, and it will check the items above."] == "Follow-up"


def test_a_heading_and_one_sentence_is_too_small() -> None:
    with pytest.raises(SourceTooSmall):
        RULES.curate("# Incident 42\n\nThe disk filled up on db1.")


def test_titles_are_short_and_printable() -> None:
    text = "\x1b[1m" + " ".join(["Averyveryverylongword"] * 30) + ". The second sentence is here."
    result = RULES.curate(text)
    check_result(text, result, 200)
    assert all(a.title and a.title.endswith("…") for a in result.atoms[:1])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(st.sampled_from(["# ", "## ", ""]), st.lists(sentence, min_size=1, max_size=12)),
        min_size=1,
        max_size=16,
    ),
    budgets,
)
def test_sectioned_documents_keep_every_invariant(sections: list[tuple[str, list[str]]], budget: int) -> None:
    text = "\n\n".join(
        f"{mark}Section {i} heading\n\n" + " ".join(body) for i, (mark, body) in enumerate(sections)
    )
    result = outcome(text, budget)
    if isinstance(result, CurationResult):
        check_result(text, result, budget)
