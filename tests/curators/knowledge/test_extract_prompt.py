"""The pinned extraction and triage prompts: the quality bar, the examples, the fingerprints."""

from __future__ import annotations

import pytest

from mnemolog.curators.knowledge import extract_prompt, triage_prompt
from mnemolog.curators.knowledge.extract_prompt import (
    QUALITY_BAR,
    SHOWN_CHARS,
    prompt_sha256,
    shown,
    system_prompt,
)
from mnemolog.curators.knowledge.triage import Neighbour
from mnemolog.eventlog.vocabulary.knowledge import DOMAINS


def test_the_quality_bar_and_examples_are_in_the_prompt() -> None:
    text = system_prompt()
    assert QUALITY_BAR in text
    assert "Worth keeping (earned)" in text and "Not worth keeping (look-up)" in text
    assert '"An index speeds up database lookups."' in text
    for kind in ("project", "knowledge", "preference"):
        assert f'- "{kind}"' in text
    assert "$" not in text  # every placeholder filled


def test_the_triage_prompt_states_the_bar_and_every_verdict() -> None:
    text = triage_prompt.system_prompt()
    assert QUALITY_BAR in text
    for verdict in ("promote", "reject", "needs_human", "contradicts"):
        assert f'- "{verdict}"' in text
    assert "$" not in text


@pytest.mark.parametrize("module", [extract_prompt, triage_prompt])
def test_fingerprints_are_stable_and_change_with_the_wording(
    module: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    sha = module.prompt_sha256()  # type: ignore[attr-defined]
    assert sha == module.prompt_sha256() and len(sha) == 64  # type: ignore[attr-defined]
    assert module.prompt_sha256((*DOMAINS, "nutrition")) != sha  # type: ignore[attr-defined]
    name = "EXTRACTION_USER_TEMPLATE" if module is extract_prompt else "TRIAGE_USER_TEMPLATE"
    monkeypatch.setattr(module, name, getattr(module, name) + " ")
    assert module.prompt_sha256() != sha  # type: ignore[attr-defined]


def test_extraction_and_triage_fingerprints_differ() -> None:
    assert prompt_sha256() != triage_prompt.prompt_sha256()


def test_shown_cuts_long_text_at_both_ends() -> None:
    assert shown("short") == "short"
    exact = "y" * SHOWN_CHARS
    assert shown(exact) == exact
    text = "H" * 30_000 + "M" * 50_000 + "T" * 10_000
    out = shown(text)
    assert out.startswith("H" * 24_000) and out.endswith("T" * 8_000)
    assert "[... 58000 characters omitted ...]" in out


def test_values_are_inserted_verbatim() -> None:
    messages = extract_prompt.render_messages("$prompt ${x}", "{response}", "")
    assert "$prompt ${x}" in messages[1]["content"]
    assert "Project: (none)" in messages[1]["content"]
    triage = triage_prompt.render_messages(
        content="$content",
        layer="domain",
        kind="knowledge",
        project="",
        domains=("materials",),
        confidence=0.6,
        neighbours=(Neighbour("01ABC", "An older memory\nover two lines", "p04"),),
    )
    assert "$content" in triage[1]["content"]
    assert '- id 01ABC (project "p04"): An older memory over two lines' in triage[1]["content"]
    assert "(none)" in triage_prompt.neighbour_lines(())
