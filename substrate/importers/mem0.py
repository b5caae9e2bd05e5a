"""mem0: the JSON of `get_all` / an export, `{"results": [{"id", "memory", "user_id", ...}]}`.

One memory per item. Its namespace is its owner's: `users/<user_id>`, else
`agents/<agent_id>`, else `runs/<run_id>`, else `imports/mem0`; the other
owner ids, the item's own metadata, its `updated_at` and its categories are
kept in `metadata.mem0`; categories are also its tags. A bare list (older
clients' `get_all`) is read as the results.
"""

from __future__ import annotations

from typing import Any

from mnemolog.substrate.importers._common import (
    MapError,
    derived_id,
    items,
    micros,
    need,
    segment,
    tag,
    text_id,
)

FORMAT = "mem0"


def map_mem0(doc: Any) -> list[dict[str, Any]]:
    if isinstance(doc, list):
        results, where = doc, ""
    elif isinstance(doc, dict):
        results, where = items(doc, "results", ""), "results"
    else:
        raise MapError("a mem0 export is an object with `results` (or a list of memories)")
    out = []
    for i, item in enumerate(results):
        w = f"{where}[{i}]"
        mid = text_id(item, "id", w)
        content = need(item, "memory", w, str)
        owners = {k: text_id(item, k, w, required=False) for k in ("user_id", "agent_id", "run_id")}
        if owners["user_id"]:
            ns = f"users/{segment(owners['user_id'])}"
        elif owners["agent_id"]:
            ns = f"agents/{segment(owners['agent_id'])}"
        elif owners["run_id"]:
            ns = f"runs/{segment(owners['run_id'])}"
        else:
            ns = "imports/mem0"
        categories = [c for c in items(item, "categories", w, required=False) if isinstance(c, str)]
        extra = need(item, "metadata", w, dict, required=False)
        kept: dict[str, Any] = {k: v for k, v in owners.items() if v is not None}
        if categories:
            kept["categories"] = categories
        if extra:
            kept["metadata"] = extra
        updated = need(item, "updated_at", w, (str, int, float), required=False)
        if updated is not None:
            kept["updated_at"] = updated
        out.append(
            {
                "id": derived_id(FORMAT, str(mid)),
                "content": content,
                "namespace": ns,
                "kind": "observation",
                "tags": [t for t in (tag(c) for c in categories) if t],
                "source": f"mem0:{mid}",
                "metadata": {"mem0": kept},
                "created_at": micros(item.get("created_at"), f"{w}.created_at"),
            }
        )
    return out
