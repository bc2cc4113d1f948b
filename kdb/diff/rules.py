"""Judging a diff, in one place: the verdict and severity of a changed kernel, the --fail-on rules, and
whether the comparison can be trusted at all (exit code 2)."""

from __future__ import annotations

import dataclasses
import re

from kdb.analysis.registry import roles_of
from kdb.diff import verdict
from kdb.diff.model import DiffResult, KernelDiff, KernelFacts, Rule, Status, WinnerDiff, spills
from kdb.errors import UsageError
from kdb.figures import BY_COLUMN, SAID_UNKNOWN

REGISTER_COLUMN = {"vgpr": "vgpr_count", "sgpr": "sgpr_count", "agpr": "agpr_count", "registers": "registers"}
WINNER_RULES = ("winner-flip", "winner-spills")
SIMPLE_RULES = ("occupancy-drop", "new-spills", "scratch-increase", "unmatched", "any-change", *WINNER_RULES)
# `vgpr:+12`, `registers:+10%`
_REG_RULE = re.compile(r"^(vgpr|sgpr|agpr|registers):\+(\d+(?:\.\d+)?)(%?)$")
HEADROOM_RULE = "headroom-below"
# `headroom-below:8`
_HEADROOM_RULE = re.compile(r"^headroom-below:(\d+)$")


def parse_rules(texts: list[str]) -> list[Rule]:
    """--fail-on values (repeatable, or comma-separated):

    occupancy-drop     a paired kernel's occupancy (launch estimate or the compiler's) went down
    new-spills         a paired kernel spills more VGPRs/SGPRs than before (NVIDIA: more local memory)
    scratch-increase   a paired kernel's scratch (AMD) or stack/local bytes (NVIDIA) grew
    vgpr:+N, vgpr:+N%  a paired kernel's VGPR count grew by at least N registers / at least N percent
                       (sgpr:, agpr:, registers: the same)
    headroom-below:N   a paired kernel can gain fewer than N registers before losing a wave (AMD) or block
                       (NVIDIA) of its launch occupancy in B, and at least N in A (`registers_to_cliff`)
    unmatched          any kernel is only in A, only in B, or ambiguous
    any-change         any kernel changed or is unmatched
    winner-flip        another config won autotuning for a kernel both snapshots tuned (Inductor caches)
    winner-spills      a kernel's B winner (its linked kernel folder) spills more, uses more scratch or
                       local memory, or has a lower occupancy than its A winner
    """
    rules = []
    for text in texts:
        for raw in text.split(","):
            piece = raw.strip()
            if not piece:
                # `--fail-on ''` or `--fail-on ','` (an unset CI variable) would otherwise gate on nothing and pass
                raise UsageError(
                    f"--fail-on {text!r} holds an empty rule: name each rule (an empty one gates on nothing)"
                )
            if piece in SIMPLE_RULES:
                rules.append(Rule(piece, piece))
                continue
            if h := _HEADROOM_RULE.match(piece):
                if int(h.group(1)) <= 0:
                    raise UsageError(f"--fail-on {piece!r}: N must be greater than 0 (registers to the cliff)")
                rules.append(Rule(piece, HEADROOM_RULE, int(h.group(1))))
                continue
            m = _REG_RULE.match(piece)
            if not m:
                raise UsageError(
                    f"unknown --fail-on rule {piece!r}: use {', '.join(SIMPLE_RULES)}, vgpr:+N / vgpr:+N% "
                    "(also sgpr:, agpr:, registers:), or headroom-below:N"
                )
            threshold = float(m.group(2))
            if threshold <= 0:
                raise UsageError(f"--fail-on {piece!r}: the threshold must be greater than 0")
            rules.append(Rule(piece, m.group(1), threshold, bool(m.group(3))))
    return rules


def check_min_match(min_match: float) -> None:
    if not 0 <= min_match <= 1:
        raise UsageError(f"--min-match must be between 0 and 1, not {min_match}")


_VERDICTS = {
    "regressed": Status.REGRESSED,
    "improved": Status.IMPROVED,
    "mixed": Status.MIXED,
    "neutral": Status.NEUTRAL,
}


def classify(a: verdict.Facts, b: verdict.Facts) -> tuple[Status, float, str]:
    """(verdict, severity, reason) of a changed pair; the tiers are in kdb/diff/verdict.py. Severity ranks
    regressions (larger is worse: spill growth above occupancy drops above resource growth); improvements
    get a negative one."""
    v = verdict.classify(a, b)
    status, severity = _VERDICTS[v.verdict], v.severity
    if status is Status.IMPROVED:
        backend = b.get("backend") or a.get("backend") or ""
        judges = (_new_spills, _scratch_increase, _occupancy_drop)
        if any(judge(a, b, backend) for judge in judges):  # type: ignore[arg-type]
            # what a default rule (new-spills, scratch-increase, occupancy-drop) would fire on is never improved
            status, severity = Status.MIXED, verdict.RESOURCE_TIER
    return status, severity, v.reason


