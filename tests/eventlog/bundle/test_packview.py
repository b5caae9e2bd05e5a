"""The pack's byte format: rendering, the recorded form, and what tampering looks like."""

from __future__ import annotations

import ast
import copy
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mnemolog.eventlog.bundle import packview
from mnemolog.eventlog.errors import VerificationError


def record() -> dict[str, Any]:
    tiers = [
        {
            "name": "state",
            "included": [{"source": "state", "id": "p/decision/x", "label": "decision/x", "text": "chosen"}],
        },
        {"name": "identity", "included": []},
        {
            "name": "project",
            "included": [{"source": "memory", "id": "01A", "label": "project", "text": "a\nb"}],
        },
        {
            "name": "domain",
            "included": [{"source": "memory", "id": "01B", "label": "materials", "text": "z"}],
        },
        {
            "name": "chunks",
            "included": [{"source": "chunk", "id": "d/1/0", "label": "d.md › H", "text": "c"}],
        },
    ]
    data: dict[str, Any] = {"format": packview.FORMAT, "project": "p", "tiers": tiers}
    data["sha256"] = packview.pack_sha256(packview.render_recorded(data))
    return data


def test_the_format_by_example() -> None:
    assert packview.check_recorded(record()) == (
        "## Trusted project state (p)\n- decision/x: chosen\n\n"
        "## Project memories (p)\n- [project] a\n  b\n\n"
        "## Domain knowledge\n- [materials] z\n\n"
        "## Retrieved chunks\n- [d.md › H] c\n\n"
    )
    assert packview.memory_ids(record()) == ["01A", "01B"]


@pytest.mark.parametrize(
    "tamper",
    [
        lambda d: d["tiers"][2]["included"][0].update(text="a\nB"),
        lambda d: d["tiers"][3]["included"].clear(),
        lambda d: d.update(project="q"),
        lambda d: d.update(sha256="0" * 64),
    ],
)
def test_any_change_to_the_record_fails_the_hash(tamper: Any) -> None:
    d = copy.deepcopy(record())
    tamper(d)
    with pytest.raises(VerificationError) as exc:
        packview.check_recorded(d, seq=7)
    assert exc.value.check == "context.sha256" and exc.value.seq == 7


def five(**included: Any) -> list[dict[str, Any]]:
    return [{"name": t, "included": included.get(t, [])} for t in packview.TIERS]


@pytest.mark.parametrize(
    "bad",
    [
        {"tiers": "x"},
        {"tiers": list(reversed(record()["tiers"]))},
        {"tiers": [{"name": "nope", "included": []}]},
        {"tiers": [{"name": "state", "included": []}, {"name": "state", "included": []}]},
        {"tiers": five(state=[{"source": "state", "id": 1, "label": "", "text": ""}])},
        {"tiers": five(state=[{"source": "other", "id": "", "label": "", "text": ""}])},
        {"tiers": five(state="x")},
        {"tiers": five(), "project": 5},
        {"tiers": [], "format": "mnemolog/context-pack/v0"},
    ],
)
def test_malformed_records_are_refused_by_shape(bad: dict[str, Any]) -> None:
    d = {"format": packview.FORMAT, **bad}
    with pytest.raises(VerificationError) as exc:
        packview.check_recorded(d)
    assert exc.value.check == "context.shape"
    packview.memory_ids(d)  # total: never raises


@settings(max_examples=200, deadline=None)
@given(
    st.recursive(
        st.none() | st.integers() | st.text(max_size=5),
        lambda c: st.lists(c) | st.dictionaries(st.text(max_size=8), c),
    )
)
def test_memory_ids_is_total(value: Any) -> None:
    data = value if isinstance(value, dict) else {"tiers": value}
    assert all(isinstance(i, str) for i in packview.memory_ids(data))


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200), st.text(max_size=30))
def test_an_entry_is_one_list_item(text: str, label: str) -> None:
    line = packview.entry_line("memory", label, text)
    assert line.startswith("- ") and line.endswith("\n")
    assert all(not rest or rest.startswith("  ") for rest in line[:-1].split("\n")[1:])


def test_packview_imports_only_the_standard_library_and_eventlog() -> None:
    tree = ast.parse(Path(packview.__file__).read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            assert node.module.split(".")[0] in {"__future__", "hashlib", "collections", "typing"} or (
                node.module.startswith("mnemolog.eventlog")
            ), node.module
        elif isinstance(node, ast.Import):
            assert all(a.name in {"hashlib"} for a in node.names)
