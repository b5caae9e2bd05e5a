"""Scoped tokens on one home: issued and revoked as signed events, hashed, checked on every call."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mnemolog.eventlog.errors import MnemologError, NotFound, UsageError
from mnemolog.substrate.api import Substrate
from mnemolog.substrate.home import Home
from mnemolog.substrate.tenancy import scope


@pytest.fixture
def sub(make_home: Callable[..., Home], open_substrate: Callable[..., Substrate]) -> Substrate:
    s = open_substrate(make_home())
    s.set_embedder("off")
    return s


def _seed(s: Substrate) -> dict[str, Any]:
    return {
        "a": s.store("alpha secret of agent a", namespace="agents/a", project="p1"),
        "b": s.store("alpha secret of agent b", namespace="agents/b"),
        "shared": s.store("alpha handbook for every agent", namespace="team/shared"),
        "p2": s.store("alpha secret of project two", namespace="agents/a", project="p2"),
    }


def test_the_log_holds_the_hash_never_the_token(sub: Substrate) -> None:
    t = sub.issue_token("read", namespaces=["agents/a"], label="ci")
    raw = b"".join(p.read_bytes() for p in sorted(sub.home.log_dir.rglob("*")) if p.is_file())
    secret = t["token"].rsplit(".", 1)[1]
    assert secret.encode() not in raw
    assert scope.hash_secret(secret).encode() in raw
    listed = sub.tokens()
    assert [x["token_id"] for x in listed] == [t["token_id"]]
    assert "sha256" not in listed[0] and listed[0]["state"] == "active"


def test_a_bound_token_reads_its_namespace_and_the_shared_ones_only(sub: Substrate) -> None:
    m = _seed(sub)
    (sub.home.root / "config.toml").write_text(
        (sub.home.root / "config.toml").read_text() + '\n[sharing]\n"team/shared" = ["agents"]\n'
    )
    s2 = Substrate.open(Home(sub.home.root), long_lived=False)
    try:
        t = s2.issue_token("read", namespaces=["agents/a"])
        scoped = s2.with_token(t["token"])
        got = {x["id"] for x in scoped.recall("alpha secret handbook", limit=50)}
        assert got == {m["a"]["id"], m["shared"]["id"], m["p2"]["id"]}
        assert {x["id"] for x in scoped.list()} == got
        assert scoped.stats()["memories"] == 3
        with pytest.raises(scope.ScopeRefused):
            scoped.get(m["b"]["id"])
        with pytest.raises(scope.ScopeRefused):
            scoped.store("no", namespace="agents/a")  # a read token writes nothing
    finally:
        s2.close()


def test_a_write_token_writes_only_inside_its_namespaces(sub: Substrate) -> None:
    m = _seed(sub)
    t = sub.issue_token("write", namespaces=["agents/a"], projects=["p1"])
    scoped = sub.with_token(t["token"])
    assert scoped.store("mine", namespace="agents/a/notes", project="p1")["namespace"] == "agents/a/notes"
    for call in (
        lambda: scoped.store("x", namespace="agents/b"),
        lambda: scoped.store("x", namespace="agents/a", project="p2"),
        lambda: scoped.archive(m["b"]["id"]),
        lambda: scoped.update(m["a"]["id"], namespace="agents/b"),
        lambda: scoped.link(m["a"]["id"], m["b"]["id"]),
        lambda: scoped.get(m["p2"]["id"]),
        lambda: scoped.get_state("p2"),
        lambda: scoped.rebuild(),  # noqa: PLW0108 - the refusal is at the attribute
    ):
        with pytest.raises(scope.ScopeRefused):
            call()
    assert sub.refusals.counts[t["token_id"]] == 8
    lines = (sub.home.state_dir / "refusals.jsonl").read_text().splitlines()
    assert len(lines) == 8 and t["token"] not in "".join(lines)
    with (sub.home.state_dir / "refusals.jsonl").open("a") as f:
        f.write('{"token_id": 7}\n[1, 2]\nnot json {\n')  # hostile lines count for nothing
    assert sub.tokens()[0]["refusals"] == 8


def test_revoked_expired_and_foreign_tokens_are_refused(sub: Substrate) -> None:
    t = sub.issue_token("admin")
    sub.revoke_token(t["token_id"], reason="leaked")
    with pytest.raises(scope.TokenRefused):
        sub.with_token(t["token"])
    assert sub.tokens()[0]["state"] == "revoked"
    with pytest.raises(MnemologError):
        sub.revoke_token(t["token_id"])
    with pytest.raises(NotFound):
        sub.revoke_token("0000000000000000")
    other = sub.issue_token("admin", tenant="acme")
    with pytest.raises(scope.TokenRefused):
        sub.with_token(other["token"])  # this home is not tenant acme
    assert sub.with_token(other["token"], tenant="acme").scope.level == "admin"
    with pytest.raises(UsageError):
        sub.issue_token("admin", expires="yesterday")


def test_an_expired_token_is_refused(
    make_home: Callable[..., Home], open_substrate: Callable[..., Substrate]
) -> None:
    now = [1_800_000_000_000_000]
    s = open_substrate(make_home(), clock=lambda: now[0])
    t = s.issue_token("read", expires="1h")
    assert s.with_token(t["token"]).scope.level == "read"
    now[0] += 3600 * 1_000_000
    with pytest.raises(scope.TokenRefused, match="expired"):
        s.with_token(t["token"])


@settings(max_examples=200)
@given(st.text(max_size=400))
def test_any_text_is_a_token_or_a_refusal(text: str) -> None:
    try:
        _tenant, token_id, digest = scope.parse_token(text)
    except scope.TokenRefused:
        return
    assert len(digest) == 64 and token_id.isalnum()


@given(
    st.lists(st.sampled_from(["a", "a/b", "a/b/c", "b", "ab", "team/shared"]), max_size=3),
    st.sampled_from(["a", "a/b", "a/bc", "b/a", "ab", "team/shared", "team"]),
)
def test_a_bound_scope_never_writes_outside_its_namespaces(bound: list[str], ns: str) -> None:
    sc = scope.Scope("write", namespaces=tuple(bound), shared=("team/shared",) if bound else ())
    if sc.writes_namespace(ns):
        assert not bound or any(ns == b or ns.startswith(b + "/") for b in bound)
    if bound and ns == "team":
        assert not sc.reads_namespace(ns)


def test_rate_limits_are_per_token() -> None:
    limiter = scope.RateLimiter(2)
    a, b = scope.Scope("read", token_id="a"), scope.Scope("read", token_id="b")
    limiter.take(a, 0.0)
    limiter.take(a, 0.0)
    with pytest.raises(scope.RateLimited):
        limiter.take(a, 0.0)
    limiter.take(b, 0.0)
    limiter.take(a, 30.0)  # one back after half a minute at 2 a minute


def test_malformed_sharing_config_is_refused(tmp_path: Path) -> None:
    with pytest.raises(MnemologError):
        scope.sharing({"sharing": {"team": "agents"}})
    with pytest.raises(MnemologError):
        scope.sharing({"sharing": []})
    assert scope.shared_with(scope.sharing({"sharing": {"h": ["*"]}}), ["agents/a"]) == ("h",)


NAMESPACES = ["a", "a/b", "a/b/c", "ab", "b", "b/a", "team/shared", "default"]
PROJECTS = ["", "p1", "p2"]


@pytest.fixture(scope="module")
def spread(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from mnemolog.substrate.home import init_home

    root = tmp_path_factory.mktemp("spread") / "home"
    init_home(root)
    s = Substrate.open(root, long_lived=False, worker=False)
    s.set_embedder("off")
    for i, ns in enumerate(NAMESPACES):
        for p in PROJECTS:
            s.store(f"alpha note {i} {p or 'none'}", namespace=ns, project=p)
    yield s
    s.close()


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.sampled_from(NAMESPACES), max_size=3, unique=True),
    st.lists(st.sampled_from(["p1", "p2"]), max_size=2, unique=True),
    st.lists(st.sampled_from(NAMESPACES), max_size=2, unique=True),
)
def test_a_scoped_read_is_the_unscoped_read_filtered_by_the_scope(
    spread: Substrate, namespaces: list[str], projects: list[str], shared: list[str]
) -> None:
    sc = scope.Scope("read", namespaces=tuple(namespaces), projects=tuple(projects), shared=tuple(shared))
    everything = spread.list(limit=1000)
    with scope.applied(sc):
        listed = spread.list(limit=1000)
        recalled = spread.recall("alpha note", limit=1000)
        counted = spread.stats()
    expected = [m["id"] for m in everything if sc.sees(m)]
    assert [m["id"] for m in listed] == expected
    assert {m["id"] for m in recalled} == set(expected)
    if sc.bound:
        assert counted["memories"] == len(expected)
