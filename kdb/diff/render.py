"""Render `kdb diff` results (kdb/diff/model.py) as text: table, json, markdown, csv. Pure functions, no printing.

The JSON document is described by docs/diff-json-schema.json (JSON Schema draft 2020-12).
"""

from __future__ import annotations

import json
from typing import Any

from kdb.diff.model import (
    LIMITERS,
    METRICS,
    UNPAIRED,
    DiffResult,
    KernelDeepView,
    KernelDiff,
    KernelFacts,
    Status,
    spills,
)
from kdb.render.tables import table_csv, table_markdown, table_text, to_json

FORMATS = ("table", "json", "markdown", "csv")
SCHEMA_VERSION = 1
TABLE_WIDTH = 80


def summary_line(r: DiffResult) -> str:
    s = r.summary
    return (
        f"matched {s['matched']}, changed {s['changed']}, regressed {s['regressed']}, improved {s['improved']}, "
        f"only in A {s['only_a']}, only in B {s['only_b']}, ambiguous {s['ambiguous']}"
    )


def _label(k: KernelDiff) -> str:
    return k.status.label


def _occupancy_text(value: Any, limiter: Any) -> str:
    """Occupancy 0 with limiter `lds`: the LDS request exceeds what one workgroup may use."""
    if value == 0 and limiter == "lds":
        return "cannot launch"
    return "-" if value is None else str(value)


def _occupancy(k: KernelDiff) -> str:
    m = k.metrics.get("occupancy")
    lim = k.limiters.get("occupancy_limiter") or {}
    if not m:
        facts = k.facts
        return (
            ""
            if facts is None or facts.get("occupancy") is None
            else _occupancy_text(facts.get("occupancy"), facts.get("occupancy_limiter"))
        )
    a, b = _occupancy_text(m["a"], lim.get("a")), _occupancy_text(m["b"], lim.get("b"))
    return a if a == b else f"{a}→{b}"


def _arrow(k: KernelDiff, metric: str) -> str:
    m = k.metrics.get(metric)
    if not m:
        facts = k.facts
        v = facts.get(metric) if facts else None
        return "" if v is None else str(v)
    a, b = m["a"], m["b"]
    if a == b:
        return "" if a is None else str(a)
    return f"{'-' if a is None else a}→{'-' if b is None else b}"


def _spill_text(k: KernelDiff) -> str:
    a, b = spills(k.a), spills(k.b)
    if k.status in UNPAIRED:
        v = a if k.a else b
        return "" if v is None else str(v)
    if a == b:
        return "" if a is None else str(a)
    return f"{'-' if a is None else a}→{'-' if b is None else b}"


def _regs_metric(k: KernelDiff) -> str:
    facts = k.facts
    hip = facts is not None and (facts.get("vgpr_count") is not None or facts.backend == "hip")
    return "vgpr_count" if hip else "registers"


def _scratch_metric(k: KernelDiff) -> str:
    facts = k.facts
    return "scratch_bytes" if facts is not None and facts.backend == "hip" else "local_bytes"


def _short(key: str | None) -> str:
    return key[:6] if key else "-"


def table_rows(r: DiffResult) -> list[list[Any]]:
    rows = []
    for k in r.kernels:
        if k.status is Status.SAME:
            continue
        keys = _short(k.a_cache_key or k.b_cache_key)
        rows.append(
            [
                _label(k),
                f"{k.name} {keys}",
                _occupancy(k),
                _arrow(k, _regs_metric(k)),
                _spill_text(k),
                _arrow(k, _scratch_metric(k)),
                k.first_changed_stage or "",
                k.reason or "" if k.status.changed else "",
            ]
        )
    return rows


TABLE_HEADERS = ["status", "kernel key", "occ", "regs", "spill", "scratch", "stage", "why"]


def render_table(r: DiffResult) -> str:
    out = f"kdb diff {r.a_label} → {r.b_label}{' (across targets)' if r.across_targets else ''}\n"
    out += summary_line(r) + "\n"
    rows = table_rows(r)
    if rows:
        out += "\n" + table_text(TABLE_HEADERS, rows, width=TABLE_WIDTH)
    same = r.count(Status.SAME)
    if same:
        out += f"\n{same} paired kernels with the same facts not shown (--format json lists every kernel)\n"
    for k in r.kernels:
        if k.status in UNPAIRED and k.reason and not k.reason.startswith("no kernel with"):
            out += f"  {_label(k)}: {k.name} {_short(k.a_cache_key or k.b_cache_key)}: {k.reason}\n"
    if r.rules:
        out += f"fail-on: {', '.join(x.text for x in r.rules)}; fired: {', '.join(r.fired) or 'none'}\n"
    if r.trust_problem:
        out += f"untrusted: {r.trust_problem}\n"
    return out


def kernel_document(k: KernelDiff) -> dict[str, Any]:
    return {
        "status": k.status.report_status,
        "verdict": k.status.verdict,
        "severity": k.severity,
        "name": k.name,
        "target": k.target,
        "a_cache_key": k.a_cache_key,
        "b_cache_key": k.b_cache_key,
        "identity": k.facts.identity if k.facts else None,
        "reason": k.reason,
        "candidates": k.candidates,
        "metrics": k.metrics,
        "limiters": k.limiters,
        "mix_groups": k.mix_groups,
        "mix_mnemonics": k.mix_mnemonics,
        "first_changed_stage": k.first_changed_stage,
        "fired_rules": k.fired_rules,
    }


