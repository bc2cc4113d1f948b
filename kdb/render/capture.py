"""`kdb capture misses`: every compile of a capture and why it compiled, as a table, markdown or JSON.

May import: kdb.render only."""

from __future__ import annotations

from typing import Any

from kdb.render.tables import render_rows, to_json

MISSES_COLUMNS = ("when", "kernel", "line", "key", "why it compiled")


def render_misses(document: dict[str, Any], fmt: str, width: int | None = None) -> str:
    """One row per compile (after warm-up first, marked `after warm-up`), its reasons joined by `; `."""
    if fmt == "json":
        return to_json(document)
    compiles = document["compiles"]
    scope = "after warm-up " if document["only_after_warmup"] else ""
    damaged = document.get("damaged_records") or 0
    note = (
        f"{damaged} record line{'s' if damaged != 1 else ''} damaged (a process killed mid-write?), not read\n"
        if damaged
        else ""
    )
    if not compiles:
        return f"no compile {scope}in {document['tag']}\n{note}"
    rows = [
        [
            "after warm-up" if c["after_warmup"] else (c["phase"] or "-"),
            c["kernel"],
            c["def_line"] if c["def_line"] is not None else "",
            (c["folder"] or c["cache_key"] or "")[:12],  # the folder: what `kdb show T --kernel KEY` takes
            "; ".join(c["differs"]),
        ]
        for c in compiles
    ]
    after = "" if scope else f" ({document['after_warmup_count']} after warm-up)"
    head = f"{len(compiles)} compiles {scope}in {document['tag']}{after}\n"
    body = render_rows(list(MISSES_COLUMNS), rows, fmt, width=width)
    return (head + "\n" if fmt == "markdown" else head) + body + ("\n" if fmt == "markdown" and note else "") + note
