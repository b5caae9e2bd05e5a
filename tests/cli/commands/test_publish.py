"""`mnemolog log publish` and `mnemolog monitor` end to end, over a real HTTP server on 127.0.0.1.

The monitor follows a publication as it grows, and exits 8 naming sizes and
roots when the served log forks (a copy of the home with another history
published at the same URL, or a rewritten tile) or rolls back (an older
checkpoint served). Hostile servers and inputs (a malformed checkpoint, a
truncated or oversized tile, a path that climbs out of the prefix, a response
that never ends) end in a bounded time with a non-zero exit, never a traceback.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from mnemolog.eventlog.witness import tiles
from mnemolog.substrate.home import Home
from tests.support.cli import Cli

OK, STORAGE, VERIFY, USAGE = 0, 6, 8, 64


def grow(home: Home, n: int, tag: str = "a") -> None:
    with home.open_writer(periodic_checkpoints=False) as w:
        w.append_many([("note.test", {"i": i, "tag": tag}, 1) for i in range(n)])


def vkey(cli: Cli, home: Home) -> str:
    return cli.json(home.root, "key", "show")[1]["vkey"]


class Served:
    """A directory served over HTTP on 127.0.0.1; `mode` turns the server hostile."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.mode = "files"
        served = self

        class Handler(http.server.SimpleHTTPRequestHandler):
            def log_message(self, *a: object) -> None:
                pass

            def do_GET(self) -> None:
                if served.mode == "trickle":
                    self.send_response(200)
                    self.end_headers()
                    try:
                        for _ in range(200):
                            self.wfile.write(b"x")
                            self.wfile.flush()
                            time.sleep(0.05)
                    except OSError:
                        pass
                    return
                if served.mode == "huge" and self.path.endswith("checkpoint") is False:
                    self.send_response(200)
                    self.end_headers()
                    with contextlib.suppress(OSError):
                        self.wfile.write(b"\x00" * 10_000_000)
                    return
                super().do_GET()

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), partial(Handler, directory=str(root)))
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def serve() -> Iterator[Callable[[Path], Served]]:
    started: list[Served] = []

    def start(root: Path) -> Served:
        s = Served(root)
        started.append(s)
        return s

    yield start
    for s in started:
        s.close()


def publish(cli: Cli, home: Home, out: Path) -> dict[str, Any]:
    code, doc = cli.json(home.root, "log", "publish", str(out))
    assert code == OK, doc
    return doc


def test_monitor_follows_a_growing_publication_over_http(cli: Cli, make_home, tmp_path: Path, serve) -> None:
    home = make_home()
    grow(home, 300)
    pub = tmp_path / "pub"
    publish(cli, home, pub)
    srv = serve(pub)
    state = tmp_path / "state.json"
    code, doc = cli.json(
        None, "monitor", srv.url, "--state", str(state), "--trusted-key", vkey(cli, home), "--entries"
    )
    assert code == OK, doc
    assert doc["size"] == 301 and doc["previous_root"] is None and doc["entries_checked"] == 301
    grow(home, 300)
    publish(cli, home, pub)
    code, doc = cli.json(None, "monitor", srv.url, "--state", str(state), "--entries")
    assert code == OK, doc
    assert (doc["previous_size"], doc["size"], doc["entries_checked"]) == (301, 601, 300)
    code, doc = cli.json(None, "monitor", srv.url, "--state", str(state))
    assert code == OK and doc["new_entries"] == 0


def _fork(home: Home, tmp_path: Path) -> Home:
    copy = tmp_path / "forked-home"
    shutil.copytree(home.root, copy, ignore=shutil.ignore_patterns(".lock", ".want-*"))
    return Home(copy)


