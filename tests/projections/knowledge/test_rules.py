"""Project canonicalisation and the registry; confidence, reinforcement and decay at fixed clocks."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mnemolog.eventlog.errors import BadInput, Informational, NotFound
from mnemolog.projections.knowledge.rules import (
    BASE_CONFIDENCE,
    DAY_US,
    DecayPolicy,
    ProjectRegistry,
    base_confidence,
    decay_days,
    decayed_confidence,
    decays_out,
    reinforced,
)

T0 = 1_700_000_000 * 1_000_000  # a fixed clock; no test reads the real one


def registry() -> ProjectRegistry:
    return (
        ProjectRegistry().with_project("p04-gigabit", aliases=["p04", "gigabit"]).with_project("p06-polisher")
    )


# -- canonicalisation -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given_name", "canonical"),
    [
        ("p04-gigabit", "p04-gigabit"),
        ("P04-GIGABIT", "p04-gigabit"),
        ("p04", "p04-gigabit"),
        (" Gigabit ", "p04-gigabit"),
        ("p06-polisher", "p06-polisher"),
        ("p07-unknown", "p07-unknown"),
        ("P07-Unknown ", "P07-Unknown"),
        ("", ""),
        (None, ""),
    ],
)
def test_canonical(given_name: str | None, canonical: str) -> None:
    assert registry().canonical(given_name) == canonical


def test_an_alias_may_be_registered_through_another_alias() -> None:
    reg = registry().with_alias("p04", "GB")
    assert reg.canonical("gb") == "p04-gigabit"
    assert reg.projects["p04-gigabit"].aliases == ("p04", "gigabit", "GB")


def test_registering_a_known_project_is_informational() -> None:
    with pytest.raises(Informational) as info:
        registry().with_project("P04-Gigabit")
    assert info.value.exit_code == 1


def test_a_project_cannot_take_the_name_of_an_alias() -> None:
    with pytest.raises(BadInput) as info:
        registry().with_project("p04")
    assert info.value.details["alias_of"] == "p04-gigabit"


def test_an_alias_names_one_project() -> None:
    with pytest.raises(BadInput):
        registry().with_alias("p06-polisher", "P04")
    with pytest.raises(BadInput):
        registry().with_alias("p06-polisher", "p04-gigabit")
    with pytest.raises(Informational):
        registry().with_alias("p04-gigabit", "gigabit")


def test_an_alias_needs_a_registered_project() -> None:
    with pytest.raises(NotFound) as info:
        registry().with_alias("p09", "nine")
    assert info.value.exit_code == 2


@pytest.mark.parametrize("bad", ["", "no spaces", "é", "x" * 65])
def test_bad_names_and_aliases(bad: str) -> None:
    with pytest.raises(BadInput):
        registry().with_project(bad)
    with pytest.raises(BadInput):
        registry().with_alias("p04", bad)


def test_a_description_has_a_limit() -> None:
    with pytest.raises(BadInput):
        ProjectRegistry().with_project("p1", description="x" * 2001)


def test_the_registry_is_not_changed_by_growing_a_new_one() -> None:
    before = registry()
    before.with_alias("p04", "later")
    assert before.canonical("later") == "later"


# -- the replayed registry --------------------------------------------------------------


def test_applied_events_rebuild_what_the_commands_built() -> None:
    events: list[tuple[str, dict[str, Any]]] = [
        ("project.registered", {"name": "p04-gigabit", "aliases": ["p04", "gigabit"], "description": ""}),
        ("project.registered", {"name": "p06-polisher"}),
        ("project.aliased", {"name": "p04", "alias": "GB"}),
    ]
    reg = ProjectRegistry()
    for event_type, data in events:
        reg = reg.applied(event_type, data)
    assert reg == registry().with_alias("p04", "GB")


def test_applied_lets_the_first_writer_keep_a_name() -> None:
    reg = ProjectRegistry()
    for event_type, data in [
        ("project.registered", {"name": "a"}),
        ("project.registered", {"name": "b", "aliases": ["x"]}),
        ("project.aliased", {"name": "a", "alias": "X"}),  # taken by b
        ("project.registered", {"name": "x"}),  # taken as an alias
        ("project.registered", {"name": "A", "description": "dup"}),
    ]:
        reg = reg.applied(event_type, data)
    assert reg.canonical("x") == "b"
    assert reg.projects["a"].description == ""
    assert set(reg.projects) == {"a", "b"}


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
names = st.sampled_from(["a", "A", "b", "p04", "x y", "", "é"]) | st.text(max_size=6)


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["project.registered", "project.aliased", "memory.stored"]),
            st.fixed_dictionaries(
                {},
                optional={"name": names | json_values, "alias": names | json_values, "aliases": json_values},
            ),
        ),
        max_size=12,
    )
)
def test_applied_is_total_and_keeps_the_index_consistent(events: list[tuple[str, dict[str, Any]]]) -> None:
    reg = ProjectRegistry()
    for event_type, data in events:
        reg = reg.applied(event_type, data)
    for key, canonical in reg.index.items():
        assert key == key.lower()
        assert canonical in reg.projects
        assert reg.canonical(key) == canonical
    for name, project in reg.projects.items():
        assert reg.canonical(name) == name
        for alias in project.aliases:
            assert reg.canonical(alias.upper()) == name


# -- confidence -------------------------------------------------------------------------


def test_base_confidence_and_reinforcement_step() -> None:
    assert base_confidence(None) == BASE_CONFIDENCE == 1.0
    assert reinforced(0.6, 0.02) == pytest.approx(0.62)
    assert reinforced(0.99, 0.02) == 1.0
    assert reinforced(None, 0.02) == 1.0


POLICY = DecayPolicy()


@pytest.mark.parametrize(
    ("idle_days", "expected_days"),
    [(0, 0), (29, 0), (30, 0), (30.99, 0), (31, 1), (32, 2), (70, 40)],
)
def test_decay_starts_after_thirty_whole_idle_days(idle_days: float, expected_days: int) -> None:
    now = T0 + int(idle_days * DAY_US)
    assert decay_days(anchor_us=T0, reference_count=0, now_us=now, policy=POLICY) == expected_days


def test_decayed_confidence_at_fixed_clocks() -> None:
    def at(days: int, confidence: float | None = 0.6, refs: int = 0) -> float:
        return decayed_confidence(
            confidence, anchor_us=T0, reference_count=refs, now_us=T0 + days * DAY_US, policy=POLICY
        )

    assert at(30) == 0.6
    assert at(31) == pytest.approx(0.6 * 0.97)
    assert at(40) == pytest.approx(0.6 * 0.97**10)
    assert at(400, refs=1) == 0.6  # referenced memories never decay
    assert at(31, None) == pytest.approx(0.97)
    assert at(-5) == 0.6  # a clock before the anchor decays nothing


def test_supersession_below_the_floor() -> None:
    # 0.6 * 0.97**n < 0.30 first at n = 23 (0.97**22 = 0.5117, 0.97**23 = 0.4963).
    def out(days: int, confidence: float | None = 0.6) -> bool:
        return decays_out(
            confidence, anchor_us=T0, reference_count=0, now_us=T0 + days * DAY_US, policy=POLICY
        )

    assert not out(30 + 22)
    assert out(30 + 23)
    assert not out(30 + 39, None)
    assert out(30 + 40, None)
    # Stored below the floor: superseded once decay begins, not before.
    assert not out(30, 0.2)
    assert out(31, 0.2)


def test_decay_thresholds_are_configuration_and_recorded() -> None:
    policy = DecayPolicy(idle_days=7, daily_factor=0.5, floor=0.1)
    assert policy.to_data() == {
        "idle_days": 7,
        "daily_factor": 0.5,
        "floor": 0.1,
        "exempt_pinned": True,
        "exempt_kinds": ["user", "feedback"],
        "exempt_stored": True,
    }
    assert (
        decayed_confidence(0.8, anchor_us=T0, reference_count=0, now_us=T0 + 9 * DAY_US, policy=policy) == 0.2
    )


@pytest.mark.parametrize(
    "kw",
    [
        {"idle_days": -1},
        {"idle_days": 1.5},
        {"daily_factor": 0.0},
        {"daily_factor": 1.1},
        {"floor": 2.0},
        {"exempt_pinned": 1},
        {"exempt_kinds": ["user", ""]},
        {"exempt_kinds": "user"},
    ],
)
def test_bad_decay_policies(kw: dict[str, Any]) -> None:
    with pytest.raises(BadInput):
        DecayPolicy(**kw)


@given(
    confidence=st.none() | st.floats(0.0, 1.0),
    refs=st.integers(0, 3),
    a=st.integers(0, 400 * DAY_US),
    b=st.integers(0, 400 * DAY_US),
)
def test_decay_never_rises_with_time_and_is_a_pure_function(
    confidence: float | None, refs: int, a: int, b: int
) -> None:
    early, late = sorted((a, b))

    def value(now: int) -> float:
        return decayed_confidence(confidence, anchor_us=0, reference_count=refs, now_us=now, policy=POLICY)

    assert value(late) <= value(early) <= base_confidence(confidence)
    assert value(late) == value(late)
    if decays_out(confidence, anchor_us=0, reference_count=refs, now_us=early, policy=POLICY):
        assert decays_out(confidence, anchor_us=0, reference_count=refs, now_us=late, policy=POLICY)
