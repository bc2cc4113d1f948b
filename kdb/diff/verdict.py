"""The verdict on a changed kernel, its severity (rank) and a one-line reason, as a performance engineer reads them.

Tiers, most serious first; a kernel's verdict is decided by the most serious tier in which anything changed:

0. **launch**: a kernel that could launch on A cannot on B (occupancy 0: its LDS or shared-memory request, or
   another limit, exceeds what one workgroup may have) -> `regressed` above every other regression; one that
   could not and now can -> `improved`. A kernel that cannot launch on either side keeps the verdict of its
   facts, but its reason says so first and it ranks after every launchable kernel (UNLAUNCHABLE_SCALE and
   kdb/diff/engine.py's report order): a kernel that could never run is not an upgrade's worst regression.
1. **spills**, weighed by where they run (issue 28): scratch (AMD) / local-memory (NVIDIA) instructions
   inside a loop grow -> `regressed` above every other spill regression, the reason naming the depth
   (`scratch in loop depth 2: 0→14 instructions`), ranked by the loop-weighted growth (32 per depth,
   kdb/analysis/loops.py); VGPR spills or scratch (AMD), local memory or stack (NVIDIA) start or grow outside
   every loop -> `regressed`, below those; spills that moved out of the loops -> `improved` even when the
   total grew ("spills moved out of loops"); they shrink -> `improved` (or `mixed` if occupancy dropped too).
2. **occupancy**: fewer waves per SIMD / warps per SM -> `regressed`; more -> `improved`. The launch
   figure (which also charges LDS and whole workgroups) decides where it exists, else LLVM's figure.
3. **resources**: VGPRs (AGPRs included on gfx90a+, so never counted twice), NVIDIA registers, LDS or
   shared memory, SGPR spills grow or shrink without moving the tiers above -> `regressed`, `improved`
   or `mixed`.

Everything else — SGPR counts that move neither occupancy nor spills, code size, instruction counts —
is `neutral`: visible in the deltas, never a regression. Severity orders kernels: every kernel whose
spills grew ranks above every kernel without, occupancy drops come next. Pure functions.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Protocol

from kdb.analysis.registry import launch_grant, roles_of


class Facts(Protocol):
    """One side's kernel as the verdicts read it: a fact by its `kernels` column (KernelFacts, or a row)."""

    def get(self, column: str, /) -> Any: ...


LAUNCH_TIER = 4_000_000.0
LOOP_SPILL_TIER = 3_600_000.0  # scratch grew inside a loop: above every spill growth outside loops
SPILL_TIER = 3_000_000.0
OCCUPANCY_TIER = 2_000_000.0
RESOURCE_TIER = 1_000_000.0
UNLAUNCHABLE_SCALE = 1e-7  # the severity of a kernel that cannot launch on either side: below every tier


@dataclass(frozen=True)
class Verdict:
    verdict: str  # regressed, improved, mixed, neutral
    severity: float  # > 0 for regressed/mixed (larger is worse), < 0 for improved, 0 neutral
    reason: str


def _num(row: Facts, name: str) -> float | None:
    value = row.get(name)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _fmt(value: float | None, unit: str = "") -> str:
    if value is None:
        return "?"
    text = str(int(value)) if float(value).is_integer() else f"{value:g}"
    return text + unit


@dataclass(frozen=True)
class _Change:
    label: str
    a: float
    b: float
    unit: str = ""
    lower_is_worse: bool = False  # occupancy: fewer waves is worse; every other figure: more is worse
    note: str = ""  # after the values: ` (vgpr)`, the limiter of an occupancy

    @property
    def delta(self) -> float:
        return self.b - self.a

    @property
    def worse(self) -> bool:
        return self.delta < 0 if self.lower_is_worse else self.delta > 0

    def text(self) -> str:
        return f"{self.label} {_fmt(self.a)}→{_fmt(self.b, self.unit)}{self.note}"


WORSE, BETTER = "worse", "better"  # the words that open each group of a reason's clauses
OTHERS_SAID = 3  # better changes that did not decide the verdict, said at most (worse ones are all said)


