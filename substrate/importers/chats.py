"""Claude's and ChatGPT's `conversations.json` (their data exports).

The unit is one exchange: a person's message and the assistant's replies up
to the person's next message, as one `observation` in `chats/claude` or
`chats/chatgpt`, titled with the conversation's name, at the time of the
person's message. Its source is the conversation (`claude:<uuid>`,
`chatgpt:<id>`); its id is derived from the conversation and the person's
message, so a later export of a conversation that grew adds only the new
exchanges. An exchange longer than a memory's content limit is cut at the
limit and marked `metadata.chat.truncated` (the export keeps the whole text).
Messages with no text (tool calls, images, system prompts) are left out.
"""

from __future__ import annotations

from typing import Any, Final

from mnemolog.substrate.events.limits import MAX_CONTENT_BYTES
from mnemolog.substrate.importers._common import MapError, derived_id, items, micros, need, text_id

#: Room for the labels and the cut marker.
_ROOM: Final = MAX_CONTENT_BYTES - 1024
_CUT: Final = "\n\n[… cut at the memory size limit]"


def _exchange(
    fmt: str,
    conv: str,
    title: str | None,
    msg_id: str,
    human: str,
    replies: list[str],
    when: int | None,
    n: int,
) -> dict[str, Any]:
    content = f"User: {human}"
    if replies:
        content += "\n\nAssistant: " + "\n\n".join(replies)
    meta: dict[str, Any] = {"conversation": conv, "message": msg_id, "exchange": n}
    raw = content.encode("utf-8", "surrogatepass")
    if len(raw) > _ROOM:
        content = raw[:_ROOM].decode("utf-8", "ignore") + _CUT
        meta["truncated"] = True
    return {
        "id": derived_id(fmt, f"{conv}/{msg_id}"),
        "content": content,
        "namespace": f"chats/{fmt}",
        "kind": "observation",
        "title": (title or "")[:512] or None,
        "source": f"{fmt}:{conv}",
        "metadata": {"chat": meta},
        "created_at": when,
    }


def _pair(
    fmt: str, conv: str, title: str | None, msgs: list[tuple[str, str, str, int | None]]
) -> list[dict[str, Any]]:
    """(role, message id, text, µs) in order -> exchanges; replies before any person's message are dropped."""
    out: list[dict[str, Any]] = []
    current: tuple[str, str, int | None] | None = None
    replies: list[str] = []
    for role, mid, text, when in msgs:
        if role == "user":
            if current is not None:
                out.append(_exchange(fmt, conv, title, current[0], current[1], replies, current[2], len(out)))
            current, replies = (mid, text, when), []
        elif current is not None:
            replies.append(text)
    if current is not None:
        out.append(_exchange(fmt, conv, title, current[0], current[1], replies, current[2], len(out)))
    return out


def _list(doc: Any, what: str) -> list[Any]:
    if isinstance(doc, dict) and "conversations" in doc:
        return items(doc, "conversations", "")
    if not isinstance(doc, list):
        raise MapError(f"{what}'s conversations.json is a JSON list of conversations")
    return doc


def map_claude(doc: Any) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i, conv in enumerate(_list(doc, "Claude")):
        w = f"[{i}]"
        cid = text_id(conv, "uuid", w)
        assert cid is not None
        title = need(conv, "name", w, str, required=False)
        msgs = []
        for j, m in enumerate(items(conv, "chat_messages", w)):
            mw = f"{w}.chat_messages[{j}]"
            sender = need(m, "sender", mw, str)
            text = need(m, "text", mw, str, required=False) or ""
            if not text.strip():
                # Newer exports keep the text in `content` blocks.
                parts = items(m, "content", mw, required=False)
                text = "\n\n".join(
                    p["text"]
                    for p in parts
                    if isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
                )
            if not text.strip() or sender not in ("human", "assistant"):
                continue
            mid = text_id(m, "uuid", mw, required=False) or str(j)
            msgs.append(
                (
                    "user" if sender == "human" else "assistant",
                    mid,
                    text,
                    micros(m.get("created_at"), f"{mw}.created_at"),
                )
            )
        out += _pair("claude", cid, title, msgs)
    return out


def _branch(mapping: dict[str, Any], current: Any) -> list[tuple[str, Any]]:
    """(key, node) of the conversation's shown branch, root first (current_node back through parents).

    Without a usable current_node, every node, by time. The walk stops at a
    node seen before, so a hostile cycle of parents ends.
    """
    if isinstance(current, str) and current in mapping:
        path: list[tuple[str, Any]] = []
        seen: set[str] = set()
        node: Any = current
        while isinstance(node, str) and node in mapping and node not in seen:
            seen.add(node)
            path.append((node, mapping[node]))
            node = mapping[node].get("parent") if isinstance(mapping[node], dict) else None
        return list(reversed(path))

    def when(kv: tuple[str, Any]) -> float:
        m = kv[1].get("message") if isinstance(kv[1], dict) else None
        t = m.get("create_time") if isinstance(m, dict) else None
        return float(t) if isinstance(t, int | float) and not isinstance(t, bool) else 0.0

    return sorted(mapping.items(), key=when)


def map_chatgpt(doc: Any) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i, conv in enumerate(_list(doc, "ChatGPT")):
        w = f"[{i}]"
        cid = text_id(conv, "conversation_id", w, required=False) or text_id(conv, "id", w)
        assert cid is not None
        title = need(conv, "title", w, str, required=False)
        mapping = need(conv, "mapping", w, dict)
        msgs = []
        for nid, node in _branch(mapping, conv.get("current_node")):
            nw = f"{w}.mapping[{nid!r}]"
            m = need(node, "message", nw, dict, required=False)
            if m is None:
                continue  # the root node holds no message
            role = need(need(m, "author", f"{nw}.message", dict), "role", f"{nw}.message.author", str)
            content = need(m, "content", f"{nw}.message", dict)
            parts = items(content, "parts", f"{nw}.message.content", required=False)
            text = "\n\n".join(p for p in parts if isinstance(p, str) and p.strip())
            if role not in ("user", "assistant") or not text.strip():
                continue
            mid = text_id(m, "id", f"{nw}.message", required=False) or str(nid)
            when = micros(m.get("create_time"), f"{nw}.message.create_time")
            msgs.append((role, mid, text, when))
        out += _pair("chatgpt", cid, title, msgs)
    return out