def test_a_fork_published_at_the_same_url_exits_8(cli: Cli, make_home, tmp_path: Path, serve) -> None:
    home = make_home()
    grow(home, 20)
    pub = tmp_path / "pub"
    publish(cli, home, pub)
    srv = serve(pub)
    state = tmp_path / "state.json"
    assert (
        cli.json(None, "monitor", srv.url, "--state", str(state), "--trusted-key", vkey(cli, home))[0] == OK
    )
    other = _fork(home, tmp_path)
    grow(home, 5, "honest")
    grow(other, 5, "forked")  # same key, same size, another history
    publish(cli, home, pub)
    assert cli.json(None, "monitor", srv.url, "--state", str(state))[0] == OK
    shutil.rmtree(pub)
    publish(cli, other, pub)
    seen = state.read_bytes()
    code, doc = cli.json(None, "monitor", srv.url, "--state", str(state))
    assert code == VERIFY and doc["details"]["check"] == "monitor.fork", doc
    assert "FORK" in doc["message"] and "size 26" in doc["message"]
    assert state.read_bytes() == seen  # the alarm repeats on the next run
    assert cli.json(None, "monitor", srv.url, "--state", str(state))[0] == VERIFY
    grow(other, 3, "forked")  # the fork grows past what was seen: its tiles rewrite the old edge
    publish(cli, other, pub)
    code, doc = cli.json(None, "monitor", srv.url, "--state", str(state))
    assert code == VERIFY and doc["details"]["check"] == "monitor.fork", doc


def test_a_rewritten_tile_exits_8(cli: Cli, make_home, tmp_path: Path, serve) -> None:
    home = make_home()
    grow(home, 20)
    pub = tmp_path / "pub"
    publish(cli, home, pub)
    srv = serve(pub)
    state = tmp_path / "state.json"
    assert (
        cli.json(None, "monitor", srv.url, "--state", str(state), "--trusted-key", vkey(cli, home))[0] == OK
    )
    grow(home, 5)
    r = publish(cli, home, pub)
    tile = pub / tiles.tile_path(0, 0, r["size"])
    data = bytearray(tile.read_bytes())
    data[3 * 32] ^= 1  # a hash the monitor already saw at size 21
    tile.write_bytes(bytes(data))
    code, doc = cli.json(None, "monitor", srv.url, "--state", str(state))
    assert code == VERIFY and doc["details"]["check"] == "monitor.fork" and "rewrote hash 3" in doc["message"]
    data[3 * 32] ^= 1
    data[-1] ^= 1  # a new leaf: the root no longer matches the checkpoint
    tile.write_bytes(bytes(data))
    code, doc = cli.json(None, "monitor", srv.url, "--state", str(state))
    assert (
        code == VERIFY and doc["details"]["check"] == "monitor.fork" and doc["details"]["size"] == r["size"]
    )


def test_an_older_checkpoint_served_is_a_rollback_exit_8(cli: Cli, make_home, tmp_path: Path, serve) -> None:
    home = make_home()
    grow(home, 10)
    pub = tmp_path / "pub"
    publish(cli, home, pub)
    old = (pub / "checkpoint").read_bytes()
    grow(home, 10)
    publish(cli, home, pub)
    srv = serve(pub)
    state = tmp_path / "state.json"
    assert (
        cli.json(None, "monitor", srv.url, "--state", str(state), "--trusted-key", vkey(cli, home))[0] == OK
    )
    (pub / "checkpoint").write_bytes(old)
    code, doc = cli.json(None, "monitor", srv.url, "--state", str(state))
    assert code == VERIFY and doc["details"]["check"] == "monitor.rollback"
    assert "ROLLBACK" in doc["message"] and "size 11" in doc["message"] and "size 21" in doc["message"]


def test_witness_cosignatures_are_required_when_named(cli: Cli, make_home, tmp_path: Path) -> None:
    from mnemolog.eventlog.witness.cosignature import CosignerKey

    home = make_home()
    pub = tmp_path / "pub"
    publish(cli, home, pub)
    w = CosignerKey.generate("witness.example/w1")
    code, doc = cli.json(
        None, "monitor", str(pub), "--trusted-key", vkey(cli, home), "--witness", w.verifier.vkey()
    )
    assert code == VERIFY and doc["details"]["check"] == "witness.quorum"


