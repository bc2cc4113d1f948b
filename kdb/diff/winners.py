"""Autotune winners across two snapshots: each Inductor kernel's winning config on both sides, paired by the
Inductor kernel (the generated module's path and the kernel's name), compared, and judged on the kernel
folders linked to them (rules.winner_worse).

The module path is a hash of the generated source that torch writes, so the same torch on other hardware or
with another Triton writes the same paths: their winners pair. A torch upgrade that renames the modules
leaves them unpaired (`only_a` / `only_b`). A best config whose module is not known pairs by its own path
(named the same way); a Triton `*.autotune.json` winner pairs by kernel name and autotune key.
"""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from collections.abc import Hashable
from typing import Any

from kdb.analysis.registry import roles_of
from kdb.diff.model import KernelFacts, Rule, Winner, WinnerDiff, short_key, spills
from kdb.diff.rules import evaluate_winner_rule, winner_worse
from kdb.diff.sides import Row, Side
from kdb.figures import BY_COLUMN

_ORDER = {"flip": 0, "only_a": 1, "only_b": 2, "same": 3}


def parse_config(raw: Any) -> dict[str, Any]:
    """A config as the catalog stores it (JSON text) -> {"kwargs": …, "num_warps": …, …}."""
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError:
            return {"raw": raw}
    return raw if isinstance(raw, dict) else {}


def _winner(row: Row, facts: dict[str, KernelFacts]) -> Winner:
    key = row.get("cache_key")
    return Winner(
        source=row["source"],
        path=row["path"],
        config=parse_config(row.get("config")),
        time_ms=row.get("time_ms"),
        tuning_ms=row.get("tuning_ms"),
        found_by_coordesc=row.get("found_by_coordesc"),
        cache_key=key,
        link=row.get("link") or "missing",
        link_detail=row.get("link_detail"),
        facts=facts.get(key) if key else None,
    )


def _pair_key(row: Row) -> Hashable:
    if row["source"] == "best_config":
        if row.get("module_path") and row.get("kernel_name"):
            return ("kernel", row["module_path"], row["kernel_name"])
        return ("path", row["path"])
    return ("autotune_json", row.get("kernel_name"), row.get("key"))


def _keyed(side: Side) -> dict[Hashable, Row]:
    """Pairing key -> winner row. An autotune file with tied winners keeps its first; a key two winners
    share falls back to each one's file path."""
    firsts: dict[tuple[str, str], Row] = {}
    for row in side.winners:
        firsts.setdefault((row["source"], row["path"]), row)
    rows = list(firsts.values())
    counts = Counter(_pair_key(r) for r in rows)
    return {(_pair_key(r) if counts[_pair_key(r)] == 1 else ("path", r["path"])): r for r in rows}


def _unchecked(a: Winner | None, b: Winner | None) -> str | None:
    missing = [
        f"{side}'s winner has no linked kernel folder ({w.link}{': ' + w.link_detail if w.link_detail else ''})"
        for side, w in (("A", a), ("B", b))
        if w is not None and w.facts is None
    ]
    return "; ".join(missing) or None


def _status(a: Winner | None, b: Winner | None) -> str:
    if a is not None and b is not None:
        return "same" if a.config == b.config else "flip"
    return "only_a" if a is not None else "only_b"


def compare_winners(sa: Side, sb: Side, rules: list[Rule]) -> tuple[WinnerDiff, ...]:
    """Every winner of either side, paired and judged; flips first."""
    if not sa.winners and not sb.winners:
        return ()
    facts_a = {k["cache_key"]: KernelFacts.from_row(k) for k in sa.kernels}
    facts_b = {k["cache_key"]: KernelFacts.from_row(k) for k in sb.kernels}
    rows_a, rows_b = _keyed(sa), _keyed(sb)
    out: list[WinnerDiff] = []
    for key in list(rows_a) + [k for k in rows_b if k not in rows_a]:
        ra, rb = rows_a.get(key), rows_b.get(key)
        a = _winner(ra, facts_a) if ra else None
        b = _winner(rb, facts_b) if rb else None
        first = ra or rb
        assert first is not None
        status = _status(a, b)
        worse: tuple[str, ...] = ()
        if a and b and a.facts and b.facts:
            worse = tuple(winner_worse(a.facts, b.facts))
        wd = WinnerDiff(
            status,
            first["source"],
            first.get("module_path"),
            first.get("kernel_name"),
            a,
            b,
            worse,
            _unchecked(a, b) if a and b else None,
        )
        fired = tuple(r.text for r in rules if evaluate_winner_rule(r, wd))
        out.append(dataclasses.replace(wd, fired_rules=fired) if fired else wd)
    # flips first, then winners whose folder got worse, then the rest by status
    out.sort(key=lambda w: (w.status != "flip", not w.worse, _ORDER[w.status], w.name, w.module or ""))
    return tuple(out)


