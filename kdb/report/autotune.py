"""The report's "autotune: winners and losers": one point per autotuned config (its time against the
registers and occupancy of the kernel folder compiled for it), and a table per tuned kernel (one
snapshot) or per winner pair (a diff). Rows come from Catalog.autotune_configs; only configs with a
time and a linked folder can be drawn, and the caption says how many could not."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kdb.diff.model import KernelFacts, WinnerDiff
from kdb.diff.winners import config_text, facts_text, parse_config, resources_text, timing_text
from kdb.report.data import registers_of

Row = dict[str, Any]


def _ms(v: Any) -> str:
    return "-" if v is None else f"{v:.4g} ms"


def _resources(row: Row) -> str:
    """The linked folder's resources, worded as the diff's winner lines word them."""
    if row.get("cache_key") is None:
        return f"no linked folder ({row.get('link')})"
    return facts_text(KernelFacts.from_row(row))


def points(sides: Sequence[tuple[str, list[Row]]]) -> tuple[dict[str, list[dict[str, Any]]], int]:
    """Trace name ("A winners", "A other configs", …; one side: "winners", "other configs") -> its points,
    and how many configs could not be drawn (no time, or no folder with a register count)."""
    out: dict[str, list[dict[str, Any]]] = {}
    undrawn = 0
    for label, rows in sides:
        prefix = f"{label} " if len(sides) > 1 else ""
        for row in rows:
            regs, time = registers_of(row), row.get("time_ms")
            if regs is None or time is None:
                undrawn += 1
                continue
            name = prefix + ("winners" if row.get("is_best") else "other configs")
            out.setdefault(name, []).append(
                {
                    "regs": regs,
                    "occupancy": row.get("occupancy"),
                    "time": float(time),
                    "text": f"{row.get('kernel_name') or row['path']} {config_text(parse_config(row.get('config')))}"
                    f"<br>{_resources(row)}",
                }
            )
    return out, undrawn


def tuned_kernels(rows: list[Row]) -> list[list[str]]:
    """Per autotuned kernel of one snapshot (one file): the winner and the fastest other config, with the
    resources of their folders."""
    groups: dict[tuple[str, str], list[Row]] = {}
    for row in rows:
        groups.setdefault((row["source"], row["path"]), []).append(row)
    out = []
    for (source, path), members in groups.items():
        best = next((r for r in members if r.get("is_best")), None)
        others = sorted(
            (r for r in members if not r.get("is_best") and r.get("time_ms") is not None), key=lambda r: r["time_ms"]
        )
        runner = others[0] if others else None
        timed = sum(1 for r in members if r.get("time_ms") is not None)
        ratio = (
            f"{runner['time_ms'] / best['time_ms']:.2f}×"
            if best and runner and best.get("time_ms") and runner.get("time_ms") is not None
            else "-"
        )
        out.append(
            [
                members[0].get("kernel_name") or path,
                source,
                f"{len(members)} ({timed} timed)",
                config_text(parse_config(best.get("config"))) if best else "-",
                _ms(best.get("time_ms")) if best else "-",
                _resources(best) if best else "-",
                config_text(parse_config(runner.get("config"))) if runner else "-",
                _ms(runner.get("time_ms")) if runner else "-",
                _resources(runner) if runner else "-",
                ratio,
            ]
        )
    return out


TUNED_HEAD = [
    "kernel",
    "source",
    "configs",
    "winner",
    "time",
    "winner's folder",
    "fastest other",
    "time",
    "its folder",
    "other / winner",
]
WINNERS_HEAD = ["status", "kernel", "A winner", "B winner", "A time", "B time", "A folder", "B folder", "B worse"]


def winner_rows(winners: Sequence[WinnerDiff]) -> list[list[str]]:
    """Every winner pair of a diff, flips first (the order compare_winners gives)."""
    out = []
    for w in winners:
        out.append(
            [
                w.status,
                w.name,
                config_text(w.a.config) if w.a else "-",
                config_text(w.b.config) if w.b else "-",
                timing_text(w.a) if w.a else "-",
                timing_text(w.b) if w.b else "-",
                resources_text(w.a) if w.a else "-",
                resources_text(w.b) if w.b else "-",
                ", ".join(w.worse) or (w.unchecked or ""),
            ]
        )
    return out
