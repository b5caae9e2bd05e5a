"""The reinforcement matcher: words, terms, stemming, normalised text, short and long echoes."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mnemolog.eventlog.errors import BadInput
from mnemolog.projections.knowledge.match import (
    Echo,
    ReinforcePolicy,
    echo,
    echoed,
    normalised,
    stem,
    terms,
    words,
)
from mnemolog.projections.recall.text import MAX_TERM_LEN, is_separator

POLICY = ReinforcePolicy()


@pytest.mark.parametrize(
    ("word", "expected"),
    [
        ("decided", "decid"),
        ("decides", "decid"),
        ("deciding", "decid"),
        ("decide", "decid"),
        ("measurements", "measurement"),
        ("policies", "policy"),
        ("processes", "process"),
        ("running", "run"),
        ("stopped", "stop"),
        ("falling", "fall"),
        ("quickly", "quick"),
        ("glass", "glass"),
        ("status", "status"),
        ("analysis", "analysis"),
        ("cat", "cat"),
        ("2024", "2024"),
        ("f1", "f1"),
        ("sing", "sing"),
    ],
)
def test_stem(word: str, expected: str) -> None:
    assert stem(word) == expected


def test_words_follow_the_recall_tokenizer() -> None:
    assert words("Zerodur's CTE — at F/1.2, ~3nm!") == ["zerodur", "s", "cte", "at", "f", "1", "2", "3nm"]
    assert words("Café CAFE café") == ["cafe", "cafe", "cafe"]
    assert words("x" * (MAX_TERM_LEN + 1) + " ok") == ["ok"]


@given(st.text(max_size=60))
def test_words_contain_no_separator(text: str) -> None:
    for word in words(text):
        assert word
        assert not any(is_separator(ch) for ch in word)


def test_terms_drop_stop_words_and_repeat() -> None:
    assert terms("We decided that the pads are decided by the CTE") == {"decid", "pad", "cte"}
    assert terms("the and of") == frozenset()


def test_normalised_text_ignores_case_punctuation_and_spacing() -> None:
    assert normalised("Use OAuth,  not API keys.") == normalised("use oauth not api keys")
    assert normalised("Use OAuth") != normalised("Use OAuth not API keys")


def test_short_mode_needs_seventy_percent_of_the_memory() -> None:
    memory = frozenset(f"t{i}" for i in range(10))
    assert echo(memory, frozenset(f"t{i}" for i in range(7)), POLICY) == Echo(7, 10, "short")
    assert echo(memory, frozenset(f"t{i}" for i in range(6)), POLICY) is None


def test_long_mode_for_memories_over_fifteen_terms() -> None:
    memory = frozenset(f"t{i}" for i in range(30))
    assert echo(memory, frozenset(f"t{i}" for i in range(12)), POLICY) == Echo(12, 30, "long")  # 0.40
    assert echo(memory, frozenset(f"t{i}" for i in range(11)), POLICY) is None  # 11 < 12
    big = frozenset(f"t{i}" for i in range(40))
    assert echo(big, frozenset(f"t{i}" for i in range(13)), POLICY) is None  # 13/40 < 0.35
    assert echo(big, frozenset(f"t{i}" for i in range(14)), POLICY) == Echo(14, 40, "long")


def test_exactly_fifteen_terms_is_not_long() -> None:
    memory = frozenset(f"t{i}" for i in range(15))
    assert echo(memory, frozenset(f"t{i}" for i in range(12)), POLICY) == Echo(12, 15, "short")  # 0.80
    assert echo(memory, frozenset(f"t{i}" for i in range(10)), POLICY) is None  # 0.67, and not long


def test_an_empty_memory_never_matches() -> None:
    assert echo(frozenset(), frozenset({"a"}), POLICY) is None


def test_echoed_over_real_text() -> None:
    memories = [
        ("m1", "Zerodur CTE gradient dominates WFE at fast focal ratios"),
        ("m2", "The invoice export needs the composite index on tenant and date"),
        ("m3", "the of and"),
    ]
    response = "As we saw, the CTE gradient of Zerodur dominates the WFE at fast focal ratios like F/1.2."
    assert [(mid, e.mode) for mid, e in echoed(memories, response, POLICY)] == [("m1", "short")]


def test_echoed_long_mode_over_real_text() -> None:
    memory = (
        "The polishing run on the sixteen inch pitch lap showed quilting above two hundred "
        "thirty four newtons because the lap pitch flows under sustained load and the facets "
        "print through into the mirror surface, which the interferometer measured as a "
        "fourteen nanometre ripple across the clear aperture"
    )
    assert len(terms(memory)) > 15
    response = (
        "Quilting showed up again above two hundred thirty four newtons: the pitch flows "
        "under sustained load and the facets print through. Everything else in the run was nominal."
    )
    ((_mid, match),) = echoed([("m", memory)], response, POLICY)
    assert match.mode == "long"
    assert match.overlap >= 12 and match.share < 0.70


def test_policy_is_recorded_and_checked() -> None:
    assert POLICY.to_data() == {
        "min_share": 0.70,
        "long_after": 15,
        "long_min_overlap": 12,
        "long_min_share": 0.35,
        "step": 0.02,
    }


@pytest.mark.parametrize(
    "kw", [{"min_share": 1.5}, {"step": -0.1}, {"long_after": -1}, {"long_min_overlap": 2.5}]
)
def test_bad_policies(kw: dict[str, Any]) -> None:
    with pytest.raises(BadInput):
        ReinforcePolicy(**kw)


@given(st.text(max_size=200))
def test_a_text_always_echoes_itself(text: str) -> None:
    memory = terms(text)
    match = echo(memory, memory, POLICY)
    assert (match is None) == (not memory)
    if match is not None:
        assert match.mode == "short" and match.share == 1.0


@given(st.frozensets(st.integers(0, 60), max_size=40), st.frozensets(st.integers(0, 60), max_size=60))
def test_echo_is_monotone_in_the_response(memory_ids: frozenset[int], extra: frozenset[int]) -> None:
    memory = frozenset(f"w{i}" for i in memory_ids)
    response = frozenset(f"w{i}" for i in extra)
    if echo(memory, response, POLICY) is not None:
        assert echo(memory, response | {"other"}, POLICY) is not None
        assert echo(memory, response | memory, POLICY) is not None
