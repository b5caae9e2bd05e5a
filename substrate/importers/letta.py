"""Letta: an agent file (`.af`, JSON).

Both shapes Letta writes are read: the current one, `{"agents": [...],
"blocks": [...]}` where an agent names its blocks by `block_ids` (or holds
them in `memory_blocks`), and the first one, a single agent object with
`core_memory` blocks. Every block with a non-empty `value` is a memory in
`agents/<agent id>`, titled with its label, source `letta:<agent id>/<label>`
(the `human` block is kind `user`). Archival passages (`passages` or
`archival_memory` of an agent, or top-level `passages` with an `agent_id`)
are memories too, source `letta:<agent id>/archival/<passage id>`.
"""

from __future__ import annotations

from typing import Any

from mnemolog.substrate.importers._common import MapError, derived_id, items, micros, need, segment, text_id

FORMAT = "letta"


def map_letta(doc: Any) -> list[dict[str, Any]]:
    if not isinstance(doc, dict):
        raise MapError("a Letta agent file is a JSON object (`agents`, or one agent with `core_memory`)")
    if "agents" in doc:
        agents = [(f"agents[{i}]", a) for i, a in enumerate(items(doc, "agents", ""))]
    elif "core_memory" in doc or "memory_blocks" in doc:
        agents = [("", doc)]
    else:
        raise MapError(
            "a Letta agent file has `agents` (or `core_memory` for a single agent)", field="agents"
        )
    blocks: dict[str, tuple[str, dict[str, Any]]] = {}
    for i, b in enumerate(items(doc, "blocks", "", required=False)):
        bid = text_id(b, "id", f"blocks[{i}]")
        assert bid is not None
        blocks[bid] = (f"blocks[{i}]", b)
    loose = items(doc, "passages", "", required=False) if "agents" in doc else []
    out: list[dict[str, Any]] = []
    for w, agent in agents:
        aid = text_id(agent, "id", w, required=False) or need(agent, "name", w, str)
        name = need(agent, "name", w, str, required=False)
        ns = f"agents/{segment(aid)}"
        mine: list[tuple[str, Any]] = []
        for key in ("memory_blocks", "core_memory"):
            mine += [
                (f"{w}.{key}[{i}]" if w else f"{key}[{i}]", b)
                for i, b in enumerate(items(agent, key, w, required=False))
            ]
        for i, ref in enumerate(items(agent, "block_ids", w, required=False)):
            if not isinstance(ref, str) or ref not in blocks:
                raise MapError(f"{w}.block_ids[{i}] names no block of `blocks`", field=f"{w}.block_ids[{i}]")
            mine.append(blocks[ref])
        for bw, b in mine:
            label = need(b, "label", bw, str)
            value = need(b, "value", bw, str)
            if not value.strip():
                continue  # an empty block holds nothing to remember
            pointer = f"letta:{aid}/{label}"
            meta: dict[str, Any] = {"agent_id": aid, "label": label}
            if name:
                meta["agent_name"] = name
            desc = need(b, "description", bw, str, required=False)
            if desc:
                meta["description"] = desc
            out.append(
                {
                    "id": derived_id(FORMAT, pointer),
                    "content": value,
                    "namespace": ns,
                    "kind": "user" if label == "human" else "observation",
                    "title": label,
                    "source": pointer,
                    "metadata": {"letta": meta},
                    "created_at": micros(b.get("created_at") or agent.get("created_at"), f"{bw}.created_at"),
                }
            )
        passages = [
            (f"{w}.{k}[{i}]" if w else f"{k}[{i}]", p)
            for k in ("passages", "archival_memory")
            for i, p in enumerate(items(agent, k, w, required=False))
        ]
        passages += [
            (f"passages[{i}]", p)
            for i, p in enumerate(loose)
            if isinstance(p, dict) and p.get("agent_id") == aid
        ]
        for n, (pw, p) in enumerate(passages):
            text = need(p, "text", pw, str)
            pid = text_id(p, "id", pw, required=False) or str(n)
            pointer = f"letta:{aid}/archival/{pid}"
            out.append(
                {
                    "id": derived_id(FORMAT, pointer),
                    "content": text,
                    "namespace": ns,
                    "kind": "observation",
                    "source": pointer,
                    "metadata": {"letta": {"agent_id": aid, "archival": True}},
                    "created_at": micros(p.get("created_at"), f"{pw}.created_at"),
                }
            )
    return out
