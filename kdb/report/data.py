"""The records a report shows, as JSON-ready dicts: the rows of the ranked table, each kernel's drill-down, and
the series of every plot (with the number of marks each should draw, which the browser test checks)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

from kdb.analysis.registry import roles_of
from kdb.diff.model import UNPAIRED, DiffResult, KernelDeepView, KernelDiff, Status, key_length, short_key
from kdb.diff.terminal import HEADERS, display_names, occupancy_cell, occupancy_text, roles_of_kernel, row
from kdb.diff.views import deepdiff_lines, fact_rows

VERDICTS = ("regressed", "mixed", "improved", "neutral", "same")
HOT_LINES = 10
ISA_CHARS = (60_000, 8_000)  # the ISA hunks a drill-down embeds: of the `full` worst kernels, of every other one


def _reg_column(k: KernelDiff) -> str:
    return roles_of_kernel(k).registers


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def hot_lines(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The source lines with the most instructions: file (base name), line, count, groups."""
    total: Counter[tuple[str, int]] = Counter()
    groups: dict[tuple[str, int], Counter[str]] = {}
    for r in lines:
        key = (str(r.get("file") or "?").rsplit("/", 1)[-1], int(r.get("line") or 0))
        total[key] += int(r.get("count") or 0)
        groups.setdefault(key, Counter())[str(r.get("grp"))] += int(r.get("count") or 0)
    return [
        {"file": f, "line": n, "count": c, "groups": ", ".join(f"{g} {x}" for g, x in groups[f, n].most_common(3))}
        for (f, n), c in total.most_common(HOT_LINES)
    ]


def diff_rows(r: DiffResult) -> list[dict[str, Any]]:
    """Every kernel but the same ones, in report order: display cells and sort keys."""
    out = []
    for rank, k in enumerate(r.kernels):
        if k.status is Status.SAME:
            continue
        cells = row(k, r.key_of(k))
        # measured time is the terminal's and markdown's (kdb profile import), as is `--why`'s stage
        cells = [c for h, c in zip(HEADERS, cells, strict=True) if h not in ("time", "why")]
        col = _reg_column(k)
        b = k.b or k.a
        sort = [
            rank,
            cells[1],
            k.name,
            _num(b.get(col)) if b else None,
            _num(b.get("agpr_count")) if b else None,
            _num(b.get("sgpr_count")) if b else None,
            _num(b.get("vgpr_spill_count")) if b else None,
            _num(b.get("sgpr_spill_count")) if b else None,
            _num(b.get("scratch_bytes") if col == "vgpr_count" else b.get("local_bytes")) if b else None,
            _num(b.get("occupancy")) if b else None,
            cells[-2],
            cells[-1],
        ]
        out.append({"id": rank, "status": k.status.label, "cells": cells, "sort": sort, "severity": k.severity})
    return out


def isa_text(v: KernelDeepView, chars: int, command: str) -> str:
    """The ISA hunks of a drill-down, cut at a line end within `chars` (the last line: the `command` showing all)."""
    text = v.isa_diff
    if len(text) <= chars:
        return text
    cut = text.rfind("\n", 0, chars) + 1 or chars
    rest = text.count("\n", cut) + 1
    return text[:cut] + f"… {rest} more lines: {command}"


def diff_drill(
    r: DiffResult, views: list[KernelDeepView], lines: dict[tuple[str, str], list[dict[str, Any]]], full: int = 50
) -> dict[str, Any]:
    """Drill-down per table row id: facts side by side, mix groups, metadata differences, ISA hunks (the `full`
    worst changed kernels' up to ISA_CHARS[0], every other one's up to ISA_CHARS[1]), hot lines. A kernel without a
    deep view (one side only) has its facts and mix, and no loop, metadata or ISA section."""
    by_kernel = {id(v.kernel): v for v in views}
    out: dict[str, Any] = {}
    changed = 0
    for rank, k in enumerate(r.kernels):
        if k.status is Status.SAME:
            continue
        changed += k.status.changed
        v = by_kernel.get(id(k))
        facts = fact_rows(v) if v else fact_rows(KernelDeepView(k, {}, {}, [], "", None))
        out[str(rank)] = {
            "name": k.name,
            "a_key": k.a_cache_key,
            "b_key": k.b_cache_key,
            "status": k.status.label,
            "reason": k.reason,
            "facts": [[str(c) if c is not None else "" for c in f] for f in facts],
            "mix": [[g, x["a"], x["b"], x["delta"]] for g, x in k.mix_groups.items()],
            "metadata": (deepdiff_lines(v.triton_json_diff) + deepdiff_lines(v.co_metadata_diff)) if v else None,
            "isa": isa_text(v, ISA_CHARS[changed > full], f"kdb diff {r.a_label} {r.b_label} --kernel {r.key_of(k)}")
            if v
            else None,
            "loops": loop_groups(v) if v else [],
            "loop_known": list(v.loop_known) if v else None,
            "hot_a": hot_lines(lines.get(("a", k.a_cache_key or ""), [])),
            "hot_b": hot_lines(lines.get(("b", k.b_cache_key or ""), [])),
        }
    return out


