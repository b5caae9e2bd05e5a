#!/usr/bin/env python3
"""A Claude Code Stop hook: post the turn that just ended to mnemolog's /interactions.

Claude Code runs this when the agent finishes a response, with a JSON object
on standard input (session_id, transcript_path, cwd, stop_hook_active). The
hook reads the last user prompt and the assistant's reply from the
transcript (JSON lines) and POSTs them to a running `mnemolog serve`:

    {"prompt": ..., "response": ..., "client": "claude-code", "session": ..., "project": ...}

Register it in .claude/settings.json (see examples/hooks/settings.json).
Settings, from the environment: MNEMOLOG_URL (default http://127.0.0.1:8100),
MNEMOLOG_TOKEN (the server's [http] token, if it has one), MNEMOLOG_PROJECT
(default: the name of the working directory).

It never stands in Claude's way: whatever goes wrong (no server, a strange
transcript) is one line on stderr and exit 0. Standard library only, so it
runs under any python3.
"""

from __future__ import annotations

import json
import os
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

MAX_TRANSCRIPT_BYTES = 64 * 1024 * 1024
MAX_TEXT_CHARS = 200_000  # a turn beyond this is cut (the server bounds what it stores anyway)


def text_of(message: Any) -> str:
    """The text of a transcript message: a string, or the text blocks of a content list."""
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text"]
        return "\n".join(p for p in parts if isinstance(p, str))
    return ""


def last_turn(lines: list[str]) -> tuple[str, str]:
    """(the last real user prompt, every assistant text after it) from transcript lines."""
    prompt, replies = "", []
    for line in lines:
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if not isinstance(entry, dict):
            continue
        kind, message = entry.get("type"), entry.get("message")
        if kind == "user":
            text = text_of(message)
            if text.strip():  # a tool result carries no text block: not a new prompt
                prompt, replies = text, []
        elif kind == "assistant":
            text = text_of(message)
            if text.strip():
                replies.append(text)
    return prompt[:MAX_TEXT_CHARS], "\n\n".join(replies)[:MAX_TEXT_CHARS]


def read_transcript(path: str) -> list[str]:
    p = Path(path)
    if not p.is_file():
        raise OSError(f"no transcript at {path}")
    with p.open("rb") as f:
        size = p.stat().st_size
        if size > MAX_TRANSCRIPT_BYTES:
            f.seek(size - MAX_TRANSCRIPT_BYTES)  # the turn is at the end
        return f.read().decode("utf-8", "replace").splitlines()


def post(url: str, body: dict[str, Any], token: str | None) -> dict[str, Any]:
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers, method="POST")
    with urllib.request.urlopen(req, timeout=5) as r:
        answer: dict[str, Any] = json.loads(r.read() or b"{}")
        return answer


def main() -> int:
    try:
        event = json.loads(sys.stdin.read(1024 * 1024) or "{}")
        if event.get("stop_hook_active"):
            return 0  # a turn a Stop hook itself prolonged: already captured
        prompt, response = last_turn(read_transcript(str(event.get("transcript_path", ""))))
        if not prompt.strip():
            return 0
        cwd = str(event.get("cwd") or os.getcwd())
        body = {
            "prompt": prompt,
            "response": response,
            "client": "claude-code",
            "session": str(event.get("session_id", "")),
            "project": os.environ.get("MNEMOLOG_PROJECT") or Path(cwd).name,
        }
        url = os.environ.get("MNEMOLOG_URL", "http://127.0.0.1:8100").rstrip("/") + "/interactions"
        out = post(url, body, os.environ.get("MNEMOLOG_TOKEN"))
        ident = out.get("interaction") if isinstance(out, dict) else None
        ident = ident.get("id") if isinstance(ident, dict) else ident
        print(f"mnemolog: captured the turn {ident or ''}".rstrip(), file=sys.stderr)
    except urllib.error.HTTPError as exc:
        print(f"mnemolog hook: {exc.code} {exc.read()[:300].decode('utf-8', 'replace')}", file=sys.stderr)
    except (OSError, ValueError) as exc:
        print(f"mnemolog hook: {exc}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
