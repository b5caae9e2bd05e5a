"""`mnemolog serve`: a real HTTP client against a real server process on 127.0.0.1."""

from __future__ import annotations

import io
import json
import socket
import subprocess
import sys
import tarfile
import threading
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from mnemolog.cli.agents import http_api, operations
from mnemolog.eventlog.errors import BadInput
from mnemolog.substrate.api import Substrate
from mnemolog.substrate.home import init_home

TOKEN = "t0ken-for-the-tests-0123456789"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    def __init__(self, home: Path, listen: str | None = None) -> None:
        self.port = free_port()
        self.listen = listen or f"127.0.0.1:{self.port}"
        self.url = f"http://127.0.0.1:{self.port}"
        self.p = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "mnemolog.cli.main",
                "--home",
                str(home),
                "serve",
                "--listen",
                self.listen,
            ],
            stderr=subprocess.PIPE,
        )
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.2).close()
                return
            except OSError:
                assert self.p.poll() is None, self.p.stderr.read() if self.p.stderr else ""
                assert time.monotonic() < deadline, "the server did not start"
                time.sleep(0.1)

    def stop(self) -> str:
        self.p.terminate()
        assert self.p.wait(timeout=30) == 0  # a clean shutdown
        err = self.p.stderr.read().decode() if self.p.stderr else ""
        assert "Traceback" not in err, err
        return err


def with_config(home: Path, text: str) -> None:
    cfg = home / "config.toml"
    cfg.write_text(cfg.read_text() + "\n" + text)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    init_home(tmp_path / "home")
    return tmp_path / "home"


@pytest.fixture
def server(home: Path) -> Iterator[Server]:
    s = Server(home)
    yield s
    s.stop()


@pytest.fixture
def http(server: Server) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=60) as c:
        yield c


def test_the_endpoints(http: httpx.Client, home: Path) -> None:
    r = http.get("/health")
    assert r.status_code == 200
    h = r.json()
    assert h["ok"] and h["log"]["size"] >= 1 and h["last_checkpoint"]["size"] >= 1 and h["version"]
    r = http.post("/memory", json={"content": "Workers timed out: the pool was exhausted.", "tags": ["ops"]})
    assert r.status_code == 201
    a = r.json()["memory"]
    assert a["tags"] == ["ops"] and a["created_at"].endswith("Z")
    b = http.post("/memory", json={"content": "Raise the pool to 50 on checkout.", "kind": "decision"}).json()
    b = b["memory"]
    r = http.get(f"/memory/{a['id']}")
    assert r.status_code == 200 and r.json()["memory"]["id"] == a["id"]
    r = http.get(f"/memory/{a['id']}", params={"verbose": "true"})
    assert r.json()["memory"]["metadata"] == {} and "stored_seq" in r.json()["memory"]
    r = http.put(f"/memory/{a['id']}", json={"title": "Pool exhaustion"})
    assert r.status_code == 200 and r.json()["memory"]["title"] == "Pool exhaustion"
    r = http.post("/links", json={"src": b["id"], "dst": a["id"], "relation": "derived_from"})
    assert r.status_code == 201 and r.json()["link"]["relation"] == "derived_from"
    r = http.post("/recall", json={"query": "why did workers time out"})
    assert r.status_code == 200 and r.json()["results"][0]["id"] == a["id"]
    r = http.post("/search", json={"query": "pool", "kinds": ["decision"]})
    assert [m["id"] for m in r.json()["results"]] == [b["id"]]
    r = http.post("/list", json={"limit": 1})
    assert [m["id"] for m in r.json()["memories"]] == [b["id"]]
    r = http.post(f"/memory/{a['id']}/archive", json={"reason": "test"})
    assert r.json()["memory"]["archived"] is True
    r = http.post(f"/memory/{a['id']}/restore")
    assert "archived" not in r.json()["memory"]
    r = http.get(f"/memory/{a['id']}/history")
    types = [e["type"] for e in r.json()["events"]]
    assert types == ["memory.stored", "memory.updated", "link.created", "memory.archived", "memory.restored"]
    r = http.get("/stats")
    assert r.json()["stats"]["memories"] == 2 and r.json()["stats"]["links"] == 1
    r = http.post("/verify")
    assert r.status_code == 200 and r.json()["entries"] == 7  # genesis and the six writes above
    r = http.post("/verify", json={"hashes_only": True})
    assert r.status_code == 200 and r.json()["hashes_only"] is True