def loop_groups(v: KernelDeepView) -> list[list[Any]]:
    """The mix per loop depth and group, both sides: [depth, group, A, B, delta], outermost depth first."""
    totals: dict[tuple[int, str], list[int]] = {}
    for r in v.loop_rows:
        t = totals.setdefault((int(r["loop_depth"]), str(r["grp"])), [0, 0])
        t[0] += int(r["a"])
        t[1] += int(r["b"])
    return [[d, g, a, b, b - a] for (d, g), (a, b) in sorted(totals.items())]


def a_vs_b_points(
    r: DiffResult, column: Callable[[KernelDiff], str], *, skip_zeros: bool = False
) -> dict[str, list[dict[str, Any]]]:
    """Per verdict: the paired kernels with the figure `column(k)` on both sides (x: A, y: B); `skip_zeros` leaves
    out those at 0 on both."""
    out: dict[str, list[dict[str, Any]]] = {v: [] for v in VERDICTS}
    for rank, k in enumerate(r.kernels):
        if not k.status.paired or k.a is None or k.b is None:
            continue
        col = column(k)
        xa, xb = _num(k.a.get(col)), _num(k.b.get(col))
        if xa is None or xb is None or (skip_zeros and xa == 0 and xb == 0):
            continue
        out[k.status.label].append({"x": xa, "y": xb, "text": f"{r.key_of(k)} {k.name}", "id": rank})
    return out


def loop_scratch_points(r: DiffResult) -> dict[str, list[dict[str, Any]]]:
    """Paired kernels with a loop-weighted scratch figure on both sides, not both 0."""
    return a_vs_b_points(r, lambda _: "loop_weighted_scratch", skip_zeros=True)


def vgpr_points(r: DiffResult) -> dict[str, list[dict[str, Any]]]:
    """Paired kernels with a register count (VGPRs, NVIDIA registers) on both sides."""
    return a_vs_b_points(r, _reg_column)


def occupancy_transitions(r: DiffResult) -> tuple[list[str], list[str], list[list[int]]]:
    """(A labels, B labels, counts[a][b]) of the paired kernels' occupancy."""
    pairs: Counter[tuple[str, str]] = Counter()
    for k in r.kernels:
        if k.status.paired and k.a and k.b:
            a = occupancy_text(k.a.get("occupancy"), k.a.get("occupancy_limiter"))
            b = occupancy_text(k.b.get("occupancy"), k.b.get("occupancy_limiter"))
            pairs[a, b] += 1

    def order(v: str) -> tuple[int, float]:
        return (0, float(v)) if v.replace(".", "").isdigit() else (1, 0.0)

    la = sorted({a for a, _ in pairs}, key=order)
    lb = sorted({b for _, b in pairs}, key=order)
    return la, lb, [[pairs.get((a, b), 0) for b in lb] for a in la]


def spill_changes(r: DiffResult) -> list[dict[str, Any]]:
    """Paired kernels whose spills or scratch (NVIDIA: local memory) changed: the deltas."""
    out = []
    for k in r.kernels:
        if not (k.status.paired and k.a and k.b):
            continue
        deltas = {}
        for label, col in (
            ("VGPR spills", "vgpr_spill_count"),
            ("SGPR spills", "sgpr_spill_count"),
            ("scratch bytes", roles_of(k.a.backend).memory_spill),
        ):
            a, b = _num(k.a.get(col)), _num(k.b.get(col))
            deltas[label] = (b - a) if a is not None and b is not None else 0.0
        if any(deltas.values()):
            out.append({"kernel": k.name, "key": r.key_of(k), **deltas})
    return with_labels(out)