# -- text ---------------------------------------------------------------------------------------------
def config_text(config: Any) -> str:
    """`XBLOCK=1024 R0_BLOCK=8 warps=4 stages=1` (other options by name)."""
    if not isinstance(config, dict):
        return "-"
    parts = [f"{k}={v}" for k, v in (config.get("kwargs") or {}).items()]
    short = {"num_warps": "warps", "num_stages": "stages"}
    parts += [f"{short.get(k, k)}={v}" for k, v in config.items() if k != "kwargs"]
    return " ".join(parts) or "-"


def _ms(v: float | None) -> str | None:
    return None if v is None else f"{v:.4g} ms"


def timing_text(w: Winner) -> str:
    parts = []
    if w.time_ms is not None:
        parts.append(f"{'kernel' if w.source == 'best_config' else 'median'} {_ms(w.time_ms)}")
    if w.tuning_ms is not None:
        parts.append(f"tuning {_ms(w.tuning_ms)}")
    if w.found_by_coordesc:
        parts.append("coordesc")
    return ", ".join(parts)


def resources_text(w: Winner) -> str:
    """`regs 32, local 0 B, occ 64 warps [abc123]` (AMD: VGPRs, spills, scratch) of the linked folder, or
    why there is none."""
    return f"no linked folder ({w.link})" if w.facts is None else facts_text(w.facts)


def facts_text(f: KernelFacts) -> str:
    """A kernel folder's registers, spills or local memory, occupancy and short key, in one phrase."""
    roles = roles_of(f.backend)
    items: list[tuple[str, Any]] = [(roles.register_abbrev, f.get(roles.registers))]
    if roles.spill_counts:
        items.append(("spills", spills(f, roles.spill_counts)))
    items.append((roles.memory_abbrev, _bytes(f.get(roles.memory_spill))))
    # more spill memory (NVIDIA's stack) only where there is some
    items += [(BY_COLUMN[c].label, _bytes(f.get(c))) for c in roles.extra_memory if f.get(c)]
    occ = f.get("occupancy")
    if occ is not None:
        lim = f.get("occupancy_limiter")
        items.append(("occ", f"{occ}{' ' + lim if lim else ''}"))
    text = ", ".join(f"{k} {v}" for k, v in items if v is not None)
    return f"{text} [{short_key(f.cache_key)}]"


def _bytes(v: Any) -> str | None:
    return None if v is None else f"{v} B"


def winners_summary(winners: tuple[WinnerDiff, ...]) -> str:
    counts = Counter(w.status for w in winners)
    paired = counts["flip"] + counts["same"]
    worse = sum(1 for w in winners if w.worse)
    text = f"autotune winners: {paired} paired, {counts['flip']} flipped, {worse} worse on resources"
    if counts["only_a"] or counts["only_b"]:
        text += f"; {counts['only_a']} only in A, {counts['only_b']} only in B (not tuned on the other side, or the module renamed)"
    unchecked = sum(1 for w in winners if w.unchecked)
    if unchecked:
        text += f"; {unchecked} without a linked folder on a side"
    return text


def listed(winners: tuple[WinnerDiff, ...]) -> list[WinnerDiff]:
    """The winners a report lists: flips, and winners whose folder got worse."""
    return [w for w in winners if w.status == "flip" or w.worse]


def winner_lines(w: WinnerDiff) -> list[str]:
    """A few lines for one flipped or worse winner (the table; the markdown uses the same pieces)."""
    head = f"{w.status if w.status == 'flip' else 'same winner'} {w.name}"
    if w.worse:
        head += f" — B's winner is worse: {', '.join(w.worse)}"
    if w.module:
        head += f"  {w.module}"
    out = [head]
    for side, win in (("A", w.a), ("B", w.b)):
        if win is not None:
            timing = timing_text(win)
            out.append(f"  {side} {config_text(win.config)}{'; ' + timing if timing else ''}; {resources_text(win)}")
    if w.unchecked:
        out.append(f"  resources not compared: {w.unchecked}")
    return out