def document(r: DiffResult, views: list[KernelDeepView] | None = None) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "a": {"ref": r.a_label, "kernels": r.a_count, "targets": r.a_targets},
        "b": {"ref": r.b_label, "kernels": r.b_count, "targets": r.b_targets},
        "across_targets": r.across_targets,
        "summary": r.summary,
        "match_rate": round(r.match_rate, 6),
        "min_match": r.min_match,
        "trusted": r.trust_problem is None,
        "trust_problem": r.trust_problem,
        "rules": [x.text for x in r.rules],
        "fired_rules": r.fired,
        "kernels": [kernel_document(k) for k in r.kernels],
    }
    if views:
        doc["deep"] = [view_document(v) for v in views]
    return doc


def view_document(v: KernelDeepView) -> dict[str, Any]:
    return {
        "name": v.kernel.name,
        "a_cache_key": v.kernel.a_cache_key,
        "b_cache_key": v.kernel.b_cache_key,
        "triton_json_diff": v.triton_json_diff,
        "co_metadata_diff": v.co_metadata_diff,
        "mix": v.mix_rows,
        "isa_kind": v.isa_kind,
        "isa_diff": v.isa_diff,
    }


def render_markdown(r: DiffResult) -> str:
    out = f"### kdb diff `{r.a_label}` → `{r.b_label}`\n\n{summary_line(r)}\n\n"
    if r.fired:
        out += f"**fired:** {', '.join(r.fired)}\n\n"
    if r.trust_problem:
        out += f"**untrusted:** {r.trust_problem}\n\n"
    rows = table_rows(r)
    if rows:
        out += table_markdown(TABLE_HEADERS, rows)
    else:
        out += "No kernel changed.\n"
    return out


CSV_HEAD = [
    "status",
    "verdict",
    "severity",
    "name",
    "target",
    "a_cache_key",
    "b_cache_key",
    "first_changed_stage",
    "reason",
    "fired_rules",
]


def _fact(facts: KernelFacts | None, column: str) -> Any:
    return facts.get(column) if facts else None


def render_csv(r: DiffResult) -> str:
    columns = (
        CSV_HEAD
        + [f"{m}_{s}" for m in METRICS for s in ("a", "b", "delta")]
        + [f"{m}_{s}" for m in LIMITERS for s in ("a", "b")]
    )
    rows = []
    for k in r.kernels:
        row: list[Any] = [
            k.status.report_status,
            k.status.verdict,
            k.severity,
            k.name,
            k.target,
            k.a_cache_key,
            k.b_cache_key,
            k.first_changed_stage,
            k.reason,
            ";".join(k.fired_rules),
        ]
        for m in METRICS:
            v = k.metrics.get(m)
            if v is None:
                facts = k.facts
                one = facts.get(m) if facts else None
                row += [one if k.a else None, one if k.b else None, None]
            else:
                row += [v["a"], v["b"], v["delta"]]
        for m in LIMITERS:
            v = k.limiters.get(m) or {"a": _fact(k.a, m), "b": _fact(k.b, m)}
            row += [v["a"], v["b"]]
        rows.append(row)
    return table_csv(columns, rows)


def render_views(views: list[KernelDeepView]) -> str:
    out = ""
    for v in views:
        k = v.kernel
        out += f"\n== {k.name}  {k.a_cache_key or '-'} → {k.b_cache_key or '-'}  ({_label(k)})\n"
        if k.metrics:
            rows = [
                [m, x["a"], x["b"], x["delta"]]
                for m, x in k.metrics.items()
                if x["a"] is not None or x["b"] is not None
            ]
            out += table_text(["fact", "A", "B", "delta"], rows, width=TABLE_WIDTH)
        out += (
            "\nTriton JSON (deepdiff):\n"
            + (json.dumps(v.triton_json_diff, indent=2, sort_keys=True) if v.triton_json_diff else "  identical")
            + "\n"
        )
        out += (
            "\ncode-object metadata (deepdiff):\n"
            + (json.dumps(v.co_metadata_diff, indent=2, sort_keys=True) if v.co_metadata_diff else "  identical")
            + "\n"
        )
        if v.mix_rows:
            out += "\ninstruction mix:\n" + table_text(
                ["mnemonic", "group", "A", "B", "delta"],
                [[r["mnemonic"], r["grp"], r["a"], r["b"], r["delta"]] for r in v.mix_rows],
                width=TABLE_WIDTH,
            )
        out += f"\nnormalised ISA ({v.isa_kind or 'none'}) diff:\n" + (v.isa_diff or "  identical\n")
    return out


def render_diff(r: DiffResult, fmt: str, views: list[KernelDeepView] | None = None) -> str:
    if fmt == "json":
        return to_json(document(r, views))
    if fmt == "csv":
        return render_csv(r)
    if fmt == "markdown":
        return render_markdown(r)
    return render_table(r) + (render_views(views) if views else "")