LABEL_WIDTH = 36  # characters of a bar chart's category label: the key, then the name's distinguishing end


def with_labels(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each item (`kernel`, `key`) with a `label`: `KEY name`, the names without what every one shares, elided in
    the middle to LABEL_WIDTH (the key is what tells two labels apart, and what `kdb show --kernel` takes)."""
    from kdb.render.tables import elide_middle

    names, _ = display_names([x["kernel"] for x in items])
    for x, name in zip(items, names, strict=True):
        x["label"] = f"{x['key']} {elide_middle(name, LABEL_WIDTH - len(x['key']) - 1, 0.35)}"
    return items


def mix_shifts(r: DiffResult) -> dict[str, int]:
    """Instruction-mix group -> the sum of its count changes over the paired kernels (non-zero only)."""
    total: Counter[str] = Counter()
    for k in r.kernels:
        if k.status.paired:
            for g, x in k.mix_groups.items():
                total[g] += int(x.get("delta") or 0)
    return {g: d for g, d in sorted(total.items()) if d}


def summary_counts(r: DiffResult) -> dict[str, int]:
    return {**r.summary, "unpaired": sum(1 for k in r.kernels if k.status in UNPAIRED)}


# -- one snapshot -------------------------------------------------------------------------------------
SNAPSHOT_HEADERS = ["key", "kernel", "VGPRs", "AGPRs", "SGPRs", "vspill", "sspill", "scratch", "occupancy", "LDS"]


def snapshot_rows(kernels: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    length = key_length(k["cache_key"] for k in kernels)
    for i, k in enumerate(kernels):
        roles = roles_of(k.get("backend"))
        occ = occupancy_text(k.get("occupancy"), k.get("occupancy_limiter"))
        lim = k.get("occupancy_limiter") or ""
        cells = [
            short_key(k["cache_key"], length),
            k["name"],
            # the AMD columns (AGPRs, SGPRs, spills) stay empty on a backend without them
            *(k.get(c) if c else None for c in roles.table_cells),
            f"{occ} {lim if occ != 'cannot launch' else ''}".strip(),
            k.get(roles.shared_listed),
        ]
        sort: list[Any] = [c if isinstance(c, (int, float)) else None for c in cells]
        sort[0], sort[1] = cells[0], cells[1]
        sort[8] = _num(k.get("occupancy"))
        out.append({"id": i, "status": "", "cells": ["" if c is None else str(c) for c in cells], "sort": sort})
    return out


def occupancy_by_limiter(kernels: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """limiter -> occupancy label -> kernels."""
    out: dict[str, Counter[str]] = {}
    for k in kernels:
        occ = occupancy_text(k.get("occupancy"), k.get("occupancy_limiter"))
        out.setdefault(str(k.get("occupancy_limiter") or "unknown"), Counter())[occ] += 1
    return {lim: dict(c) for lim, c in sorted(out.items())}


def registers_of(row: dict[str, Any]) -> float | None:
    """VGPRs of a `kernels` row (NVIDIA: registers per thread), the one count the plots draw."""
    return _num(row.get(roles_of(row.get("backend")).registers))


def register_values(kernels: list[dict[str, Any]]) -> list[float]:
    values = [registers_of(k) for k in kernels]
    return [v for v in values if v is not None]


def spilling(kernels: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    length = key_length(k["cache_key"] for k in kernels)
    for k in kernels:
        scratch = _num(k.get(roles_of(k.get("backend")).memory_spill)) or 0.0
        spills = (_num(k.get("vgpr_spill_count")) or 0.0) + (_num(k.get("sgpr_spill_count")) or 0.0)
        if scratch or spills:
            key = short_key(k["cache_key"], length)
            out.append({"kernel": k["name"], "key": key, "scratch": scratch, "spills": spills})
    return with_labels(sorted(out, key=lambda x: -x["scratch"]))


def occupancy_label(k: KernelDiff) -> str:
    return occupancy_cell(k)
