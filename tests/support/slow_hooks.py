"""Hooks for tests that need a write to take a while (so a process can be killed mid-pass)."""

from __future__ import annotations

import os
import time

from mnemolog.substrate.hooks import HookEvent


def slow_post_store(ev: HookEvent) -> None:
    if ev.atom_index is not None:
        time.sleep(float(os.environ.get("MNEMOLOG_TEST_HOOK_SLEEP", "0")))