def test_a_cosigned_checkpoint_is_published_with_its_cosignature_and_checked(
    cli: Cli, make_home, tmp_path: Path
) -> None:
    from mnemolog.eventlog.format.note import parse_note
    from mnemolog.eventlog.store.checkpoints import CHECKPOINT_DIR, checkpoint_name
    from mnemolog.eventlog.witness.cosignature import CosignerKey, add_signature_lines

    home = make_home()
    pub = tmp_path / "pub"
    r = publish(cli, home, pub)
    w, stranger = CosignerKey.generate("witness.example/w1"), CosignerKey.generate("witness.example/w2")
    path = home.log_dir / CHECKPOINT_DIR / checkpoint_name(r["size"])
    raw = path.read_bytes()
    cosigned = add_signature_lines(raw, [w.cosign(parse_note(raw).text, 1_700_000_000)], 100)
    assert cosigned is not None
    path.write_bytes(cosigned)
    assert publish(cli, home, pub)["files_written"] == 1  # the same tree: only the checkpoint is new
    assert (pub / "checkpoint").read_bytes() == cosigned
    code, doc = cli.json(
        None, "monitor", str(pub), "--trusted-key", vkey(cli, home), "--witness", w.verifier.vkey()
    )
    assert code == OK and [c["name"] for c in doc["witnesses"]] == ["witness.example/w1"]
    code, doc = cli.json(
        None, "monitor", str(pub), "--trusted-key", vkey(cli, home), "--witness", stranger.verifier.vkey()
    )
    assert code == VERIFY and doc["details"]["check"] == "witness.quorum"


@pytest.mark.parametrize(
    "damage",
    ["garbage", "unsigned", "other-key", "truncated-tile", "oversized-tile", "missing-tile", "bad-bundle"],
)
def test_hostile_publications_exit_8(cli: Cli, make_home, tmp_path: Path, damage: str) -> None:
    home = make_home()
    grow(home, 20)
    pub = tmp_path / "pub"
    r = publish(cli, home, pub)
    key = vkey(cli, home)
    tile = pub / tiles.tile_path(0, 0, r["size"])
    cp = pub / "checkpoint"
    if damage == "garbage":
        cp.write_bytes(b"\xff\x00not a checkpoint")
    elif damage == "unsigned":
        cp.write_bytes(cp.read_bytes().split(b"\n\n")[0] + b"\n\n")
    elif damage == "other-key":
        key = vkey(cli, make_home("other"))
    elif damage == "truncated-tile":
        tile.write_bytes(tile.read_bytes()[:-5])
    elif damage == "oversized-tile":
        tile.write_bytes(tile.read_bytes() + b"\x00" * 32)
    elif damage == "missing-tile":
        tile.unlink()
    elif damage == "bad-bundle":
        b = pub / tiles.entries_path(0, r["size"])
        b.write_bytes(b.read_bytes()[:-1])
    code, doc = cli.json(None, "monitor", str(pub), "--trusted-key", key, "--entries")
    assert code == VERIFY, doc
    assert doc["message"]


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:9/pub/../secret",
        "http://127.0.0.1:9/pub/%2e%2e/secret",
        "file:///tmp/pub/../../etc",
        "http://127.0.0.1:9/pub?x=../../",
        "ftp://127.0.0.1/pub",
        "../pub",
    ],
)
def test_a_prefix_that_climbs_out_is_refused(cli: Cli, url: str) -> None:
    code, doc = cli.json(None, "monitor", url, "--trusted-key", "a+01020304+AQID")
    assert code == USAGE, doc


