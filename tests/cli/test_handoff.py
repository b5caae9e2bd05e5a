"""The hand-off (cli.handoff): `store`, `get` and `recall` run by a running `mnemolog serve` of the
home print exactly what they print in process, and anything doubtful falls back to in process."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mnemolog.cli import handoff
from mnemolog.substrate.home import init_home
from tests.support.cli import Cli, Ran

OFF = {handoff.ENV: "0"}
ON = {handoff.ENV: None}
TOKEN = "t0ken-for-the-handoff-0123456789"


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), 0.2).close()
    except OSError:
        return False
    return True


class Server:
    """A real `mnemolog serve` of `home` on a free loopback port, started and waited for."""

    def __init__(self, home: Path) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        env = {k: v for k, v in os.environ.items() if k != handoff.ENV}
        self.home = home
        self.port = port
        self.p = subprocess.Popen(
            [sys.executable, "-m", "mnemolog.cli.main", "--home", str(home), "serve", "--listen",
             f"127.0.0.1:{port}"],
            stderr=subprocess.PIPE,
            env=env,
        )  # fmt: skip
        deadline = time.monotonic() + 90
        # The socket is announced before the TCP listener is up: wait for both.
        while handoff.find(str(home)) is None or not _listening(port):
            assert self.p.poll() is None, self.p.stderr.read() if self.p.stderr else ""
            assert time.monotonic() < deadline, "the server did not start"
            time.sleep(0.1)

    def served(self) -> dict[str, int]:
        """The server's count of handed-off calls, asked over its socket."""
        s = socket.socket(socket.AF_UNIX)
        s.connect(str(self.home / "run" / "serve.sock"))
        s.sendall(b"GET /cli/served HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        raw = b""
        while chunk := s.recv(65536):
            raw += chunk
        s.close()
        counts: dict[str, int] = json.loads(raw.split(b"\r\n\r\n", 1)[1])["served"]
        return counts

    def stop(self) -> None:
        self.p.terminate()
        assert self.p.wait(timeout=30) == 0
        err = self.p.stderr.read().decode() if self.p.stderr else ""
        assert "Traceback" not in err, err

    def kill(self) -> None:
        self.p.send_signal(signal.SIGKILL)
        self.p.wait(timeout=30)
        if self.p.stderr:
            self.p.stderr.close()


@pytest.fixture(scope="module")
def served_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Server]]:
    home = tmp_path_factory.mktemp("handoff") / "home"
    init_home(home)
    server = Server(home)
    yield home, server
    server.stop()


def both(cli: Cli, home: Path, *argv: str, json: bool = False, stdin: bytes | None = None) -> Ran:
    """Run ARGV handed off and in process; assert they printed the same bytes and exit code."""
    on = cli.process(home, *argv, json=json, env=ON, stdin=stdin)
    off = cli.process(home, *argv, json=json, env=OFF, stdin=stdin)
    assert (on.code, on.stdout_bytes, on.stderr_bytes) == (off.code, off.stdout_bytes, off.stderr_bytes)
    return on


