"""`kdb diff`: compare two loaded snapshots kernel by kernel. Returns the model (kdb/diff/model.py); never prints.

Every kernel gets one Status: paired (same, or changed with the verdict kdb/diff/rules.py gives), only in
A, only in B, or ambiguous (kdb/diff/matching.py). A comparison is untrusted (exit code 2) when either
side has no kernels, when the sides share no target and `across_targets` is off, or when fewer than
`min_match` (default one half) of the smaller side's kernels were paired: the result carries
`trust_problem`, and the CLI renders the report and then exits 2.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from typing import Any

from kdb.analysis.registry import roles_of
from kdb.diff.deep import deep_views, views_of
from kdb.diff.matching import Pairing, learn_defaults, match
from kdb.diff.mix_sources import CommonMix, like_with_like, like_with_like_lines, sources_differ
from kdb.diff.model import (
    METRICS,
    REPORT_STATUSES,
    DiffOptions,
    DiffResult,
    KernelDeepView,
    KernelDiff,
    KernelFacts,
    Status,
)
from kdb.diff.rules import (
    classify,
    judge_rule,
    mark_fired,
    trust_problem,
    unknown_figures,
    unknown_reasons,
    winner_rule_unknown,
)
from kdb.diff.sides import Row, Side, row_document, without_cycle_collector
from kdb.diff.verdict import cliff_warning, launchable
from kdb.diff.winners import compare_winners
from kdb.triton.normalize import metadata_view

STAGES: tuple[str, ...] = ("ttir", "ttgir", "llir", "isa")


def first_changed_stage(sa: Side, a: Row, sb: Side, b: Row) -> str | None:
    for stage in STAGES:
        da, db = a.get(f"{stage}_digest"), b.get(f"{stage}_digest")
        if da is not None and db is not None:  # computed at ingest: no IR needs reading
            if da != db:
                return stage
            continue
        fa, fb = sa.stage_file(a["cache_key"], stage), sb.stage_file(b["cache_key"], stage)
        if fa is not None and fb is not None and fa["hash"] == fb["hash"]:
            continue  # byte-identical: no need to read or normalise either side
        ta, _ = sa.stage_text(a["cache_key"], stage)
        tb, _ = sb.stage_text(b["cache_key"], stage)
        if ta is None and tb is None:
            continue
        if ta != tb:
            return stage
    da, db = a.get("metadata_digest"), b.get("metadata_digest")
    if da is not None and db is not None:
        return "metadata" if da != db else None
    if metadata_view(row_document(a, "triton_metadata")) != metadata_view(row_document(b, "triton_metadata")):
        return "metadata"
    return None


# -- comparison ---------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=4096)
def _groups(raw: str) -> dict[str, int]:
    """A mix-group document decoded once: kernels of one build share few distinct ones (read only)."""
    try:
        doc = json.loads(raw)
    except ValueError:
        return {}
    return doc if isinstance(doc, dict) else {}


@functools.lru_cache(maxsize=4096)
def _unchanged_groups(raw: str) -> dict[str, dict[str, int]]:
    """The group table of two kernels with the same mix-group document: every delta 0 (shared, read only)."""
    groups = _groups(raw)
    return {g: {"a": groups[g], "b": groups[g], "delta": 0} for g in sorted(groups)}


def _group_document(k: dict[str, Any]) -> dict[str, int]:
    raw = k.get("instr_groups")
    if isinstance(raw, str):
        return _groups(raw)
    return raw if isinstance(raw, dict) else {}


def _mix_tables(
    a: dict[str, Any], mnemonics_a: dict[str, int], b: dict[str, Any], mnemonics_b: dict[str, int]
) -> tuple[dict, dict]:
    """(group -> {a, b, delta} for every group, mnemonic -> {a, b, delta} for mnemonics whose count changed)."""
    raw_a = a.get("instr_groups")
    if isinstance(raw_a, str) and raw_a == b.get("instr_groups"):
        group_table = _unchanged_groups(raw_a)
    else:
        ga, gb = _group_document(a), _group_document(b)
        group_table = {
            g: {"a": ga.get(g, 0), "b": gb.get(g, 0), "delta": gb.get(g, 0) - ga.get(g, 0)}
            for g in sorted(ga.keys() | gb.keys())
        }
    if mnemonics_a == mnemonics_b:
        return group_table, {}
    # (mnemonic, count) pairs in one mix and not the other: the set operation runs in C, so only the
    # mnemonics whose count changed are visited here
    differing = sorted({m for m, _ in mnemonics_a.items() ^ mnemonics_b.items()})
    changed = {
        m: {
            "a": mnemonics_a.get(m, 0),
            "b": mnemonics_b.get(m, 0),
            "delta": mnemonics_b.get(m, 0) - mnemonics_a.get(m, 0),
        }
        for m in differing
    }
    return group_table, changed


def _same_mix(a: dict[str, Any] | None, b: dict[str, Any] | None) -> bool:
    """Both kernels have an instruction mix and its digests are equal (no need to read the mnemonics)."""
    if a is None or b is None:
        return False
    return a.get("instr_mix_digest") is not None and a.get("instr_mix_digest") == b.get("instr_mix_digest")


_NO_MNEMONICS: dict[str, int] = {}


def compare_pair(p: Pairing, sa: Side, sb: Side, common: CommonMix | None = None) -> KernelDiff:
    """The diff of a paired kernel: facts, limiters, instruction mix, first changed stage, verdict. `common`: the
    instruction figures of a source both sides have, where their analyses chose different ones (like_with_like)."""
    a, b = (common.a, common.b) if common is not None else (p.a, p.b)
    assert a is not None and b is not None
    get_a, get_b = a.get, b.get
    facts_differ = any(get_a(m) != get_b(m) for m in METRICS)
    if common is not None:
        mnemonics_a, mnemonics_b = common.mnemonics_a, common.mnemonics_b
    elif _same_mix(a, b):  # equal digests: no mnemonic count changed, none needs reading
        mnemonics_a = mnemonics_b = _NO_MNEMONICS
    else:
        mnemonics_a, mnemonics_b = sa.mnemonics_of(a["cache_key"]), sb.mnemonics_of(b["cache_key"])
    mix_groups, mix_mnemonics = _mix_tables(a, mnemonics_a, b, mnemonics_b)
    stage = first_changed_stage(sa, a, sb, b)
    # the kernel's typed facts, built once: the verdict, the unknowns, the cliff and the rules all read these
    facts_a, facts_b = KernelFacts.from_row(a), KernelFacts.from_row(b)
    status, severity, reason = Status.SAME, 0.0, None
    if facts_differ or mix_mnemonics:
        status, severity, reason = classify(facts_a, facts_b)
    unknown = unknown_figures(facts_a, facts_b)
    if unknown:  # said first: a verdict over figures kdb could not compute is no verdict on them
        reason = "; ".join(unknown) + (f"; {reason}" if reason else "")
    warning = cliff_warning(facts_a, facts_b)
    if warning:  # said last: not part of the verdict, but where a reader of the reason looks
        reason = f"{reason}; {warning}" if reason else warning
    return KernelDiff(
        status,
        p.name,
        a=facts_a,
        b=facts_b,
        mix_groups=mix_groups,
        mix_mnemonics=mix_mnemonics,
        first_changed_stage=stage,
        severity=severity,
        reason=reason,
        warnings=(warning,) if warning else (),
        mix_source=common.source if common is not None else None,
    )


def _unpaired(p: Pairing) -> KernelDiff:
    assert p.status is not None
    return KernelDiff(
        p.status,
        p.name,
        a=KernelFacts.from_row(p.a) if p.a else None,
        b=KernelFacts.from_row(p.b) if p.b else None,
        reason=p.reason,
        candidates=p.candidates,
    )


def _targets(rows: list[Row]) -> tuple[str, ...]:
    return tuple(sorted({f"{r['backend']}:{r['arch']}:{r['warp_size']}" for r in rows if r.get("backend")}))


_REPORT_ORDER = {s: i for i, s in enumerate(REPORT_STATUSES)}


def never_launches(k: KernelDiff) -> bool:
    """The kernel cannot launch on any side it has (launch occupancy 0 wherever it is known and present)."""
    sides = [f for f in (k.a, k.b) if f is not None]
    return bool(sides) and all(launchable(f.values) is False for f in sides)


def _report_order(k: KernelDiff) -> tuple[Any, ...]:
    """Regressions first, worst first; then by status, name and cache keys. Kernels that cannot launch on
    either side come after every kernel that can (kdb/diff/verdict.py)."""
    worse = k.status.worse
    return (
        never_launches(k),
        -k.severity if worse else 0,
        0 if worse else 1,
        0 if worse else _REPORT_ORDER[k.status.report_status],
        k.name,
        k.a_cache_key or "",
        k.b_cache_key or "",
    )


RANKS = ("severity", "time")


def ranked(result: DiffResult, rank: str) -> DiffResult:
    """The result with its kernels in `rank` order: `severity` (the report order), or `time`: the kernels the
    imported profiles measured longest first (B's time, else A's), each time tie and every unmeasured kernel after
    them in the report order."""
    if rank == "severity":
        return result
    order = sorted(result.kernels, key=lambda k: (k.measured_ns is None, -(k.measured_ns or 0)))
    return dataclasses.replace(result, kernels=tuple(order))


DEFAULT_OPTIONS = DiffOptions()


def compare(
    sa: Side, sb: Side, options: DiffOptions = DEFAULT_OPTIONS
) -> tuple[DiffResult, dict[int, tuple[Row | None, Row | None]]]:
    """The result, and each KernelDiff's kernel rows (by id) for deep views."""
    rules = list(options.rules)
    key = "identity_any_target" if options.across_targets else "identity"
    defaults = learn_defaults(sa.kernels, sb.kernels, key, f"A ({sa.label})", f"B ({sb.label})")
    pairings = match(sa.kernels, sb.kernels, key, defaults)
    common = like_with_like([p for p in pairings if p.status is None and sources_differ(p.a, p.b)], sa, sb)
    # Mnemonic rows are fetched, in one query per side, only for pairs whose mix digests differ.
    differ = [p for p in pairings if p.status is None and id(p) not in common and not _same_mix(p.a, p.b)]
    sa.load_mnemonics(p.a["cache_key"] for p in differ if p.a is not None)
    sb.load_mnemonics(p.b["cache_key"] for p in differ if p.b is not None)
    kernels: list[KernelDiff] = []
    rows: dict[int, tuple[Row | None, Row | None]] = {}
    fired_set: set[str] = set()
    unknown_set: set[str] = set()
    for p in pairings:
        kd = compare_pair(p, sa, sb, common.get(id(p))) if p.status is None else _unpaired(p)
        judged = [(r.text, judge_rule(r, kd)) for r in rules]
        fired = tuple(text for text, verdict in judged if verdict is True)
        unknown = tuple(text for text, verdict in judged if verdict is None)
        if fired or unknown:
            kd = mark_fired(kd, fired, unknown)
            fired_set.update(fired)
            unknown_set.update(unknown)
        kernels.append(kd)
        rows[id(kd)] = (p.a, p.b)
    winners = compare_winners(sa, sb, rules)
    for w in winners:
        fired_set.update(w.fired_rules)
        unknown_set.update(r.text for r in rules if winner_rule_unknown(r, w))
    kernels.sort(key=_report_order)
    unknown_rules = tuple(r.text for r in rules if r.text in unknown_set)
    result = DiffResult(
        sa.label,
        sb.label,
        options.across_targets,
        tuple(kernels),
        tuple(rules),
        tuple(r.text for r in rules if r.text in fired_set),
        len(sa.kernels),
        len(sb.kernels),
        _targets(sa.kernels),
        _targets(sb.kernels),
        min_match=options.min_match,
        winners=winners,
        unknown_rules=unknown_rules,
        allow_unknown=options.allow_unknown,
        unknown_reasons=unknown_reasons(tuple(rules), unknown_rules, tuple(kernels)),
        assumptions=defaults.assumptions + missing_figure_lines(sa, sb) + like_with_like_lines(sa, sb, kernels, rows),
    )
    return dataclasses.replace(result, trust_problem=trust_problem(result)), rows


