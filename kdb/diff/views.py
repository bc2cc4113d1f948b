"""Deep views of `kdb diff --kernel`: facts side by side, metadata differences, the changed instruction mix and
the ISA hunks, as terminal text or markdown. Pure functions."""

from __future__ import annotations

import json
from typing import Any

from kdb.diff.model import TIME_FACTS, KernelDeepView
from kdb.figures import COMPARED
from kdb.render.tables import elide_end, fitted_table

ISA_LINES = 300  # diff lines shown per kernel (the JSON document has the whole diff)
MIX_ROWS = 30


def _short(value: Any, width: int = 80) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
    return elide_end(text, width)


def deepdiff_lines(diff: dict[str, Any]) -> list[str]:
    """One line per difference of a deepdiff document: `path: old → new`, `path: added value`."""
    out = []
    for kind, entries in sorted(diff.items()):
        if not isinstance(entries, dict):
            out.append(f"{kind}: {_short(entries)}")
            continue
        for path, v in entries.items():
            p = path.removeprefix("root") or "(root)"
            if isinstance(v, dict) and "old_value" in v:
                out.append(f"{p}: {_short(v.get('old_value'))} → {_short(v.get('new_value'))}")
            elif "added" in kind:
                out.append(f"{p}: added {_short(v)}")
            elif "removed" in kind:
                out.append(f"{p}: removed {_short(v)}")
            else:
                out.append(f"{p}: {kind} {_short(v)}")
    return out


def fact_rows(v: KernelDeepView) -> list[list[Any]]:
    k = v.kernel
    rows: list[list[Any]] = []
    names = list(k.metrics) or list((k.facts.values if k.facts else {}).keys())
    for m in names:
        x = k.metrics.get(m)
        if x is None:
            a = k.a.get(m) if k.a else None
            b = k.b.get(m) if k.b else None
            x = {"a": a, "b": b, "delta": None}
        if x["a"] is None and x["b"] is None:
            continue
        rows.append([m, x["a"], x["b"], x["delta"] if x["delta"] else "", "*" if x["a"] != x["b"] else ""])
    for m, x in k.limiters.items():
        if x.get("a") is not None or x.get("b") is not None:
            rows.append([m, x.get("a"), x.get("b"), "", "*" if x.get("a") != x.get("b") else ""])
    for m in TIME_FACTS if k.metrics else ():  # measured time (kdb profile import), where a profile ran it
        a, b = (k.a.get(m) if k.a else None), (k.b.get(m) if k.b else None)
        if a is not None or b is not None:
            rows.append([m, a, b, "", "*" if a != b else ""])
    return rows


def why_table(v: KernelDeepView) -> tuple[list[str], list[list[Any]]]:
    """`--why`'s figures: one column per set (A, each stage swap, B) in the order the swap made them, one row per
    figure any set has; `*` marks the figures the stage was judged on."""
    why = v.kernel.why
    if why is None:
        return [], []
    keys = list(why.figures)
    rows = []
    for column in COMPARED:
        values = [(why.figures[key] or {}).get(column) for key in keys]
        if all(x is None for x in values):
            continue
        rows.append([column, *("-" if x is None else x for x in values), "*" if column in why.decided_by else ""])
    return ["fact", *(why.labels.get(key, key) for key in keys), ""], rows


def isa_lines(v: KernelDeepView, limit: int = ISA_LINES) -> tuple[list[str], int, int]:
    """(the first `limit` lines of the ISA diff, the lines left out, the number of hunks)."""
    lines = v.isa_diff.splitlines()
    hunks = sum(1 for line in lines if line.startswith("@@"))
    return lines[:limit], max(len(lines) - limit, 0), hunks


def isa_title(v: KernelDeepView) -> str:
    if v.isa_raw:
        return f"raw ISA ({v.isa_kind or 'none'}, as compiled)"
    return f"normalised ISA ({v.isa_kind or 'none'}; registers by first use, no branch targets; --raw-isa: as compiled)"


def _mix(v: KernelDeepView) -> tuple[list[list[Any]], int]:
    changed = [r for r in v.mix_rows if r["delta"]]
    rows = [[r["mnemonic"], r["grp"], r["a"], r["b"], r["delta"]] for r in changed[:MIX_ROWS]]
    return rows, len(v.mix_rows) - len(rows)


def loop_mix(v: KernelDeepView) -> tuple[list[list[Any]], int, str | None]:
    """(changed rows of the mix per loop depth: depth, mnemonic, group, A, B, delta; rows left out; a note when a
    side's loop nest is unknown)."""
    known_a, known_b = v.loop_known
    note = None
    if not (known_a and known_b):
        missing = " and ".join(s for s, known in (("A", known_a), ("B", known_b)) if not known)
        note = (
            f"loop depths unknown in {missing} (no loop nest recorded: branches kdb could not follow, or `kdb reindex`)"
        )
    if not (known_a and known_b):
        return [], 0, note
    changed = [r for r in v.loop_rows if r["delta"]]
    rows = [[r["loop_depth"], r["mnemonic"], r["grp"], r["a"], r["b"], r["delta"]] for r in changed[:MIX_ROWS]]
    return rows, len(changed) - len(rows), note