def test_handed_off_commands_print_what_in_process_ones_do(
    cli: Cli, served_home: tuple[Path, Server]
) -> None:
    home, server = served_home
    before = server.served()
    a = cli.process(home, "store", "The pool was exhausted on checkout", "--tag", "ops", "--json", env=ON)
    b = cli.process(
        home, "store", "-", "--kind", "decision", "--meta", '{"k": [1, 2.5]}', "--title", "Pool",
        "--project", "", "--confidence", "0.75", env=OFF, stdin=b"Raise the pool to 50 on checkout.",
    )  # fmt: skip
    assert a.code == 0 and b.code == 0, a.output + b.output
    a_id = json.loads(a.stdout)["memory"]["id"]
    b_id = b.stdout.split()[-1]
    assert cli.process(home, "link", a_id, b_id, env=ON).code == 0  # in process (not handed off)
    for mid in (a_id, b_id):
        both(cli, home, "get", mid)
        both(cli, home, "get", mid, json=True)
    for argv in (
        ("recall", "pool"),
        ("recall", "pool checkout", "--explain"),
        ("recall", "pool", "--tag", "ops", "--limit", "1"),
        ("recall", "pool", "--kind", "decision", "--namespace", "default", "--exact-namespace"),
        ("recall", "pool", "--as-of", "2", "--status", "active", "--status", "candidate"),
        ("recall", "pool", "--min-score", "0.5", "--mode", "bm25"),
        ("recall", "nothing-matches-this"),
    ):
        both(cli, home, *argv)
        both(cli, home, *argv, json=True)
    # A retry with --id says "already stored" alike, and writes nothing either way.
    both(cli, home, "store", "The pool was exhausted on checkout", "--tag", "ops", "--id", a_id)
    both(cli, home, "store", "The pool was exhausted on checkout", "--tag", "ops", "--id", a_id, json=True)
    after = server.served()
    assert after["store"] - before["store"] == 3
    assert after["get"] - before["get"] == 4
    assert after["recall"] - before["recall"] == 14
    # Each store was written exactly once: two memories, however many calls.
    assert len(cli.ok(home, "list")["memories"]) == 2


def test_a_new_store_prints_the_same_either_way(cli: Cli, served_home: tuple[Path, Server]) -> None:
    home, _ = served_home
    docs = []
    for env, mid in ((ON, "01KA0000000000000000000001"), (OFF, "01KA0000000000000000000002")):
        ran = cli.process(
            home, "store", "A fresh memory", "--id", mid, "--occurred-at", "2023-05-08", "--json", env=env
        )
        assert ran.code == 0, ran.output
        doc = json.loads(ran.stdout)
        masked = {"id", "created_at", "updated_at", "stored_seq", "last_event_seq"}
        docs.append({k: v for k, v in doc["memory"].items() if k not in masked})
        assert doc["memory"]["occurred_at"] == 1_683_504_000_000_000
        human = cli.process(
            home, "store", "A fresh memory", "--id", mid, "--occurred-at", "2023-05-08", env=env
        )
        assert human.stdout == f"already stored {mid}\n"
    assert docs[0] == docs[1]


@pytest.mark.parametrize(
    "argv",
    [
        ("get", "01KA0000000000000000000009"),
        ("get", "not-an-id"),
        ("store", "x", "--confidence", "2"),
        ("store", "x", "--meta", "[1]"),
        ("store", "x", "--domain", "no-such-domain"),
        ("store", ""),
        ("store", "x", "--occurred-at", "last week"),
        ("recall", "pool", "--as-of", "not-a-time"),
        ("recall", "pool", "--as-of", "99999"),
    ],
)
def test_errors_are_the_same_exit_code_and_message(
    cli: Cli, served_home: tuple[Path, Server], argv: tuple[str, ...]
) -> None:
    home, _ = served_home
    ran = both(cli, home, *argv)
    assert ran.code >= 2, ran.output
    doc = both(cli, home, *argv, json=True).single
    assert doc["ok"] is False and doc["exit_code"] == ran.code and doc["error"]


def test_the_network_api_has_no_command_line_route(served_home: tuple[Path, Server]) -> None:
    """POST /cli is served on the home's socket only: over TCP it is no route of the HTTP API."""
    import http.client

    _, server = served_home
    body = json.dumps({"protocol": 1, "command": "get", "args": {"memory_id": "x"}})
    for host in ("localhost", "evil.example"):
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
        conn.request("POST", "/cli", body=body, headers={"Content-Type": "application/json", "Host": host})
        resp = conn.getresponse()
        doc = json.loads(resp.read())
        conn.close()
        assert (resp.status, doc["error"]) == (
            (404, "no_route") if host == "localhost" else (421, "forbidden_host")
        )
        assert resp.getheader(handoff.REFUSED_HEADER) is None