def test_only_tile_resource_paths_are_ever_fetched() -> None:
    from mnemolog.eventlog.errors import UsageError
    from mnemolog.substrate.witness.monitor import check_rel

    assert check_rel("tile/0/x001/234.p/5") and check_rel("large-entry/007") and check_rel("checkpoint")
    for bad in ("tile/0/../../etc/passwd", "/etc/passwd", "tile/entries/000/..", "tile/64/000", "x"):
        with pytest.raises(UsageError):
            check_rel(bad)


@pytest.mark.parametrize("mode", ["trickle", "huge"])
def test_a_server_that_never_ends_or_sends_too_much_is_bounded(
    cli: Cli, make_home, tmp_path: Path, serve, mode: str
) -> None:
    home = make_home()
    pub = tmp_path / "pub"
    publish(cli, home, pub)
    srv = serve(pub)
    srv.mode = mode
    t0 = time.monotonic()
    code, doc = cli.json(None, "monitor", srv.url, "--trusted-key", vkey(cli, home), "--timeout", "0.5")
    assert code in (STORAGE, VERIFY) and doc["message"]
    assert time.monotonic() - t0 < 30  # bounded, far below the server's 10 s trickle


def test_a_fifo_in_place_of_a_tile_does_not_block(cli: Cli, make_home, tmp_path: Path) -> None:
    home = make_home()
    pub = tmp_path / "pub"
    r = publish(cli, home, pub)
    tile = pub / tiles.tile_path(0, 0, r["size"])
    tile.unlink()
    os.mkfifo(tile)
    code, doc = cli.json(None, "monitor", str(pub), "--trusted-key", vkey(cli, home))
    assert code == STORAGE and "not a regular file" in doc["message"]


@pytest.mark.parametrize("state", ["{", '{"version": 1}', "forged-edge", "[]"])
def test_a_malformed_or_inconsistent_state_file_is_refused(
    cli: Cli, make_home, tmp_path: Path, state: str
) -> None:
    home = make_home()
    grow(home, 3)
    pub = tmp_path / "pub"
    publish(cli, home, pub)
    path = tmp_path / "state.json"
    assert (
        cli.json(None, "monitor", str(pub), "--state", str(path), "--trusted-key", vkey(cli, home))[0] == OK
    )
    if state == "forged-edge":
        d = json.loads(path.read_text())
        d["edge"][0][0] = d["edge"][0][1]  # an edge that no longer folds to the root it names
        path.write_text(json.dumps(d))
    else:
        path.write_text(state)
    code, doc = cli.json(None, "monitor", str(pub), "--state", str(path))
    assert code == STORAGE and "monitor state" in doc["message"]


def test_monitor_prints_nothing_on_stderr_when_it_is_not_a_terminal(
    cli: Cli, make_home, tmp_path: Path
) -> None:
    home = make_home()
    grow(home, 600)
    pub = tmp_path / "pub"
    publish(cli, home, pub)
    r = cli(None, "monitor", str(pub), "--trusted-key", vkey(cli, home), "--entries")
    assert r.code == 0 and r.stderr == "" and "601 entries hash to their leaves" in r.stdout


def test_another_home_published_at_the_same_url_exits_8(cli: Cli, make_home, tmp_path: Path) -> None:
    a, b = make_home("a"), make_home("b")
    pub = tmp_path / "pub"
    publish(cli, a, pub)
    state = tmp_path / "state.json"
    assert cli.json(None, "monitor", str(pub), "--state", str(state), "--trusted-key", vkey(cli, a))[0] == OK
    shutil.rmtree(pub)
    publish(cli, b, pub)
    code, doc = cli.json(None, "monitor", str(pub), "--state", str(state))
    assert code == VERIFY and doc["details"]["check"] == "checkpoint.signer"
    code, doc = cli.json(None, "monitor", str(pub), "--state", str(state), "--trusted-key", vkey(cli, b))
    assert code == VERIFY and doc["details"]["check"] == "monitor.origin"
