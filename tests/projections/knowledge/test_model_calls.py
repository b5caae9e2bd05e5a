"""model_calls rows: what each extraction or triage event becomes, for any payload."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from mnemolog.eventlog.format.entry import Entry
from mnemolog.eventlog.vocabulary import knowledge as vk
from mnemolog.projections.knowledge.model_calls import _row

TYPES = [vk.CANDIDATE_EXTRACTED, vk.EXTRACTION_FAILED, vk.CANDIDATE_TRIAGED, vk.TRIAGE_FAILED]


def entry(type_: str, data: dict[str, Any]) -> Entry:
    return Entry(seq=7, ts=1_700_000_000_000_000, type=type_, tv=1, data=data, prev=b"", kid=b"", sig=b"",
                 raw=b"", leaf=b"")  # fmt: skip


def test_a_failure_is_an_error_row_with_its_reason() -> None:
    d = {"interaction_id": "I1", "extractor": "ollama", "model": "qwen2.5:7b", "reason": "timeout",
         "message": "no answer in 60 s", "input_tokens": 812, "output_tokens": 0}  # fmt: skip
    row = _row(entry(vk.EXTRACTION_FAILED, d), d)
    assert row is not None
    assert row[2:8] == (
        "qwen2.5:7b",
        812,
        0,
        "error",
        "extract I1 failed: timeout (ollama)",
        "timeout: no answer in 60 s",
    )


def test_a_verdict_names_the_candidate_and_what_was_done() -> None:
    d = {"id": "C1", "triager": "rules", "verdict": "duplicate", "action": "reject", "input_tokens": True}
    row = _row(entry(vk.CANDIDATE_TRIAGED, d), d)
    assert row is not None
    assert row[2:8] == ("rules", 0, 0, "ok", "triage C1: duplicate, reject (rules)", None)
    assert row[-1] is None  # asked by a person, not by the schedule


@given(
    st.sampled_from(TYPES),
    st.dictionaries(
        st.sampled_from(
            [
                "id",
                "interaction_id",
                "extractor",
                "triager",
                "model",
                "candidate_ids",
                "verdict",
                "action",
                "reason",
                "message",
                "input_tokens",
                "output_tokens",
            ]
        ),
        st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=5), st.lists(st.integers())),
    ),
)
def test_any_payload_gives_a_row(type_: str, d: dict[str, Any]) -> None:
    row = _row(entry(type_, d), d)
    assert row is not None
    seq, t, model, tin, tout, status, summary, error, ts, trigger = row
    assert trigger in (None, "cron")
    assert (seq, t, ts) == (7, type_, 1_700_000_000_000_000)
    assert isinstance(model, str) and model and isinstance(summary, str) and summary
    assert tin >= 0 and tout >= 0
    assert (status == "error") == (type_ in (vk.EXTRACTION_FAILED, vk.TRIAGE_FAILED)) == (error is not None)