FIRED = "fired"  # opens the clause of a reason that names the --fail-on rules that fired on the kernel


def mark_fired(kd: KernelDiff, fired: tuple[str, ...], unknown: tuple[str, ...]) -> KernelDiff:
    """The kernel with the rules that fired on it and those that could not judge it. A kernel a rule fired on
    is never `improved` (it becomes `mixed`), and its reason names the rules first (`fired: new-spills; …`)."""
    if not fired:
        return dataclasses.replace(kd, unknown_rules=unknown)
    status, severity = kd.status, kd.severity
    if status is Status.IMPROVED:
        status, severity = Status.MIXED, verdict.RESOURCE_TIER
    reason = f"{FIRED}: {', '.join(fired)}" + (f"; {kd.reason}" if kd.reason else "")
    return dataclasses.replace(
        kd, status=status, severity=severity, reason=reason, fired_rules=fired, unknown_rules=unknown
    )


def _grew(a: KernelFacts, b: KernelFacts, columns: tuple[str, ...]) -> bool:
    return any(a.get(c) is not None and b.get(c) is not None and b.get(c) > a.get(c) for c in columns)


def winner_worse(a: KernelFacts, b: KernelFacts) -> list[str]:
    """How B's winner's kernel folder is worse than A's: more spills, more scratch/stack/local memory,
    lower occupancy (each as `what a→b`); empty when it is not."""
    out = []
    counts = roles_of(a.backend or b.backend).spill_counts
    sa, sb = spills(a, counts), spills(b, counts)
    if sa is not None and sb is not None and sb > sa:
        out.append(f"spills {sa}→{sb}")
    for col, what in (("scratch_bytes", "scratch"), ("stack_bytes", "stack"), ("local_bytes", "local memory")):
        if _grew(a, b, (col,)):
            out.append(f"{what} {a.get(col)}→{b.get(col)} bytes")
    for col, what in (("occupancy", "occupancy"), ("occupancy_llvm", "compiler occupancy")):
        if _grew(b, a, (col,)):
            out.append(f"{what} {a.get(col)}→{b.get(col)}")
    return out


def winner_rule_unknown(rule: Rule, wd: WinnerDiff) -> bool:
    """`winner-spills` cannot judge a kernel tuned on both sides whose winner has no linked folder, or whose
    folders lack the spill or occupancy figures (fail closed, as the kernel rules do)."""
    if rule.kind != "winner-spills" or wd.a is None or wd.b is None or wd.worse:
        return False
    a, b = wd.a.facts, wd.b.facts
    if a is None or b is None:
        return True
    backend = a.backend or b.backend or ""
    return _new_spills(a, b, backend) is None or _occupancy_drop(a, b, backend) is None


def evaluate_winner_rule(rule: Rule, wd: WinnerDiff) -> bool:
    if rule.kind == "winner-flip":
        return wd.status == "flip"
    if rule.kind == "winner-spills":
        return bool(wd.worse)
    return False


def evaluate_rule(rule: Rule, kd: KernelDiff) -> bool:
    """Whether the rule fires on the kernel (an undecidable rule does not: `judge_rule` says so)."""
    return judge_rule(rule, kd) is True


# A register rule over a register file a backend does not have (VGPRs, SGPRs, AGPRs of an NVIDIA kernel) cannot be
# judged there (each backend's register_rules, kdb/figures.py): unknown, so the gate fails closed (exit 8).
REGISTER_FIGURE = {"vgpr": "VGPR count", "sgpr": "SGPR count", "agpr": "AGPR count", "registers": "register count"}


def figure_absent(rule: Rule, backend: str | None) -> str | None:
    """Why `rule` can never be judged on a kernel of `backend` (`cuda kernels have no VGPR count`): the figure it
    reads does not exist for that backend. None when the backend has it."""
    roles = roles_of(backend)
    if rule.kind not in REGISTER_COLUMN or rule.kind in roles.register_rules:
        return None
    where = f"{backend} kernels" if backend else "kernels of an unknown backend"
    hint = f" (registers:+N gates {roles.vendor} registers)" if "registers" in roles.register_rules else ""
    return f"{where} have no {REGISTER_FIGURE[rule.kind]}{hint}"


UNCOMPUTED = "a figure it reads could not be computed"


def unknown_reasons(
    rules: tuple[Rule, ...], unknown: tuple[str, ...], kernels: tuple[KernelDiff, ...]
) -> tuple[str, ...]:
    """Why each rule of `unknown` (those that met an unknown) could not be judged, once per cause: `vgpr:+10: cuda
    kernels have no VGPR count (…)` where the figure does not exist for a kernel's backend, else that a figure it
    reads could not be computed (each such kernel's reason, or the autotune winners, say which)."""
    out: list[str] = []
    for rule in rules:
        if rule.text not in unknown:
            continue
        causes: list[str] = []
        for kd in kernels:
            if rule.text in kd.unknown_rules:
                backend = next((f.backend for f in (kd.a, kd.b) if f is not None and f.backend), None)
                why = figure_absent(rule, backend) or UNCOMPUTED
                if why not in causes:
                    causes.append(why)
        out += [f"{rule.text}: {why}" for why in causes or [UNCOMPUTED]]
    return tuple(out)


