"""Paths that MCP and HTTP clients name: confined to `[server] paths`, special files exit 6, no tracebacks."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from mnemolog.cli.agents import http_api, mcp_server
from mnemolog.cli.agents.client_paths import ClientPaths, PathNotAllowed
from mnemolog.eventlog.errors import BadInput
from mnemolog.substrate.api import Substrate
from mnemolog.substrate.home import init_home


def _open(home: Path, config: str | None = None) -> Substrate:
    if config is not None:
        cfg = home / "config.toml"
        cfg.write_text(cfg.read_text() + "\n" + config)
    return Substrate.open(home, long_lived=False)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    init_home(tmp_path / "home")
    return tmp_path / "home"


@pytest.fixture
def memory_id(home: Path) -> str:
    with _open(home) as s:
        return str(s.store("A memory about the harbour crane schedule.")["id"])


def call(s: Substrate, name: str, **args: Any) -> dict[str, Any]:
    result = mcp_server.call(s, name, args)
    body = result.structured_content
    assert isinstance(body, dict)
    assert body.get("error") != "internal_error", body
    return body


def test_by_default_only_the_exchange_folder(home: Path, memory_id: str, tmp_path: Path) -> None:
    with _open(home) as s:
        for path in ("/proc/self/mem", "/etc/passwd", str(tmp_path / "x.tar"), "../config.toml"):
            body = call(s, "bundle_verify", path=path)
            assert body["error"] == "path_not_allowed" and body["exit_code"] == 64, body
            assert str(home / "bundles") in body["message"]
        out = tmp_path / "elsewhere.tar"
        body = call(s, "bundle_export", memory_id=memory_id, output=str(out))
        assert body["error"] == "path_not_allowed" and not out.exists()
        # A relative name is taken from the exchange folder.
        (home / "bundles").mkdir(exist_ok=True)
        body = call(s, "bundle_export", memory_id=memory_id, output="mine.tar")
        assert body["ok"] and Path(body["path"]) == (home / "bundles" / "mine.tar").resolve()
        body = call(s, "bundle_verify", path="mine.tar")
        assert body["ok"] and body["memory_id"] == memory_id


def test_a_link_out_of_the_folder_is_refused(home: Path, memory_id: str, tmp_path: Path) -> None:
    (home / "bundles").mkdir()
    (tmp_path / "secret").write_text("not a bundle")
    (home / "bundles" / "escape").symlink_to(tmp_path / "secret")
    (home / "bundles" / "updir").symlink_to(tmp_path)
    with _open(home) as s:
        for path in ("escape", "updir/secret", str(home / "bundles" / ".." / "config.toml")):
            assert call(s, "bundle_verify", path=path)["error"] == "path_not_allowed"
        body = call(s, "bundle_export", memory_id=memory_id, output="updir/out.tar")
        assert body["error"] == "path_not_allowed" and not (tmp_path / "out.tar").exists()


def test_special_files_in_an_allowed_directory_are_exit_6(home: Path, tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    (tmp_path / "dir").mkdir()
    with _open(home, f'[server]\npaths = ["/proc", "/dev", "{tmp_path}"]\n') as s:
        for path in ("/proc/self/mem", "/dev/zero", str(fifo), str(tmp_path / "dir")):
            body = call(s, "bundle_verify", path=path)
            assert body["exit_code"] == 6 and body["ok"] is False, body
        missing = call(s, "bundle_verify", path=str(tmp_path / "absent.tar"))
        assert missing["exit_code"] == 2


def test_special_output_targets_are_exit_6(home: Path, memory_id: str, tmp_path: Path) -> None:
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    (tmp_path / "to-null").symlink_to("/dev/null")  # never /dev/null itself: tests may run as root
    with _open(home, f'[server]\npaths = ["{tmp_path}", "/dev"]\n') as s:
        for out in (fifo, tmp_path / "to-null"):
            body = call(s, "bundle_export", memory_id=memory_id, output=str(out))
            assert body["exit_code"] == 6 and "not a regular file" in body["message"], body
    assert fifo.is_fifo() and (tmp_path / "to-null").is_symlink()


def test_no_paths_at_all(home: Path, memory_id: str) -> None:
    (home / "bundles").mkdir()
    with _open(home, "[server]\npaths = []\n") as s:
        body = call(s, "bundle_verify", path=str(home / "bundles" / "x.tar"))
        assert body["error"] == "path_not_allowed" and "no files" in body["message"]
        # Without an output the server picks the place itself: still allowed.
        assert call(s, "bundle_export", memory_id=memory_id)["ok"]


def test_hostile_path_strings(home: Path) -> None:
    with _open(home) as s:
        for path in ("", "a\0b", "x" * 5000, "/" * 5000):
            body = call(s, "bundle_verify", path=path)
            assert body["exit_code"] == 64, body


def test_a_trusted_key_file_is_confined_too(home: Path, tmp_path: Path) -> None:
    pub = next((home / "keys").glob("*.pub"))
    key_text = pub.read_text().strip()
    (home / "bundles").mkdir()
    (home / "bundles" / "key.pub").write_text(key_text + "\n")
    with _open(home) as s:
        assert call(s, "log_verify", trusted_key=key_text)["ok"]
        assert call(s, "log_verify", trusted_key=str(home / "bundles" / "key.pub"))["ok"]
        assert call(s, "log_verify", trusted_key="key.pub")["ok"]  # relative: from the exchange folder
        for outside in (str(pub), "/dev/zero", "/proc/self/mem"):
            body = call(s, "log_verify", trusted_key=outside)
            assert body["error"] == "path_not_allowed", body
        body = call(s, "log_verify", trusted_key="name+abcd+notbase64")
        assert body["exit_code"] == 64 and body["error"] != "path_not_allowed"


@pytest.mark.parametrize(
    "table",
    [
        '[server]\npaths = "/tmp"\n',
        "[server]\npaths = [1]\n",
        '[server]\npaths = ["relative/dir"]\n',
        '[server]\nroots = ["/tmp"]\n',
        'server = "x"\n',
    ],
)
def test_malformed_settings_are_bad_input(table: str, tmp_path: Path) -> None:
    import tomllib

    with pytest.raises(BadInput) as caught:
        ClientPaths.from_config(tomllib.loads(table), tmp_path, "config.toml")
    assert caught.value.details.get("file") == "config.toml"


def test_http_status_of_a_refused_path() -> None:
    assert http_api.status_for(PathNotAllowed("path: outside", field="path")) == 403


def test_http_key_files_are_confined(home: Path, memory_id: str) -> None:
    from starlette.testclient import TestClient

    pub = next((home / "keys").glob("*.pub"))
    with _open(home) as s:
        client = TestClient(http_api.app(s, http_api.HttpSettings()), base_url="http://127.0.0.1")
        for key in (str(pub), "/dev/zero", "/proc/self/mem"):
            r = client.post("/verify", json={"trusted_key": key})
            assert r.status_code == 403 and r.json()["error"] == "path_not_allowed", r.text
        assert client.post("/verify", json={"trusted_key": pub.read_text().strip()}).status_code == 200
        tar = client.post("/bundles", json={"memory_id": memory_id}).content
        tar_type = {"Content-Type": "application/x-tar"}
        r = client.post("/verify", params={"trusted_key": "/dev/zero"}, content=tar, headers=tar_type)
        assert r.status_code == 403 and r.json()["error"] == "path_not_allowed", r.text
        key = pub.read_text().strip()
        r = client.post("/verify", params={"trusted_key": key}, content=tar, headers=tar_type)
        assert r.status_code == 200 and r.json()["file"] == "(uploaded)", r.text