LOOP_HEADERS = ["loop depth", "mnemonic", "group", "A", "B", "delta"]


def view_text(v: KernelDeepView, width: int = 100) -> str:
    k = v.kernel
    out = f"\n== {k.name}  {k.a_cache_key or '-'} → {k.b_cache_key or '-'}  ({k.status.label})\n"
    if k.reason:
        out += f"reason: {k.reason}\n"
    facts = fact_rows(v)
    if facts:
        out += "\n" + fitted_table(["fact", "A", "B", "delta", ""], facts, width)
    if k.why is not None:
        out += f"\nwhy: {k.why.stage} — {k.why.reason}\n"
        head, rows = why_table(v)
        out += fitted_table(head, rows, width) if rows else ""
    for title, diff in (("Triton JSON", v.triton_json_diff), ("code-object metadata", v.co_metadata_diff)):
        lines = deepdiff_lines(diff)
        out += f"\n{title}: " + ("identical (hash and paths ignored)\n" if not lines else "\n")
        out += "".join(f"  {elide_end(line, width - 2)}\n" for line in lines)
    mix, unchanged = _mix(v)
    if v.mix_rows:
        out += "\ninstruction mix (changed mnemonics):\n"
        out += fitted_table(["mnemonic", "group", "A", "B", "delta"], mix, width) if mix else "  none changed\n"
        if unchanged:
            out += f"  {unchanged} more mnemonics not shown (unchanged or below the first {MIX_ROWS})\n"
    by_loop, more, note = loop_mix(v)
    if v.mix_rows or v.loop_rows:
        out += "\nchanged instructions by loop depth (0: outside every loop; deepest first):\n"
        if note:
            out += f"  {note}\n"
        elif by_loop:
            out += fitted_table(LOOP_HEADERS, by_loop, width)
            if more:
                out += f"  {more} more changed rows not shown\n"
        else:
            out += "  none changed\n"
    shown, left, hunks = isa_lines(v)
    out += f"\n{isa_title(v)} diff: "
    if not shown:
        out += "identical\n"
    else:
        out += f"{hunks} hunk{'s' * (hunks != 1)}\n" + "".join(line + "\n" for line in shown)
        if left:
            out += f"… {left} more diff lines (--format json has the whole diff)\n"
    return out


def view_markdown(v: KernelDeepView, room: int) -> str:
    """One deep view in markdown, folded in <details>, in at most `room` characters."""
    k = v.kernel
    head = (
        f"\n<details><summary><code>{k.name}</code> {k.a_cache_key or '-'} → {k.b_cache_key or '-'} "
        f"({k.status.label})</summary>\n\n"
    )
    if k.reason:
        head += f"**reason:** {k.reason}\n\n"
    facts = fact_rows(v)
    body = "| fact | A | B | delta | |\n|---|---|---|---|---|\n"
    body += "".join("| " + " | ".join("" if c is None else str(c) for c in r) + " |\n" for r in facts)
    if k.why is not None:
        body += f"\n**why:** {k.why.stage} — {k.why.reason}\n\n"
        columns, rows = why_table(v)
        body += "| " + " | ".join(columns) + " |\n" + "|---" * len(columns) + "|\n" if rows else ""
        body += "".join("| " + " | ".join(str(c) for c in r) + " |\n" for r in rows)
    for title, diff in (("Triton JSON", v.triton_json_diff), ("code-object metadata", v.co_metadata_diff)):
        lines = deepdiff_lines(diff)
        body += f"\n**{title}:** " + ("identical (hash and paths ignored)\n" if not lines else "\n\n")
        body += "".join(f"- `{line.replace('`', '')}`\n" for line in lines)
    mix, _ = _mix(v)
    if mix:
        body += "\n| mnemonic | group | A | B | delta |\n|---|---|---|---|---|\n"
        body += "".join("| " + " | ".join(str(c) for c in r) + " |\n" for r in mix)
    by_loop, more, note = loop_mix(v)
    if note and (v.mix_rows or v.loop_rows):
        body += f"\n*{note}*\n"
    elif by_loop:
        body += "\n**changed instructions by loop depth** (0: outside every loop)\n\n"
        body += "| " + " | ".join(LOOP_HEADERS) + " |\n" + "|---" * len(LOOP_HEADERS) + "|\n"
        body += "".join("| " + " | ".join(str(c) for c in r) + " |\n" for r in by_loop)
        body += f"\n{more} more changed rows\n" if more else ""
    tail = "\n</details>\n"
    shown, left, hunks = isa_lines(v)
    isa = ""
    if shown:
        isa = f"\n**{isa_title(v)}**, {hunks} hunks:\n\n```diff\n"
        budget = room - len(head) - len(body) - len(tail) - len(isa) - 120
        used = 0
        for i, line in enumerate(shown):
            if used + len(line) + 1 > budget:
                left += len(shown) - i
                break
            isa += line.replace("```", "'''") + "\n"
            used += len(line) + 1
        isa += "```\n" + (f"… {left} more diff lines\n" if left else "")
    text = head + body + isa + tail
    return text if len(text) <= room else head + elide_end(body, max(room - len(head) - len(tail) - 1, 0)) + tail
