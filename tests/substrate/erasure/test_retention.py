"""Retention: a namespace's `retention_days` lets its old memories expire, recorded like any erasure."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from mnemolog.eventlog.errors import BadInput, UsageError
from mnemolog.substrate.erasure import service as erasure
from tests.projections.kit import FakeClock, new_home, open_sub

DAY = 86_400_000_000


def test_forget_expired_erases_what_the_policy_lets_expire(tmp_path: Path) -> None:
    clock = FakeClock()
    home = new_home(tmp_path / "home")
    with open_sub(home, clock=clock) as sub:
        now = clock()
        old = sub.store("old chat", namespace="chats", created_at=now - 100 * DAY)
        young = sub.store("young chat", namespace="chats", created_at=now - 10 * DAY)
        child = sub.store("old child", namespace="chats/deep", created_at=now - 100 * DAY)
        kept = sub.store("old but kept", namespace="notes", created_at=now - 1000 * DAY)
        sub.set_policy("chats", retention_days=90)
        sub.set_policy("chats/deep", retention_days=365)
        assert sub.get_policy("chats/deep")["policy"]["retention_days"] == 365
        dry = sub.forget(expired=True, dry_run=True)
        assert dry["memories"] == [old["id"]] and dry["erased"] == 0
        out = sub.forget(expired=True)
        assert out["erased"] == 1 and out["selector"] == {"expired": True}
        e = sub.log.entry(out["seqs"][0])
        assert e.data["reason"] == "retention" and e.data["selector"] == {"expired": True}
        assert {m["id"] for m in sub.list()} == {young["id"], child["id"], kept["id"]}
        assert sub.forget(expired=True)["erased"] == 0
        with pytest.raises(UsageError):
            sub.forget(expired=True, namespace="chats")
        with pytest.raises(BadInput):
            sub.set_policy("chats", retention_days=0)


def test_a_long_lived_process_runs_retention(tmp_path: Path) -> None:
    home = new_home(tmp_path / "home")
    with open_sub(home) as sub:
        sub.store("very old", namespace="chats", created_at=sub.clock() - 400 * DAY)
        sub.set_policy("chats", retention_days=30)
        worker = erasure.RetentionWorker(sub, interval_s=3600, first_after_s=0.01)
        worker.start()
        try:
            deadline = time.monotonic() + 60
            while worker.runs == 0 and time.monotonic() < deadline:
                time.sleep(0.02)
        finally:
            worker.stop()
        assert worker.runs >= 1 and worker.last_error is None
        assert sub.list(namespace="chats") == []