def missing_figure_lines(sa: Side, sb: Side) -> tuple[str, ...]:
    """One line per (side, target, figure) that some kernels lack: how many, and the recorded reason. The figures
    every kernel of a backend should have are its roles' `expected` (kdb/figures.py)."""
    lines = []
    for label, side in (("A", sa), ("B", sb)):
        missing: dict[tuple[str, str, str, bool], list[str]] = {}
        # a kernel whose launch occupancy is unknown but whose compiler wrote one (LLVM's comment)
        compiler_known: dict[str, bool] = {}
        for row in side.kernels:
            backend = row.get("backend") or ""
            roles = roles_of(backend)
            absent = [f for f in roles.expected if row.get(f) is None]
            if not absent:
                continue
            compiler = roles.compiler_occupancy
            compiler_known[row["cache_key"]] = compiler is not None and row.get(compiler) is not None
            facts = KernelFacts.from_row(row)
            target = f"{backend} {row.get('arch') or 'unknown target'}"
            for figure in absent:
                launch = figure == roles.launch_occupancy
                missing.setdefault((target, figure, facts.why_unknown(figure), launch), []).append(row["cache_key"])
        for (target, figure, why, launch), keys in sorted(missing.items()):
            n = len(keys)
            if launch and all(compiler_known[k] for k in keys):
                lines.append(
                    f"{label} ({side.label}) {target}: launch occupancy unknown for {n} kernel{'s' * (n != 1)} "
                    f"({why}); occupancy from LLVM's comment only"
                )
                continue
            lines.append(f"{label} ({side.label}) {target}: {figure} unknown for {n} kernel{'s' * (n != 1)} ({why})")
    return tuple(lines)


def diff_sides(sa: Side, sb: Side, options: DiffOptions = DEFAULT_OPTIONS) -> tuple[DiffResult, list[KernelDeepView]]:
    """Diff two loaded sides; with `options.kernel`, also the deep views of the first `options.limit` kernels it
    names (in report order: worst first; `raw_isa`: their ISA diffed as the files hold it, kdb/diff/isa.py)."""
    with without_cycle_collector():
        result, rows = compare(sa, sb, options)
        views = deep_views(result, rows, (sa, sb), options) if options.kernel else []
    return result, views


def report_sides(
    sa: Side, sb: Side, options: DiffOptions = DEFAULT_OPTIONS, limit: int = 50
) -> tuple[DiffResult, list[KernelDeepView]]:
    """Diff two loaded sides, with the deep views of the first `limit` changed kernels, worst first (`kdb report`)."""
    with without_cycle_collector():
        result, rows = compare(sa, sb, options)
        chosen = [k for k in result.kernels if k.status.changed][:limit]
        views = views_of(result, rows, sa, sb, chosen)
    return result, views
