"""Whatever arguments an agent sends, a tool answers with a result or a documented error, never a crash."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mnemolog.cli.agents import mcp_server, operations
from mnemolog.substrate.api import Substrate
from mnemolog.substrate.home import init_home

DOCUMENTED = {1, 2, 3, 4, 5, 6, 7, 8, 64, 65}

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=40),
    st.sampled_from(["decision", "related_to", "default", "ops/db", "", " ", "\x00", "a" * 600]),
)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


def arguments(op: operations.Operation) -> st.SearchStrategy[dict[str, Any]]:
    """Arguments shaped like the tool's (its own field names, any JSON values) plus strays."""
    names = list(op.input_schema.get("properties", {}))
    known = (
        st.dictionaries(st.sampled_from(names), json_values, max_size=len(names)) if names else st.just({})
    )
    return st.tuples(known, st.dictionaries(st.text(max_size=6), json_values, max_size=2)).map(
        lambda t: {**t[1], **t[0]}
    )


@pytest.fixture(scope="module")
def sub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Substrate]:
    home = tmp_path_factory.mktemp("mcp-prop") / "home"
    init_home(home)
    s = Substrate.open(home, long_lived=False)
    s.store("A memory the tools can find, about the checkout pool.")
    yield s
    s.close()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_arguments_get_a_result_or_a_documented_error(sub: Substrate, data: st.DataObject) -> None:
    name = data.draw(st.sampled_from(sorted(operations.OPERATIONS)))
    if name in ("bundle_export", "bundle_verify"):
        return  # they write and read files named by the caller: covered by their own tests
    args = data.draw(arguments(operations.OPERATIONS[name]))
    result = mcp_server.call(sub, name, args)
    body = result.structured_content
    assert isinstance(body, dict)
    json.dumps(body, allow_nan=False)  # always strict JSON
    if result.is_error:
        assert body["ok"] is False and body["exit_code"] in DOCUMENTED, body
        assert body["error"] != "internal_error"
    else:
        assert body["ok"] is True