def test_off_by_env_or_config(cli: Cli, served_home: tuple[Path, Server]) -> None:
    home, server = served_home
    before = server.served()
    assert cli.process(home, "recall", "pool", env=OFF).code == 0
    config = home / "config.toml"
    text = config.read_text()
    try:
        config.write_text(text + "\n[cli]\nhandoff = false\n")
        assert cli.process(home, "recall", "pool", env=ON).code == 0
        assert server.served() == before
    finally:
        config.write_text(text)
    assert cli.process(home, "recall", "pool", env=ON).code == 0
    assert server.served()["recall"] == before["recall"] + 1


def test_the_socket_asks_for_the_http_token_and_a_wrong_one_falls_back(cli: Cli, tmp_path: Path) -> None:
    home = tmp_path / "home"
    init_home(home)
    config = home / "config.toml"
    text = config.read_text()
    config.write_text(text + f'\n[http]\ntoken = "{TOKEN}"\n')
    server = Server(home)
    try:
        assert cli.process(home, "recall", "pool", env=ON).code == 0
        assert server.served()["recall"] == 1  # the command line sent the configured token
        config.write_text(text + '\n[http]\ntoken = "another-token-0123456789"\n')
        ran = cli.process(home, "store", "written once", "--json", env=ON)
        assert ran.code == 0, ran.output
        assert server.served()["store"] == 0  # refused before it ran: stored in process, once
        assert len(cli.ok(home, "list")["memories"]) == 1
    finally:
        config.write_text(text + f'\n[http]\ntoken = "{TOKEN}"\n')
        server.stop()


def test_a_killed_server_is_ignored_and_replaced(cli: Cli, tmp_path: Path) -> None:
    home = tmp_path / "home"
    init_home(home)
    server = Server(home)
    server.kill()
    assert (home / "run" / "serve.json").exists()  # stale: nobody cleaned up
    ran = cli.process(home, "store", "after the crash", "--json", env=ON)
    assert ran.code == 0, ran.output
    assert cli.process(home, "recall", "crash", env=ON).code == 0
    again = Server(home)  # a stale announcement never stops a new server
    try:
        both(cli, home, "recall", "crash")
        assert again.served()["recall"] == 1
    finally:
        again.stop()
    assert not (home / "run" / "serve.json").exists() and not (home / "run" / "serve.sock").exists()
    assert len(cli.ok(home, "list")["memories"]) == 1


# -- hostile or broken announcements, in process (no server) -------------------------------------


@pytest.fixture
def home(tmp_path: Path) -> Path:
    root = tmp_path / "home"
    init_home(root)
    (root / "run").mkdir(mode=0o700)
    return root


def announce(root: Path, **changes: Any) -> Path:
    real = os.path.realpath(root)
    sock = os.path.join(real, "run", "serve.sock")
    doc = {"protocol": 1, "pid": os.getpid(), "home": real, "socket": sock, "version": "0", "log_id": ""}
    doc.update(changes)
    (root / "run" / "serve.json").write_text(json.dumps(doc))
    return Path(sock)


def dead_socket(path: Path) -> None:
    """A socket file nothing listens on (its server closed without removing it)."""
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(path))
    s.close()


@contextlib.contextmanager
def answering(path: Path, reply: bytes) -> Iterator[list[bytes]]:
    """A socket at `path` that reads one request and answers `reply` (then closes)."""
    got: list[bytes] = []
    srv = socket.socket(socket.AF_UNIX)
    srv.bind(str(path))
    srv.listen(4)

    def serve() -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = srv.accept()
                data = b""
                conn.settimeout(10)
                with contextlib.suppress(OSError):
                    while b"\r\n\r\n" not in data or len(data.split(b"\r\n\r\n", 1)[1]) < _length(data):
                        chunk = conn.recv(65536)
                        if not chunk:
                            break
                        data += chunk
                got.append(data)
                conn.sendall(reply)
                conn.close()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        yield got
    finally:
        srv.close()
        path.unlink()


def _length(data: bytes) -> int:
    for line in data.split(b"\r\n\r\n", 1)[0].split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            return int(line.split(b":", 1)[1])
    return 0


def memories(cli: Cli, home: Path) -> int:
    return len(cli.ok(home, "list", env=OFF)["memories"])