def reason_text(decisive: list[_Change], others: list[_Change], note: str | None = None) -> str:
    """`[note; ]worse: c1, c2; better: c3`: every clause in the group of its direction, worse first, the changes
    that decided the verdict first in their group, none twice; better changes that did not decide it, at most
    OTHERS_SAID. Every clause is `figure A→B` (kdb/diff/verdict.py _Change.text)."""
    seen: set[str] = set()
    groups: dict[bool, list[str]] = {True: [], False: []}
    spare = OTHERS_SAID
    for i, change in enumerate(decisive + others):
        text = change.text()
        if text in seen:
            continue
        if i >= len(decisive) and not change.worse:
            if spare == 0:
                continue
            spare -= 1
        seen.add(text)
        groups[change.worse].append(text)
    parts = [note] if note else []
    parts += [f"{WORSE}: {', '.join(groups[True])}"] if groups[True] else []
    parts += [f"{BETTER}: {', '.join(groups[False])}"] if groups[False] else []
    return "; ".join(parts)


def _changes(a: Facts, b: Facts, columns: list[tuple[str, str, str]]) -> list[_Change]:
    out = []
    for column, label, unit in columns:
        va, vb = _num(a, column), _num(b, column)
        if va is not None and vb is not None and va != vb:
            out.append(_Change(label, va, vb, unit))
    return out


def spill_columns(backend: str | None) -> list[tuple[str, str, str]]:
    """(column, label, unit) of the figures whose growth means memory spills (the backend's verdict_spills)."""
    roles = roles_of(backend)
    return roles.sentence_columns(roles.verdict_spills)


def resource_columns(backend: str | None) -> list[tuple[str, str, str]]:
    """(column, label, unit) of the figures whose growth means resource pressure (the backend's verdict_resources)."""
    roles = roles_of(backend)
    return roles.sentence_columns(roles.verdict_resources)


def scratch_by_depth(row: Facts) -> dict[int, int] | None:
    """Scratch / local-memory instructions per loop depth (kernels.scratch_by_loop_depth); None when unknown."""
    text = row.get("scratch_by_loop_depth")
    if text is None:
        return None
    try:
        raw = json.loads(text) if isinstance(text, str) else dict(text)
        return {int(depth): int(count) for depth, count in raw.items()}
    except (ValueError, TypeError, AttributeError):
        return None


@dataclass(frozen=True)
class LoopScratch:
    """How a paired kernel's scratch instructions moved between loop depths."""

    grew: list[_Change]  # depths >= 1 whose count grew, deepest first
    shrank: list[_Change]  # depths >= 1 whose count fell, deepest first
    weighted_delta: float  # loop-weighted growth (B - A)
    inside_a: int
    inside_b: int


def loop_scratch(a: Facts, b: Facts) -> LoopScratch | None:
    da, db = scratch_by_depth(a), scratch_by_depth(b)
    if da is None or db is None:
        return None
    depths = sorted(set(da) | set(db) - {0}, reverse=True)
    changes = [
        _Change(f"scratch in loop depth {d}:", float(da.get(d, 0)), float(db.get(d, 0)), " instructions")
        for d in depths
        if d > 0 and da.get(d, 0) != db.get(d, 0)
    ]
    # the analysis weighed them (kernels.loop_weighted_scratch: 32 per loop depth, kdb/analysis/loops.py)
    wa, wb = _num(a, "loop_weighted_scratch"), _num(b, "loop_weighted_scratch")
    weighted = (wb or 0.0) - (wa or 0.0)
    return LoopScratch(
        grew=[c for c in changes if c.delta > 0],
        shrank=[c for c in changes if c.delta < 0],
        weighted_delta=float(weighted),
        inside_a=sum(n for d, n in da.items() if d > 0),
        inside_b=sum(n for d, n in db.items() if d > 0),
    )


NEAR_CLIFF = 8  # registers: one allocation step on gfx9 (8 VGPRs) and on NVIDIA (256 per warp = 8 per thread)


def cliff_warning(a: Facts, b: Facts) -> str | None:
    """`near an occupancy cliff: 1 VGPR from losing a wave (5 in A)` when the upgrade brought the kernel within
    NEAR_CLIFF registers of losing occupancy (kernels.registers_to_cliff); None otherwise or where unknown."""
    va, vb = _num(a, "registers_to_cliff"), _num(b, "registers_to_cliff")
    if va is None or vb is None or not (vb < NEAR_CLIFF <= va):
        return None
    roles = roles_of(b.get("backend") or a.get("backend"))
    unit, lost = roles.register_word, roles.occupancy_step
    n = int(vb)
    if n == 0:  # one more register loses occupancy, or (at the register file's maximum) spills
        return f"at an occupancy cliff: no {unit} to spare before it loses a {lost} or spills ({_fmt(va)} in A)"
    return f"near an occupancy cliff: {n} {unit}{'s' * (n != 1)} from losing a {lost} ({_fmt(va)} in A)"


