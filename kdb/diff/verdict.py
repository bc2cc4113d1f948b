"""The verdict on a changed kernel, its severity (rank) and a one-line reason, as a performance engineer reads them.

Tiers, most serious first; a kernel's verdict is decided by the most serious tier in which anything changed:

1. **spills**: VGPR spills or scratch (AMD), local memory or stack (NVIDIA) start or grow -> `regressed`,
   whatever else improved; they shrink -> `improved` (or `mixed` if occupancy dropped too).
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

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

SPILL_TIER = 3_000_000.0
OCCUPANCY_TIER = 2_000_000.0
RESOURCE_TIER = 1_000_000.0


@dataclass(frozen=True)
class Verdict:
    verdict: str  # regressed, improved, mixed, neutral
    severity: float  # > 0 for regressed/mixed (larger is worse), < 0 for improved, 0 neutral
    reason: str


def _num(row: Mapping[str, Any], name: str) -> float | None:
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

    @property
    def delta(self) -> float:
        return self.b - self.a

    def text(self) -> str:
        return f"{self.label} {_fmt(self.a)}→{_fmt(self.b, self.unit)}"


def _changes(a: Mapping[str, Any], b: Mapping[str, Any], columns: list[tuple[str, str, str]]) -> list[_Change]:
    out = []
    for column, label, unit in columns:
        va, vb = _num(a, column), _num(b, column)
        if va is not None and vb is not None and va != vb:
            out.append(_Change(label, va, vb, unit))
    return out


def spill_columns(backend: str | None) -> list[tuple[str, str, str]]:
    """(column, label, unit) of the figures whose growth means memory spills."""
    if backend == "cuda":
        return [("local_bytes", "local memory", " B"), ("stack_bytes", "stack", " B")]
    return [("vgpr_spill_count", "VGPR spills", ""), ("scratch_bytes", "scratch", " B")]


def resource_columns(backend: str | None) -> list[tuple[str, str, str]]:
    if backend == "cuda":
        return [("registers", "registers", ""), ("shared", "shared memory", " B")]
    # vgpr_count already holds AGPRs on gfx90a+ (and max(VGPR, AGPR) on gfx908): AGPRs are not added again.
    return [("vgpr_count", "VGPRs", ""), ("shared", "LDS", " B"), ("sgpr_spill_count", "SGPR spills", "")]


def occupancy_change(a: Mapping[str, Any], b: Mapping[str, Any]) -> tuple[_Change, str | None] | None:
    """The occupancy change that counts (launch figure where both sides have one, else LLVM's) and B's limiter."""
    for column, limiter in (("occupancy", "occupancy_limiter"), ("occupancy_llvm", "occupancy_llvm_limiter")):
        va, vb = _num(a, column), _num(b, column)
        if va is not None and vb is not None:
            if va == vb:
                return None
            return _Change("occupancy", va, vb), b.get(limiter)
    return None


def classify(a: Mapping[str, Any], b: Mapping[str, Any]) -> Verdict:
    """Verdict, severity and reason for a paired kernel whose facts changed (rows of the `kernels` view)."""
    backend = b.get("backend") or a.get("backend")
    spills = _changes(a, b, spill_columns(backend))
    spills_up = [c for c in spills if c.delta > 0]
    spills_down = [c for c in spills if c.delta < 0]
    occ = occupancy_change(a, b)
    occ_text = None
    if occ is not None:
        change, limiter = occ
        occ_text = change.text() + (f" ({limiter})" if limiter else "")
    resources = _changes(a, b, resource_columns(backend))
    res_up = [c for c in resources if c.delta > 0]
    res_down = [c for c in resources if c.delta < 0]

    def reason(first: list[str], also: list[str]) -> str:
        extra = [t for t in also if t not in first][:3]
        return ", ".join(first) + (f" (also {', '.join(extra)})" if extra else "")

    all_texts = [c.text() for c in spills] + ([occ_text] if occ_text else []) + [c.text() for c in resources]
    if spills_up:
        started = any(c.a == 0 for c in spills_up)
        magnitude = sum(min(c.delta, 1e5) / (4.0 if c.unit == " B" else 1.0) for c in spills_up)
        severity = SPILL_TIER + (500_000 if started else 0) + min(magnitude, 499_999)
        return Verdict("regressed", severity, reason([c.text() for c in spills_up], all_texts))
    occ_down = occ is not None and occ[0].delta < 0
    occ_up = occ is not None and occ[0].delta > 0
    if occ_down:
        assert occ is not None and occ_text is not None
        lost = occ[0].a - occ[0].b
        severity = OCCUPANCY_TIER + 100_000 * lost / max(occ[0].a, 1) + lost
        if spills_down:
            return Verdict("mixed", severity, reason([occ_text] + [c.text() for c in spills_down], all_texts))
        return Verdict("regressed", severity, reason([occ_text], all_texts))
    if spills_down:
        gained = sum(-c.delta for c in spills_down)
        return Verdict(
            "improved", -(SPILL_TIER + min(gained, 999_999)), reason([c.text() for c in spills_down], all_texts)
        )
    if occ_up:
        assert occ is not None and occ_text is not None
        gained = occ[0].b - occ[0].a
        return Verdict(
            "improved", -(OCCUPANCY_TIER + 100_000 * gained / max(occ[0].b, 1)), reason([occ_text], all_texts)
        )
    worse = sum(c.delta / (1024.0 if c.unit == " B" else 1.0) for c in res_up)
    better = sum(-c.delta / (1024.0 if c.unit == " B" else 1.0) for c in res_down)
    if res_up and res_down:
        return Verdict("mixed", RESOURCE_TIER + worse, reason([c.text() for c in res_up + res_down], all_texts))
    if res_up:
        return Verdict("regressed", RESOURCE_TIER + worse, reason([c.text() for c in res_up], all_texts))
    if res_down:
        return Verdict("improved", -(RESOURCE_TIER + better), reason([c.text() for c in res_down], all_texts))
    return Verdict("neutral", 0.0, _neutral_reason(a, b))


def _neutral_reason(a: Mapping[str, Any], b: Mapping[str, Any]) -> str:
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
        return "no resource that limits the hardware changed: " + ", ".join(c.text() for c in other[:3])
    return "only the instruction mix or code changed"
