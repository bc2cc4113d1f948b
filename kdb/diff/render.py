"""Render `kdb diff` results (kdb/diff/model.py) as text: table, json, markdown, csv. Pure functions, no printing.

The JSON document is described by docs/diff-json-schema.json (JSON Schema draft 2020-12).
"""

from __future__ import annotations

from typing import Any

from kdb.diff.groups import Group, group_document, groups, kernel_group
from kdb.diff.markdown import render_markdown
from kdb.diff.model import (
    LIMITERS,
    LOOP_FACTS,
    METRICS,
    TIME_FACTS,
    DiffResult,
    KernelDeepView,
    KernelDiff,
    KernelFacts,
    Why,
    Winner,
    WinnerDiff,
)
from kdb.diff.terminal import (
    DEFAULT_WIDTH,
    TableOptions,
    assumption_text,
    render_table,
    summary_line,
    why_line,
)
from kdb.diff.verdict import launchable, scratch_by_depth, why_unlaunchable
from kdb.diff.views import view_text
from kdb.figures import WINNER_RESOURCES
from kdb.render.tables import table_csv, to_json

FORMATS = ("table", "json", "markdown", "csv")
SCHEMA_VERSION = 1
__all__ = ["FORMATS", "TableOptions", "document", "render_csv", "render_diff", "render_markdown", "summary_line"]


def kernel_document(k: KernelDiff, key: str | None = None) -> dict[str, Any]:
    doc = _kernel_fields(k, key)
    if k.why is not None:  # `--why`: changed kernels only
        doc["why"] = why_document(k.why)
    return doc


def why_document(w: Why) -> dict[str, Any]:
    """A changed kernel's `why`: its stage, the reason, the figures of A, of each swap and of B."""
    return {"stage": w.stage, "reason": w.reason, "figures": dict(w.figures), "decided_by": w.decided_by}


def _kernel_fields(k: KernelDiff, key: str | None) -> dict[str, Any]:
    return {
        "status": k.status.report_status,
        "label": k.status.label,
        "key": key,
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
        "loops": {"a": _loop_facts(k.a), "b": _loop_facts(k.b)},
        "time": {"a": _time_facts(k.a), "b": _time_facts(k.b)},
        "mix_groups": k.mix_groups,
        "mix_mnemonics": k.mix_mnemonics,
        "first_changed_stage": k.first_changed_stage,
        "fired_rules": k.fired_rules,
        "unknown_rules": k.unknown_rules,
        "warnings": k.warnings,
        "cannot_launch": {"a": _cannot_launch(k.a), "b": _cannot_launch(k.b)},
    }


def _cannot_launch(facts: KernelFacts | None) -> str | None:
    """Why a side cannot launch (`asks 98304 B of LDS, gfx942 grants 65536 B`); null where it can or is unknown."""
    return why_unlaunchable(facts) if facts is not None and launchable(facts) is False else None


def _time_facts(facts: KernelFacts | None) -> dict[str, Any] | None:
    """A side's measured time (kernel_times: launches, ns, share); null when no imported profile ran it."""
    if facts is None or facts.get("measured_ns") is None:
        return None
    return {
        "launches": facts.get("measured_launches"),
        "total_ns": facts.get("measured_ns"),
        "share": facts.get("measured_share"),
    }


def _loop_facts(facts: KernelFacts | None) -> dict[str, Any] | None:
    """A side's loop figures: scratch per loop depth as {depth: instructions} (NULL figures stay null)."""
    if facts is None:
        return None
    out = {c: facts.get(c) for c in LOOP_FACTS}
    depths = scratch_by_depth(facts.values)
    out["scratch_by_loop_depth"] = None if depths is None else {str(d): n for d, n in sorted(depths.items())}
    return out


def _group_id(r: DiffResult, k: KernelDiff, grouped: list[Group]) -> str | None:
    """The id of the autotune group of two or more kernels a kernel belongs to (None: it is alone)."""
    gid = kernel_group(r, k)
    return gid if any(g.id == gid for g in grouped) else None


