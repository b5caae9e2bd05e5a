"""Where a network server listens: `HOST:PORT` parsed, and loopback told apart from the rest.

Both network surfaces (the MCP server's streamable HTTP and the HTTP API)
bind loopback by default; anything else reaches other machines, which the
HTTP API allows only behind a bearer token and the MCP server not at all.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from mnemolog.eventlog.errors import UsageError

DEFAULT_PORT = 8100


@dataclass(frozen=True)
class Listen:
    host: str
    port: int

    @property
    def loopback(self) -> bool:
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False

    @property
    def url_host(self) -> str:
        return f"[{self.host}]" if ":" in self.host else self.host


def loopback_host_header(value: str) -> bool:
    """Whether an HTTP Host header names this machine: `localhost`, a literal loopback IPv4
    address or `[::1]`, each with an optional port, and nothing else.

    The header is parsed, never matched by prefix: `127.evil.com` and
    `127.0.0.1.attacker.example` are names an attacker's DNS can point at 127.0.0.1,
    which is exactly what a DNS-rebinding page relies on.
    """
    v = value.strip()
    if not v or len(v) > 300 or not v.isascii():
        return False
    if v.startswith("["):
        inside, sep, rest = v[1:].partition("]")
        if not sep or (rest and not rest.startswith(":")):
            return False
        host, port = inside, rest[1:] if rest else None
        try:
            addr = ipaddress.IPv6Address(host)
        except ValueError:
            return False
        ok = addr == ipaddress.IPv6Address("::1")
    else:
        host, sep, port_s = v.partition(":")
        port = port_s if sep else None
        if host.lower() == "localhost":
            ok = True
        else:
            try:
                ok = ipaddress.IPv4Address(host).is_loopback
            except ValueError:
                return False
    if port is not None and not (port.isdigit() and len(port) <= 5 and 0 < int(port) < 65536):
        return False
    return ok


def parse_listen(text: str, *, allow_remote: bool, what: str = "--listen") -> Listen:
    """`HOST:PORT`, `[V6]:PORT` or `:PORT` (loopback); refuses non-loopback unless allowed."""
    t = text.strip()
    if t.startswith("["):
        host, sep, port_s = t[1:].partition("]:")
        if not sep:
            raise UsageError(f"{what}: expected [IPV6]:PORT, found {text!r}", field=what)
    else:
        host, sep, port_s = t.rpartition(":")
        if not sep:
            raise UsageError(f"{what}: expected HOST:PORT, found {text!r}", field=what)
    host = host or "127.0.0.1"
    if host != "localhost":
        try:
            ipaddress.ip_address(host)
        except ValueError as exc:
            raise UsageError(
                f"{what}: {host!r} is not an IP address (or localhost); give the address to bind",
                field=what,
            ) from exc
    if not port_s.isdigit() or not 0 < int(port_s) < 65536:
        raise UsageError(f"{what}: the port must be 1-65535, found {port_s!r}", field=what)
    listen = Listen(host, int(port_s))
    if not listen.loopback and not allow_remote:
        raise UsageError(
            f"{what}: refusing to listen on {host}, which is not a loopback address "
            "(configure [http] token in config.toml to serve beyond this machine)"
            if what == "--listen"
            else f"{what}: only loopback addresses (127.0.0.1, ::1, localhost), found {host}",
            field=what,
            found=host,
        )
    return listen