@pytest.mark.parametrize(
    "state",
    [
        b"",
        b"{",
        b'{"protocol": 1, "pid": ',
        b"[1, 2, 3]",
        b"\xff\xfe not utf-8",
        b'{"protocol": 1}',
        b" " * 5000 + b"{}",
        json.dumps({"protocol": 2}).encode(),
    ],
)
def test_a_malformed_state_file_falls_back(cli: Cli, home: Path, state: bytes) -> None:
    dead_socket(home / "run" / "serve.sock")
    (home / "run" / "serve.json").write_bytes(state)
    ran = cli(home, "store", "kept once", json=True, env=ON)
    assert ran.code == 0, ran.output
    assert cli(home, "recall", "kept", env=ON).code == 0
    assert memories(cli, home) == 1


@pytest.mark.parametrize(
    "case",
    ["dead_pid", "other_home", "other_socket", "socket_is_a_file", "dead_socket", "no_socket", "huge",
     "state_is_a_dir", "state_is_a_link", "state_is_a_fifo", "run_dir_open"],
)  # fmt: skip
def test_a_stale_or_foreign_announcement_falls_back(cli: Cli, home: Path, tmp_path: Path, case: str) -> None:
    run = home / "run"
    sock = announce(home)
    if case == "dead_pid":
        p = subprocess.Popen([sys.executable, "-c", "pass"])
        p.wait()
        dead_socket(sock)
        announce(home, pid=p.pid)
    elif case == "other_home":
        other = tmp_path / "other"
        other.mkdir()
        dead_socket(other / "s.sock")
        announce(home, home=str(other))
    elif case == "other_socket":
        dead_socket(tmp_path / "elsewhere.sock")
        announce(home, socket=str(tmp_path / "elsewhere.sock"))
    elif case == "socket_is_a_file":
        sock.write_bytes(b"not a socket")
    elif case == "dead_socket":
        dead_socket(sock)
    elif case == "huge":
        dead_socket(sock)
        (run / "serve.json").write_bytes(b"{" + b" " * (10 * 1024 * 1024) + b"}")
    elif case == "state_is_a_dir":
        (run / "serve.json").unlink()
        (run / "serve.json").mkdir()
    elif case == "state_is_a_link":
        (tmp_path / "real.json").write_text((run / "serve.json").read_text())
        (run / "serve.json").unlink()
        (run / "serve.json").symlink_to(tmp_path / "real.json")
    elif case == "state_is_a_fifo":
        (run / "serve.json").unlink()
        os.mkfifo(run / "serve.json")
    elif case == "run_dir_open":
        dead_socket(sock)
        run.chmod(0o755)
    ran = cli(home, "store", "kept once", json=True, env=ON)
    assert ran.code == 0, ran.output
    assert cli(home, "get", ran.doc["memory"]["id"], env=ON).code == 0
    assert memories(cli, home) == 1