def occupancy_change(a: Facts, b: Facts) -> tuple[_Change, str | None] | None:
    """The occupancy change that counts (launch figure where both sides have one, else LLVM's) and B's limiter."""
    for column, limiter in (("occupancy", "occupancy_limiter"), ("occupancy_llvm", "occupancy_llvm_limiter")):
        va, vb = _num(a, column), _num(b, column)
        if va is not None and vb is not None:
            if va == vb:
                return None
            why = b.get(limiter)
            return _Change("occupancy", va, vb, lower_is_worse=True, note=f" ({why})" if why else ""), why
    return None


def launchable(row: Facts) -> bool | None:
    """Whether the kernel can launch at all: False when its launch occupancy is 0 (what one workgroup asks
    exceeds what it may have), None when the launch occupancy is unknown."""
    occupancy = _num(row, "occupancy")
    return None if occupancy is None else occupancy > 0


def _arch(row: Facts) -> str | None:
    arch = row.get("arch")
    return str(arch) if arch else None


def launch_limit(row: Facts) -> tuple[str, str]:
    """What a kernel that cannot launch asks (`asks 98304 B of LDS`) and what the GPU grants (`gfx942 grants 65536
    B`: the backend declares it, kdb/analysis/registry.py launch_grant); else the limiter that reached 0 and ""."""
    limiter = row.get("occupancy_limiter")
    shared = _num(row, "shared")
    backend = row.get("backend")
    if limiter in ("lds", "shared") and shared is not None:
        asks = shared + (_num(row, "lds_static") or 0.0)
        arch = _arch(row)
        grant = launch_grant(backend, arch, limiter)
        grants = f"{arch} grants {grant} B" if grant is not None else "more than the GPU grants"
        return f"asks {_fmt(asks)} B of {roles_of(backend).label('shared')}", grants
    return (f"limited by {limiter}" if limiter else "occupancy 0"), ""


def why_unlaunchable(row: Facts) -> str:
    """`asks 98304 B of LDS, gfx942 grants 65536 B`: the resource whose request exceeds what one workgroup (block)
    may have, what the kernel asks and what the GPU grants; else the limiter that reached 0."""
    asks, grants = launch_limit(row)
    return f"{asks}, {grants}" if grants else asks


def _both_unlaunchable(a: Facts, b: Facts) -> str:
    """`A asks 98304 B of LDS, B asks 81920 B of LDS; gfx942 grants 65536 B` (the grant said once where equal)."""
    (asks_a, grants_a), (asks_b, grants_b) = launch_limit(a), launch_limit(b)
    if grants_a == grants_b:
        return f"A {asks_a}, B {asks_b}" + (f"; {grants_a}" if grants_a else "")
    return f"A {why_unlaunchable(a)}; B {why_unlaunchable(b)}"


def classify(a: Facts, b: Facts) -> Verdict:
    """Verdict, severity and reason for a paired kernel whose facts changed (rows of the `kernels` view)."""
    la, lb = launchable(a), launchable(b)
    occ = occupancy_change(a, b)
    occ_changes = [occ[0]] if occ else []
    if la is True and lb is False:
        note = f"cannot launch any more ({why_unlaunchable(b)})"
        return Verdict("regressed", LAUNCH_TIER + 1, reason_text(occ_changes, _all_changes(a, b), note))
    if la is False and lb is True:
        note = f"can launch now (A {why_unlaunchable(a).replace('asks', 'asked', 1)})"
        return Verdict("improved", -LAUNCH_TIER, reason_text(occ_changes, _all_changes(a, b), note))
    verdict = _classify(a, b)
    if la is False and lb is False:
        note = f"cannot launch on either side ({_both_unlaunchable(a, b)})"
        return Verdict(verdict.verdict, verdict.severity * UNLAUNCHABLE_SCALE, f"{note}; {verdict.reason}")
    return verdict


def _all_changes(a: Facts, b: Facts) -> list[_Change]:
    """Every compared change the verdicts read: scratch per loop depth, spills, occupancy, resources."""
    backend = b.get("backend") or a.get("backend")
    loops = loop_scratch(a, b)
    occ = occupancy_change(a, b)
    out = (loops.grew + loops.shrank) if loops else []
    out += _changes(a, b, spill_columns(backend)) + ([occ[0]] if occ else [])
    return out + _changes(a, b, resource_columns(backend))


