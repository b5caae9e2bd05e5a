"""The Host-header guard of the token-less HTTP API: parsed, never matched by prefix."""

from __future__ import annotations

import ipaddress

from hypothesis import given
from hypothesis import strategies as st

from mnemolog.cli.agents.listen import loopback_host_header

ACCEPTED = [
    "localhost",
    "LocalHost:8100",
    "127.0.0.1",
    "127.0.0.1:8100",
    "127.8.9.10:1",
    "[::1]",
    "[::1]:65535",
    "[0:0:0:0:0:0:0:1]:80",
]

REFUSED = [
    "",
    " ",
    "127.evil.com",
    "127.evil.com:8100",
    "127.0.0.1.attacker.example",
    "127.0.0.1.attacker.example:80",
    "[::1]attacker.example",
    "[::1].attacker.example:80",
    "[::1]:80x",
    "localhost.attacker.example",
    "localhost:",
    "localhost:0",
    "localhost:65536",
    "localhost:80:80",
    "127.0.0.1:-1",
    "127.0.0.1:+80",
    "127.1",
    "0177.0.0.1",
    "127.000.000.001",
    "2130706433",
    "0x7f000001",
    "attacker.example",
    "10.0.0.1",
    "0.0.0.0:8100",
    "[::ffff:127.0.0.1]",
    "[::]",
    "[fe80::1%lo]",
    "::1",
    "[::1",
    "localhost\x00.evil",
    "lоcalhost",  # a Cyrillic о
    "127.0.0.1:８０",  # fullwidth digits pass str.isdigit
    "x" * 10_000,
]


def test_loopback_names_are_accepted() -> None:
    for host in ACCEPTED:
        assert loopback_host_header(host), host


def test_everything_else_is_refused() -> None:
    for host in REFUSED:
        assert not loopback_host_header(host), host


@given(
    st.one_of(
        st.text(max_size=60), st.from_regex(r"\A(127\.[0-9.]{1,12}|localhost|\[::1\])[:.\]a-z0-9]{0,12}\Z")
    )
)
def test_an_accepted_header_names_loopback_and_nothing_more(value: str) -> None:
    if not loopback_host_header(value):
        return
    v = value.strip()
    if v.startswith("["):
        name, _, rest = v[1:].partition("]")
        assert ipaddress.IPv6Address(name) == ipaddress.IPv6Address("::1")
    else:
        name, _, rest = v.partition(":")
        assert name.lower() == "localhost" or ipaddress.IPv4Address(name).is_loopback
    port = rest.removeprefix(":") if v.startswith("[") else rest
    assert port == "" or (port.isascii() and port.isdigit() and 0 < int(port) < 65536)