def test_a_read_with_a_garbled_answer_falls_back(cli: Cli, home: Path) -> None:
    sock = announce(home)
    stored = cli.ok(home, "store", "the real one", env=OFF)["memory"]["id"]
    for reply in (b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", b"garbage", b""):
        with answering(sock, reply) as got:
            ran = cli(home, "get", stored, json=True, env=ON)
            assert ran.code == 0 and ran.doc["memory"]["id"] == stored, ran.output
            assert got and b"POST /cli" in got[0]  # it asked, then worked in process


def test_a_store_sent_but_not_answered_is_not_written_again(cli: Cli, home: Path) -> None:
    sock = announce(home)
    with answering(sock, b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\n{{{") as got:
        ran = cli(home, "store", "maybe stored by the server", json=True, env=ON)
    assert got and b'"content": "maybe stored by the server"' in got[0]
    assert ran.code == 6 and ran.doc["error"] == "storage_error", ran.output
    assert "may have been written" in ran.doc["message"]
    assert memories(cli, home) == 0  # the command did not store it a second time itself


def test_a_store_refused_before_it_ran_is_stored_in_process_once(cli: Cli, home: Path) -> None:
    sock = announce(home)
    refusals = [
        b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain; charset=utf-8\r\n"
        b"Content-Length: 19\r\n\r\nService Unavailable",
        b"HTTP/1.1 401 Unauthorized\r\nX-Mnemolog-Handoff: refused\r\nContent-Length: 2\r\n\r\n{}",
    ]
    for n, reply in enumerate(refusals, start=1):
        with answering(sock, reply) as got:
            ran = cli(home, "store", f"stored here {n}", json=True, env=ON)
        assert got and ran.code == 0, ran.output
        assert memories(cli, home) == n


def test_a_server_error_is_raised_as_the_command_would(cli: Cli, home: Path) -> None:
    sock = announce(home)
    err = {"ok": False, "error": "not_found", "message": "no memory with id 'x'", "exit_code": 2,
           "details": {"id": "x"}}  # fmt: skip
    body = json.dumps(err).encode()
    reply = b"HTTP/1.1 404 Not Found\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    with answering(sock, reply):
        ran = cli(home, "get", "x", json=True, env=ON)
    assert ran.code == 2 and ran.single == err
    internal = {"ok": False, "error": "internal_error", "message": "m", "exit_code": 70,
                "details": {"type": "KeyError"}}  # fmt: skip
    body = json.dumps(internal).encode()
    reply = b"HTTP/1.1 500 Oops\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    with answering(sock, reply):
        ran = cli(home, "get", "x", env=ON)
    assert ran.code == 70 and "internal error (please report): KeyError" in ran.stderr


def test_a_tenant_or_an_empty_home_never_hands_off() -> None:
    assert handoff.home_root(None, "acme") is None
    assert handoff.home_root("", None) is None
    assert handoff.home_root("/x", None) == "/x"


def test_the_home_is_resolved_as_the_substrate_resolves_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from mnemolog.substrate.home import default_home

    for env in ({"MNEMOLOG_HOME": "/a"}, {"XDG_DATA_HOME": "/b"}, {}):
        monkeypatch.delenv("MNEMOLOG_HOME", raising=False)
        monkeypatch.delenv("XDG_DATA_HOME", raising=False)
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        assert handoff.home_root(None, None) == str(default_home())


def test_the_content_limit_is_the_substrates() -> None:
    from mnemolog.cli.commands import memory_front
    from mnemolog.substrate.api import MAX_CONTENT_BYTES

    assert memory_front.MAX_CONTENT_BYTES == MAX_CONTENT_BYTES


def test_store_get_and_recall_import_nothing_heavy_before_handing_off(home: Path) -> None:
    """Found an announcement? Then no duckdb, numpy, pydantic or substrate is imported at all."""
    sock = announce(home)
    m = {"id": "01KA0000000000000000000003", "namespace": "default", "kind": "observation", "content": "c",
         "created_at": 0, "updated_at": 0}  # fmt: skip
    body = json.dumps({"ok": True, "data": m}).encode()
    reply = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    code = (
        "import sys, json\n"
        "from mnemolog.cli.main import cli\n"
        "try:\n"
        f"    cli.main(args=['--home', {str(home)!r}, 'get', 'x'], prog_name='mnemolog')\n"
        "except SystemExit:\n"
        "    pass\n"
        "sys.__stderr__.write('\\n' + json.dumps(sorted(sys.modules)) + '\\n')\n"
    )
    env = {k: v for k, v in os.environ.items() if k != handoff.ENV}
    with answering(sock, reply) as got:
        p = subprocess.run(
            [sys.executable, "-c", code], check=False, capture_output=True, text=True, env=env, timeout=60
        )
    assert got, p.stderr
    assert p.stdout.startswith("id         01KA0000000000000000000003\n"), p.stdout + p.stderr
    mods = set(json.loads(p.stderr.strip().splitlines()[-1]))
    heavy = {
        "duckdb",
        "numpy",
        "pydantic",
        "nacl",
        "cbor2",
        "mnemolog.substrate.api",
        "mnemolog.substrate.home",
    }
    assert not mods & heavy, mods & heavy