def _classify(a: Facts, b: Facts) -> Verdict:
    backend = b.get("backend") or a.get("backend")
    spills = _changes(a, b, spill_columns(backend))
    spills_up = [c for c in spills if c.delta > 0]
    spills_down = [c for c in spills if c.delta < 0]
    occ = occupancy_change(a, b)
    resources = _changes(a, b, resource_columns(backend))
    res_up = [c for c in resources if c.delta > 0]
    res_down = [c for c in resources if c.delta < 0]
    every = _all_changes(a, b)

    def reason(decisive: list[_Change], note: str | None = None) -> str:
        return reason_text(decisive, every, note)

    loops = loop_scratch(a, b)
    if loops is not None and loops.grew:
        severity = LOOP_SPILL_TIER + min(max(loops.weighted_delta, 0.0) + 1.0, 399_999)
        return Verdict("regressed", severity, reason(loops.grew))
    if spills_up and loops is not None and loops.shrank and loops.inside_b < loops.inside_a:
        # the spills that remain run outside the loops: fewer executed scratch accesses, but more spills in all:
        # mixed (a kernel whose spills grew is never `improved`), ranked below every spill growth inside a loop
        moved = "spills moved out of loops"
        if occ is not None and occ[0].delta < 0:
            lost = occ[0].a - occ[0].b
            severity = OCCUPANCY_TIER + 100_000 * lost / max(occ[0].a, 1) + lost
            return Verdict("mixed", severity, reason([occ[0], *spills_up, *loops.shrank], moved))
        magnitude = sum(min(c.delta, 1e5) / (4.0 if c.unit == " B" else 1.0) for c in spills_up)
        return Verdict("mixed", RESOURCE_TIER + min(magnitude, 999_999), reason([*spills_up, *loops.shrank], moved))
    if spills_up:
        started = any(c.a == 0 for c in spills_up)
        magnitude = sum(min(c.delta, 1e5) / (4.0 if c.unit == " B" else 1.0) for c in spills_up)
        severity = SPILL_TIER + (300_000 if started else 0) + min(magnitude, 299_999)
        return Verdict("regressed", severity, reason(spills_up))
    occ_down = occ is not None and occ[0].delta < 0
    occ_up = occ is not None and occ[0].delta > 0
    if occ_down:
        assert occ is not None
        lost = occ[0].a - occ[0].b
        severity = OCCUPANCY_TIER + 100_000 * lost / max(occ[0].a, 1) + lost
        if spills_down:
            return Verdict("mixed", severity, reason([occ[0], *spills_down]))
        return Verdict("regressed", severity, reason([occ[0]]))
    worse = sum(c.delta / (1024.0 if c.unit == " B" else 1.0) for c in res_up)
    better = sum(-c.delta / (1024.0 if c.unit == " B" else 1.0) for c in res_down)
    # what the rules read as spilling (SGPR spills among the resources): its growth makes any improvement mixed
    spill_grew = [c for c in res_up if c.label in {label for _, label, _ in _spill_count_columns(backend)}]
    if spills_down or occ_up:
        decisive = spills_down + ([occ[0]] if occ_up and occ is not None else [])
        if spill_grew:
            return Verdict("mixed", RESOURCE_TIER + worse, reason(spill_grew + decisive))
        if spills_down:
            gained = sum(-c.delta for c in spills_down)
            return Verdict("improved", -(SPILL_TIER + min(gained, 999_999)), reason(decisive))
        assert occ is not None
        gained = occ[0].b - occ[0].a
        return Verdict("improved", -(OCCUPANCY_TIER + 100_000 * gained / max(occ[0].b, 1)), reason(decisive))
    if res_up and res_down:
        return Verdict("mixed", RESOURCE_TIER + worse, reason(res_up + res_down))
    if res_up:
        return Verdict("regressed", RESOURCE_TIER + worse, reason(res_up))
    if res_down:
        return Verdict("improved", -(RESOURCE_TIER + better), reason(res_down))
    return Verdict("neutral", 0.0, _neutral_reason(a, b))


def _spill_count_columns(backend: str | None) -> list[tuple[str, str, str]]:
    """(column, label, unit) of the spill counts `new-spills` reads (the backend's spill_counts)."""
    roles = roles_of(backend)
    return roles.sentence_columns(roles.spill_counts)


def _neutral_reason(a: Facts, b: Facts) -> str:
    other = _changes(
        a,
        b,
        [
            ("sgpr_count", "SGPRs", ""),
            ("agpr_count", "AGPRs", ""),
            ("code_size", "code", " B"),
            ("instr_count", "instructions", ""),
        ],
    )
    if other:
        return reason_text([], other, "no resource that limits the hardware changed")
    return "only the instruction mix or code changed"