def judge_rule(rule: Rule, kd: KernelDiff) -> bool | None:
    """True: the rule fires; False: it does not; None: it cannot be decided, because a figure it reads is
    unknown on a side (fail closed: the CLI reports the rule as `unknown`)."""
    if rule.kind in WINNER_RULES:  # judged on the autotune winners (evaluate_winner_rule)
        return False
    if rule.kind == "unmatched":
        return not kd.status.paired
    if rule.kind == "any-change":
        return kd.status is not Status.SAME
    if not kd.status.paired or kd.a is None or kd.b is None:
        return False
    a, b = kd.a, kd.b
    backend = a.backend or b.backend or ""
    if rule.kind in _FACT_RULES:
        return _FACT_RULES[rule.kind](a, b, backend)
    if rule.kind == HEADROOM_RULE:
        return _headroom_below(a, b, int(rule.threshold))
    col = REGISTER_COLUMN[rule.kind]
    if figure_absent(rule, backend):
        return None  # an AMD register file on an NVIDIA kernel: nothing to judge, and no pass either
    va, vb = a.get(col), b.get(col)
    if va is None or vb is None:
        if rule.kind == "agpr" and va is None and vb is None:
            return False  # a target without AGPRs on both sides
        return None
    if rule.percent:
        return va > 0 and (vb - va) * 100.0 / va >= rule.threshold or (va == 0 and vb > 0)
    return bool(vb - va >= rule.threshold)


def _headroom_below(a: KernelFacts, b: KernelFacts, registers: int) -> bool | None:
    """B's `registers_to_cliff` is below REGISTERS and A's is not: the upgrade brought the kernel within
    that many registers of losing a wave/block. Unknown (None) where either side lacks the figure (its
    occupancy unknown, or a catalog analysed before kdb recorded it: `kdb reindex`)."""
    va, vb = a.get("registers_to_cliff"), b.get("registers_to_cliff")
    if va is None or vb is None:
        return None
    return bool(vb < registers <= va)


def _occupancy_drop(a: KernelFacts, b: KernelFacts, backend: str) -> bool | None:
    columns = roles_of(backend).occupancy_columns()
    if _grew(b, a, columns):
        return True
    return False if any(_both(a, b, c) for c in columns) else None


def _new_spills(a: KernelFacts, b: KernelFacts, backend: str) -> bool | None:
    roles = roles_of(backend)
    if roles.spill_counts:
        sa, sb = spills(a, roles.spill_counts), spills(b, roles.spill_counts)
        return None if sa is None or sb is None else sb > sa
    return _grew_all_known(a, b, roles.spill_memory)


def _scratch_increase(a: KernelFacts, b: KernelFacts, backend: str) -> bool | None:
    return _grew_all_known(a, b, roles_of(backend).scratch)


def _grew_all_known(a: KernelFacts, b: KernelFacts, figures: tuple[str, ...]) -> bool | None:
    """True: a figure grew; False: none did and every one is known on both sides; None: cannot say."""
    if _grew(a, b, figures):
        return True
    return False if figures and all(_both(a, b, c) for c in figures) else None


_FACT_RULES = {
    "occupancy-drop": _occupancy_drop,
    "new-spills": _new_spills,
    "scratch-increase": _scratch_increase,
}


def _both(a: KernelFacts, b: KernelFacts, column: str) -> bool:
    return a.get(column) is not None and b.get(column) is not None


def unknown_figures(a: KernelFacts, b: KernelFacts) -> list[str]:
    """'occupancy unknown in B: <why>' for each figure a paired kernel has on one side and not the other."""
    out = []
    for column in SAID_UNKNOWN:
        va, vb = a.get(column), b.get(column)
        if (va is None) == (vb is None):
            continue
        side, facts = ("A", a) if va is None else ("B", b)
        out.append(f"{BY_COLUMN[column].label} unknown in {side}: {facts.why_unknown(column)}")
    return out


def trust_problem(r: DiffResult) -> str | None:
    """Why the comparison cannot be trusted (the CLI exits 2), or None."""
    if not r.a_count or not r.b_count:
        return f"nothing to compare: {r.a_label} has {r.a_count} kernels, {r.b_label} has {r.b_count}"
    if not r.across_targets and r.a_targets and r.b_targets and not set(r.a_targets) & set(r.b_targets):
        return (
            f"the snapshots share no target ({', '.join(r.a_targets)} vs {', '.join(r.b_targets)}): "
            "use --across-targets to compare them"
        )
    if r.match_rate < r.min_match:
        return (
            f"only {r.paired} of {min(r.a_count, r.b_count)} kernels of the smaller side were paired "
            f"({r.match_rate:.0%} < {r.min_match:.0%}): the comparison cannot be trusted"
        )
    return None