def test_bundles_come_back_as_tars_and_verify(http: httpx.Client, home: Path) -> None:
    m = http.post("/memory", json={"content": "An audited decision about the checkout pool."}).json()[
        "memory"
    ]
    r = http.post("/bundles", json={"memory_id": m["id"]})
    assert r.status_code == 200 and r.headers["content-type"] == "application/x-tar"
    assert int(r.headers["x-mnemolog-entries"]) >= 1
    data = r.content
    with tarfile.open(fileobj=io.BytesIO(data)) as t:
        assert any(n.endswith("VERIFY.md") for n in t.getnames())
    key = subprocess.run(
        [sys.executable, "-m", "mnemolog.cli.main", "--home", str(home), "--json", "key", "show"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    vkey = json.loads(key)["vkey"]
    r = http.post(
        "/verify", content=data, headers={"content-type": "application/x-tar"}, params={"trusted_key": vkey}
    )
    assert r.status_code == 200, r.text
    assert r.json()["memory_id"] == m["id"] and r.json()["trust"]["pinned"] is True
    forged = bytearray(data)
    i = forged.find(b"audited")
    forged[i] ^= 0x20
    r = http.post("/verify", content=bytes(forged), headers={"content-type": "application/x-tar"})
    assert r.status_code == 422 and r.json()["exit_code"] == 8
    r = http.post("/bundles", json={"memory_id": m["id"], "output": "/tmp/x.tar"})
    assert r.status_code == 400 and r.json()["details"]["field"] == "output"
    r = http.post("/bundles", json={"memory_id": "01ABCDEFGHJKMNPQRSTVWXYZ00"})
    assert r.status_code == 404 and r.json()["error"] == "not_found"


def test_errors_are_the_cli_objects_with_statuses(http: httpx.Client) -> None:
    def err(r: httpx.Response, status: int, exit_code: int) -> dict[str, Any]:
        assert r.status_code == status, r.text
        body = r.json()
        assert body["ok"] is False and body["exit_code"] == exit_code and set(body) == {
            "ok", "error", "message", "exit_code", "details",
        }  # fmt: skip
        return body

    assert (
        err(http.post("/memory", json={"content": "x", "tags": "x"}), 400, 64)["details"]["field"] == "tags"
    )
    assert err(http.post("/list", json={"kinds": "decision"}), 400, 64)["details"]["field"] == "kinds"
    assert (
        err(http.post("/memory", json={"content": "x", "bogus": 1}), 400, 64)["details"]["field"] == "bogus"
    )
    err(http.post("/memory", json={"content": ""}), 422, 65)
    err(http.get("/memory/01ABCDEFGHJKMNPQRSTVWXYZ00"), 404, 2)
    err(http.put("/memory/01ABCDEFGHJKMNPQRSTVWXYZ00", json={"title": "t"}), 404, 2)
    err(http.put("/memory/A", json={"id": "B", "title": "t"}), 400, 64)
    err(http.get("/memory/A", params={"verbose": "maybe"}), 400, 64)
    err(http.get("/memory/A", params={"other": "1"}), 400, 64)
    err(http.post("/memory", content=b'{"content":"x"}', headers={"content-type": "text/plain"}), 415, 64)
    err(
        http.post("/memory", content=b'{"content": "x"', headers={"content-type": "application/json"}),
        422,
        65,
    )
    err(http.post("/memory", content=b"[" * 100_000, headers={"content-type": "application/json"}), 422, 65)
    err(
        http.post("/memory", content=b'{"content":"\xff"}', headers={"content-type": "application/json"}),
        422,
        65,
    )
    err(
        http.post("/memory", content=b'{"content":NaN}', headers={"content-type": "application/json"}),
        422,
        65,
    )
    err(http.post("/memory", content=b"[1]", headers={"content-type": "application/json"}), 422, 65)
    big = json.dumps({"content": "x" * (3 * 1024 * 1024)}).encode()
    err(http.post("/memory", content=big, headers={"content-type": "application/json"}), 413, 64)
    err(http.get("/nope"), 404, 64)
    err(http.delete("/stats"), 405, 64)
    err(http.get("/stats", headers={"host": "attacker.example"}), 421, 64)
    # DNS rebinding: names an attacker's DNS can point at 127.0.0.1 are refused on every route.
    for host in ("127.evil.com", "127.0.0.1.attacker.example", "[::1]attacker.example", "localhost.evil:80"):
        err(http.get("/list", headers={"host": host}), 421, 64)
        err(http.post("/memory", json={"content": "planted"}, headers={"host": host}), 421, 64)
        err(http.get("/no/such/route", headers={"host": host}), 421, 64)
    for host in ("localhost:8100", "127.0.0.2", "[::1]:8100"):
        assert http.get("/stats", headers={"host": host}).status_code == 200, host
    # None of it wrote anything.
    assert http.get("/stats").json()["stats"]["memories"] == 0


def test_openapi_document_describes_every_route(http: httpx.Client) -> None:
    doc = http.get("/openapi.json").json()
    assert doc["openapi"].startswith("3.1")
    for ep in http_api.served():
        assert ep.method.lower() in doc["paths"][ep.path]
    store = doc["paths"]["/memory"]["post"]
    schema = store["requestBody"]["content"]["application/json"]["schema"]
    assert schema == operations.StoreArgs.model_json_schema()
    assert (
        store["responses"]["201"]["content"]["application/json"]["schema"]
        == operations.OPERATIONS["memory_store"].output
    )
    put = doc["paths"]["/memory/{id}"]["put"]
    assert "id" not in put["requestBody"]["content"]["application/json"]["schema"]["properties"]
    assert put["parameters"][0] == {
        "name": "id",
        "in": "path",
        "required": True,
        "schema": {"type": "string"},
    }


def test_status_mapping_is_total() -> None:
    from mnemolog.eventlog.errors import MnemologError

    for code in (1, 2, 3, 4, 5, 6, 7, 8, 64, 65, 70):
        e = MnemologError("x")
        e.exit_code = code  # type: ignore[misc]
        assert 400 <= http_api.status_for(e) < 600


def test_a_token_is_required_once_configured(home: Path) -> None:
    with_config(home, f'[http]\ntoken = "{TOKEN}"\n')
    s = Server(home)
    try:
        with httpx.Client(base_url=s.url, timeout=60) as c:
            r = c.get("/stats")
            assert r.status_code == 401 and r.json()["error"] == "unauthorized"
            assert r.headers["www-authenticate"] == "Bearer"
            assert c.get("/stats", headers={"authorization": "Bearer wrong"}).status_code == 401
            assert c.get("/stats", headers={"authorization": f"Basic {TOKEN}"}).status_code == 401
            ok = c.get("/stats", headers={"authorization": f"Bearer {TOKEN}"})
            assert ok.status_code == 200
            # With a token, any Host may ask (the token is the guard).
            ok = c.get("/stats", headers={"authorization": f"Bearer {TOKEN}", "host": "mem.example:8100"})
            assert ok.status_code == 200
    finally:
        s.stop()


def test_refuses_beyond_loopback_without_a_token(home: Path) -> None:
    argv = [sys.executable, "-m", "mnemolog.cli.main", "--home", str(home), "--json", "serve"]
    r = subprocess.run(
        [*argv, "--listen", "0.0.0.0:8100"], capture_output=True, text=True, timeout=60, check=False
    )
    assert r.returncode == 64 and "loopback" in json.loads(r.stdout)["message"]
    for bad in ("nohost", "127.0.0.1:0", "127.0.0.1:99999", "example.com:80", "[::1"):
        r = subprocess.run(
            [sys.executable, "-m", "mnemolog.cli.main", "--home", str(home), "serve", "--listen", bad],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert r.returncode == 64, bad


def test_a_bad_http_table_is_refused(home: Path) -> None:
    with_config(home, '[http]\ntoken = "short"\n')
    r = subprocess.run(
        [sys.executable, "-m", "mnemolog.cli.main", "--home", str(home), "serve"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert r.returncode == 65 and "http.token" in r.stderr


def test_slow_clients_time_out(home: Path) -> None:
    with_config(home, "[http]\nheader_timeout_s = 1\nbody_timeout_s = 1\n")
    s = Server(home)
    try:
        # Headers that never finish: the connection is closed.
        with socket.create_connection(("127.0.0.1", s.port), 5) as c:
            c.sendall(b"GET /stats HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            c.settimeout(10)
            t0 = time.monotonic()
            assert c.recv(1024) == b""
            assert time.monotonic() - t0 < 9
        # A connection that never says anything: closed as well.
        with socket.create_connection(("127.0.0.1", s.port), 5) as c:
            c.settimeout(10)
            assert c.recv(1024) == b""
        # A body that trickles: 408 with the error object.
        with socket.create_connection(("127.0.0.1", s.port), 5) as c:
            c.sendall(
                b"POST /memory HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                b'Content-Length: 100\r\n\r\n{"content"'
            )
            c.settimeout(10)
            reply = b""
            while b"}" not in reply.partition(b"\r\n\r\n")[2]:  # headers and body may come apart
                more = c.recv(4096)
                if not more:
                    break
                reply += more
            assert reply.startswith(b"HTTP/1.1 408"), reply[:200]
            assert b'"request_timeout"' in reply
        # The server still serves.
        with httpx.Client(base_url=s.url, timeout=60) as h:
            assert h.get("/stats").json()["stats"]["memories"] == 0
    finally:
        s.stop()


def _read_reply(c: socket.socket) -> bytes:
    """One whole response (headers and a Content-Length body) or what came before EOF."""
    reply = b""
    while True:
        head, sep, body = reply.partition(b"\r\n\r\n")
        if sep:
            length = next(
                (
                    int(line.split(b":", 1)[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                ),
                0,
            )
            if len(body) >= length:
                return reply
        more = c.recv(65536)
        if not more:
            return reply
        reply += more


def _peer(port: int, source: str) -> socket.socket:
    c = socket.socket()
    c.settimeout(30)
    c.bind((source, 0))
    c.connect(("127.0.0.1", port))
    return c


def test_one_peer_cannot_starve_the_others(home: Path) -> None:
    # 127.0.0.2 is the greedy peer (every 127/8 address is loopback); the test itself is 127.0.0.1.
    with_config(home, "[http]\nmax_connections_per_peer = 4\n")
    s = Server(home)
    held: list[socket.socket] = []
    try:
        request = f"GET /health HTTP/1.1\r\nHost: 127.0.0.1:{s.port}\r\n\r\n".encode()
        # Four keep-alive connections, each answered once: they are open and counted.
        for _ in range(4):
            c = _peer(s.port, "127.0.0.2")
            held.append(c)
            c.sendall(request)
            assert _read_reply(c).startswith(b"HTTP/1.1 200"), "a connection within the share is served"
        # Every further connection from that address is refused at once with the error object.
        for _ in range(40):
            with _peer(s.port, "127.0.0.2") as c:
                reply = _read_reply(c)
                assert reply.startswith(b"HTTP/1.1 503"), reply[:200]
                assert b'"too_many_connections"' in reply and b'"limit":4' in reply.replace(b" ", b"")
        # Another peer is served meanwhile, over several connections of its own.
        for _ in range(3):
            with httpx.Client(base_url=s.url, timeout=60) as h:
                assert h.get("/health").status_code == 200
        # The greedy peer's held connections still work (keep-alive), and once it closes one
        # it may open another (the count drops when the server sees the close).
        held[0].sendall(request)
        assert _read_reply(held[0]).startswith(b"HTTP/1.1 200")
        held.pop().close()
        for _ in range(200):  # bounded: the close reaches the server's loop in a moment
            with _peer(s.port, "127.0.0.2") as c:
                c.sendall(request)
                if _read_reply(c).startswith(b"HTTP/1.1 200"):
                    break
            time.sleep(0.05)
        else:
            pytest.fail("a closed connection was never given back to its peer")
    finally:
        for c in held:
            c.close()
        s.stop()


def test_the_per_peer_setting_is_checked(home: Path) -> None:
    for bad in ("0", "-1", "true", '"4"', "100000", "1.5"):
        with pytest.raises(BadInput, match="max_connections_per_peer"):
            http_api.HttpSettings.from_config(tomllib.loads(f"[http]\nmax_connections_per_peer = {bad}\n"))
    ok = http_api.HttpSettings.from_config(tomllib.loads("[http]\nmax_connections_per_peer = 1\n"))
    assert ok.max_connections_per_peer == 1
    assert http_api.HttpSettings.from_config({}).max_connections_per_peer == http_api.MAX_CONNECTIONS_PER_PEER


@pytest.mark.slow
def test_load_four_clients_every_write_acknowledged_once(home: Path) -> None:
    server = Server(home)
    clients, per_client = 4, 500
    acks: dict[int, list[str]] = {i: [] for i in range(clients)}
    failures: list[str] = []

    def work(i: int) -> None:
        with httpx.Client(base_url=server.url, timeout=120) as c:
            for j in range(per_client):
                r = c.post(
                    "/memory", json={"content": f"load test memory {i}-{j}", "namespace": f"load/c{i}"}
                )
                if r.status_code != 201:
                    failures.append(f"{i}-{j}: {r.status_code} {r.text[:200]}")
                    continue
                acks[i].append(r.json()["memory"]["id"])

    threads = [threading.Thread(target=work, args=(i,)) for i in range(clients)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=900)
    finally:
        server.stop()
    assert not failures, failures[:5]
    ids = [x for i in range(clients) for x in acks[i]]
    assert len(ids) == clients * per_client and len(set(ids)) == len(ids)
    # The log holds exactly one memory.stored per acknowledged write, with the content it was sent.
    with Substrate.open(home, long_lived=False) as s:
        stored = [e for e in s.log.iter_entries() if e.type == "memory.stored"]
    assert sorted(e.data["id"] for e in stored) == sorted(ids)
    contents = {s.keys.upcast(e.type, e.tv, e.data)["content"] for e in stored}
    assert contents == {f"load test memory {i}-{j}" for i in range(clients) for j in range(per_client)}


def test_the_token_never_appears_in_answers_or_logs(home: Path) -> None:
    with_config(home, f'[http]\ntoken = "{TOKEN}"\n')
    s = Server(home)
    try:
        with httpx.Client(base_url=s.url, timeout=60) as c:
            r = c.get("/stats", headers={"authorization": "Bearer nope"})
            assert TOKEN not in r.text
    finally:
        err = s.stop()
    assert TOKEN not in err