def document(r: DiffResult, views: list[KernelDeepView] | None = None) -> dict[str, Any]:
    grouped = groups(r)
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
        "unknown_rules": r.unknown_rules,
        "unknown_reasons": r.unknown_reasons,
        "allow_unknown": r.allow_unknown,
        "assumptions": r.assumptions,
        "kernels": [{**kernel_document(k, r.key_of(k)), "group": _group_id(r, k, grouped)} for k in r.kernels],
        "groups": [group_document(r, g) for g in grouped],
        "winners": [winner_document(w) for w in r.winners],
    }
    if views:
        doc["deep"] = [view_document(v) for v in views]
    return doc


WINNER_FACTS = WINNER_RESOURCES  # the `resources` of a winner in the JSON document, in their shipped order


def _winner_side(w: Winner | None) -> dict[str, Any] | None:
    if w is None:
        return None
    return {
        "source": w.source,
        "path": w.path,
        "config": w.config,
        "time_ms": w.time_ms,
        "tuning_ms": w.tuning_ms,
        "found_by_coordesc": w.found_by_coordesc,
        "cache_key": w.cache_key,
        "link": w.link,
        "link_detail": w.link_detail,
        "resources": {c: w.facts.get(c) for c in WINNER_FACTS} if w.facts else None,
    }


def winner_document(w: WinnerDiff) -> dict[str, Any]:
    return {
        "status": w.status,
        "source": w.source,
        "module": w.module,
        "kernel": w.kernel,
        "a": _winner_side(w.a),
        "b": _winner_side(w.b),
        "worse": w.worse,
        "unchecked": w.unchecked,
        "fired_rules": w.fired_rules,
    }


def view_document(v: KernelDeepView) -> dict[str, Any]:
    return {
        "name": v.kernel.name,
        "a_cache_key": v.kernel.a_cache_key,
        "b_cache_key": v.kernel.b_cache_key,
        "triton_json_diff": v.triton_json_diff,
        "co_metadata_diff": v.co_metadata_diff,
        "mix": v.mix_rows,
        "mix_by_loop": v.loop_rows,
        "loop_known": {"a": v.loop_known[0], "b": v.loop_known[1]},
        "isa_kind": v.isa_kind,
        "isa_raw": v.isa_raw,
        "isa_diff": v.isa_diff,
    }


CSV_HEAD = [
    "status",
    "label",
    "key",
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
        + [f"{m}_{s}" for m in TIME_FACTS for s in ("a", "b")]  # kdb profile import; empty without
    )
    rows = []
    for k in r.kernels:
        row: list[Any] = [
            k.status.report_status,
            k.status.label,
            r.key_of(k),
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
        row += [_fact(side, m) for m in TIME_FACTS for side in (k.a, k.b)]
        rows.append(row)
    # What kdb assumed, as comment lines before the header (pandas: comment="#"; DuckDB: skip=N)
    head = "".join(f"# kdb assumed: {line}\n" for line in r.assumptions)
    return head + table_csv(columns, rows)


def render_views(views: list[KernelDeepView], width: int = DEFAULT_WIDTH) -> str:
    return "".join(view_text(v, width) for v in views)


def render_diff(
    r: DiffResult, fmt: str, views: list[KernelDeepView] | None = None, opts: TableOptions | None = None
) -> str:
    """The report in one format. With deep views, the table and markdown formats show only the selected
    kernels (after the summary); json and csv are unchanged documents (json adds `deep`)."""
    opts = opts or TableOptions()
    if fmt == "json":
        return to_json(document(r, views))
    if fmt == "csv":
        return render_csv(r)
    if fmt == "markdown":
        return render_markdown(r, views, top=opts.top)
    if views:
        head = f"kdb diff {r.a_label} → {r.b_label}{' (across targets)' if r.across_targets else ''}\n"
        why = why_line(r)
        head += summary_line(r) + "\n" + (f"{why}\n" if why else "")
        return head + assumption_text(r) + render_views(views, opts.width)
    return render_table(r, opts)
