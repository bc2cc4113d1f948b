"""The figures kdb compares, declared once, and the roles a backend gives them.

A *figure* is one number the analysis records per kernel (a column of the `kernels` view): how sentences and
reports name it, its unit, which direction is worse, the analysis stages whose failure leaves it unknown, and
whether the diff compares it. A *role* is what a figure means for a backend: which column is its register count,
its spills, its scratch, its launch and compiler occupancy, and the words its reports use. Each backend declares
its roles once, as data (kdb/analysis/amd/figures.json, kdb/analysis/nvidia/figures.json, read by load_roles and
hung on kdb/analysis/registry.py);
the diff, the verdicts, the rules, the winners, the tables, markdown, CSV, JSON and the report read roles and
never a backend's name. Ground floor: imports nothing of kdb.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field, fields
from typing import Any

HIGHER, LOWER = "higher", "lower"  # which direction of a figure is worse


@dataclass(frozen=True)
class Figure:
    column: str  # the `kernels` view's column
    label: str  # how a sentence names it: `VGPR spills unknown in B`, `scratch 0→256 B`
    unit: str = ""  # appended to a value in sentences (` B`)
    worse: str = HIGHER
    stages: tuple[str, ...] = ()  # the analysis stages (`analysis_problems.stage`) whose failure leaves it unknown
    compared: bool = True  # the diff compares it per matched pair (JSON `metrics`, CSV `*_a/_b/_delta`)


_CODE_OBJECT = ("hsaco", "cubin", "json")
# In the order the diff shows them (JSON `metrics` keys, CSV columns): that order is part of the public output.
FIGURES: tuple[Figure, ...] = (
    Figure("occupancy", "occupancy", worse=LOWER, stages=("occupancy", "hsaco", "cubin", "json")),
    Figure("occupancy_llvm", "LLVM's occupancy", worse=LOWER, stages=("occupancy", "amdgcn", "hsaco")),
    Figure("vgpr_count", "VGPRs", stages=_CODE_OBJECT),
    Figure("agpr_count", "AGPRs", stages=_CODE_OBJECT),
    Figure("sgpr_count", "SGPRs", stages=_CODE_OBJECT),
    Figure("vgpr_spill_count", "VGPR spills", stages=_CODE_OBJECT),
    Figure("sgpr_spill_count", "SGPR spills", stages=_CODE_OBJECT),
    Figure("scratch_bytes", "scratch", " B", stages=_CODE_OBJECT),
    Figure("registers", "registers", stages=_CODE_OBJECT),
    Figure("stack_bytes", "stack", " B", stages=_CODE_OBJECT),
    Figure("local_bytes", "local memory", " B", stages=_CODE_OBJECT),
    Figure("shared", "shared memory", " B"),
    Figure("lds_static", "static LDS", " B"),
    Figure("code_size", "code size", " B"),
    Figure("instr_count", "instructions"),
    # Not compared per pair, but read by the rules: without its loop nest a side cannot say whether spills sit
    # in a loop (the loop-aware ranking is blind there).
    Figure("max_loop_depth", "loop depths", stages=("loops", "amdgcn", "hsaco", "cubin", "ptx"), compared=False),
)
BY_COLUMN: dict[str, Figure] = {f.column: f for f in FIGURES}
COMPARED: tuple[str, ...] = tuple(f.column for f in FIGURES if f.compared)
UNKNOWN_STAGES: dict[str, tuple[str, ...]] = {f.column: f.stages for f in FIGURES if f.stages}


def columns(names: str) -> tuple[str, ...]:
    """A listing's columns, in its shipped order, each checked to be a declared figure (or `_limiter` of one)."""
    out = tuple(names.split())
    stray = [c for c in out if c not in BY_COLUMN and c.removesuffix("_limiter") not in BY_COLUMN]
    if stray:
        raise ValueError(f"not declared in kdb/figures.py: {', '.join(stray)}")
    return out


# Listings whose key order users already read (JSON documents, `kdb show --kernel`); checked against FIGURES.
WINNER_RESOURCES = columns(
    "registers vgpr_count agpr_count sgpr_count vgpr_spill_count sgpr_spill_count scratch_bytes stack_bytes "
    "local_bytes occupancy occupancy_limiter occupancy_llvm"
)
# The figures whose absence on one side of a pair is said (`VGPRs unknown in B: hsaco: …`), in the order said.
SAID_UNKNOWN = columns(
    "occupancy occupancy_llvm vgpr_count sgpr_count registers vgpr_spill_count scratch_bytes local_bytes "
    "stack_bytes max_loop_depth"
)


@dataclass(frozen=True)
class Wording:
    """How a report's titles and headers name a role, for one backend or for several at once."""

    register_title: str  # the register axis: `VGPRs`, `registers per thread`
    occupancy_unit: str  # `waves per SIMD`, `warps per SM`
    scratch_title: str  # `scratch bytes`, `local memory bytes`
    scratch_word: str  # `scratch`, `local-memory` (loop-weighted … instructions)
    spill_title: str  # the diff report's spill bars
    headers: dict[str, str] = field(default_factory=dict)  # report column headers in this backend's words


# Reports over kernels of several backends.
MIXED_WORDING = Wording(
    register_title="",  # each backend's title with its vendor: `VGPRs (AMD) / registers per thread (NVIDIA)`
    occupancy_unit="occupancy",
    scratch_title="scratch / local memory bytes",
    scratch_word="scratch/local",
    spill_title="spill / local memory changes (B − A)",
)


@dataclass(frozen=True)
class FigureRoles:
    """Which figure plays each role on one backend, and the words its reports use. Declared once per backend."""

    backend: str  # Triton's backend name in the kernel JSON
    vendor: str  # how a report names the vendor: `AMD`
    registers: str  # the register count tables, plots and winners show
    register_rules: tuple[str, ...]  # the `--fail-on` register rules (vgpr, sgpr, agpr, registers) it can judge
    spill_counts: tuple[str, ...]  # spilled-register counts; () where only memory tells of spills
    spill_memory: tuple[str, ...]  # memory whose growth is a new spill where there is no count
    scratch: tuple[str, ...]  # what `scratch-increase` reads
    memory_spill: str  # the one per-thread spill-memory figure the tables show (`scratch`, `local`)
    extra_memory: tuple[str, ...]  # more spill memory the winners line shows when not 0 (NVIDIA's stack)
    launch_occupancy: str
    compiler_occupancy: str | None  # the compiler's own occupancy figure, where it writes one
    expected: tuple[str, ...]  # every kernel of this backend should have these: their absence is said
    table_cells: tuple[str | None, ...]  # the diff table's register and spill cells (None: blank on this backend)
    shared_listed: str  # the shared-memory column of a snapshot's report listing
    verdict_spills: tuple[str, ...]  # figures whose growth the verdict reads as spilling
    verdict_resources: tuple[str, ...]  # figures whose growth the verdict reads as resource pressure
    labels: dict[str, str]  # this backend's own word for a figure (`shared`: `LDS`)
    register_word: str  # one register in a sentence: `VGPR`, `register`
    register_abbrev: str  # in the winners line: `VGPRs`, `regs`
    memory_abbrev: str  # in the winners line: `scratch`, `local`
    occupancy_step: str  # what a register too many loses: `wave`, `block`
    wording: Wording

    def label(self, column: str) -> str:
        return self.labels.get(column) or BY_COLUMN[column].label

    def sentence_columns(self, columns: Iterable[str]) -> list[tuple[str, str, str]]:
        """(column, label, unit) of each figure, in this backend's words."""
        return [(c, self.label(c), BY_COLUMN[c].unit) for c in columns]

    def occupancy_columns(self) -> tuple[str, ...]:
        return (self.launch_occupancy,) + ((self.compiler_occupancy,) if self.compiler_occupancy else ())


def load_roles(text: str) -> FigureRoles:
    """A backend's roles from its figures.json (`why` holds the comments). Every column it names must be a
    declared figure, every field present: a roles file that drifts from FIGURES fails when kdb starts."""
    raw: dict[str, Any] = {k: v for k, v in json.loads(text).items() if k != "why"}
    names = {f.name for f in fields(FigureRoles)}
    if set(raw) != names:
        raise ValueError(f"roles file fields differ from FigureRoles: {sorted(set(raw) ^ names)}")
    wording = Wording(**raw.pop("wording"))
    values: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in raw.items()}
    roles = FigureRoles(**values, wording=wording)
    named = [roles.registers, roles.memory_spill, roles.launch_occupancy, roles.shared_listed, *roles.spill_counts]
    named += [*roles.spill_memory, *roles.scratch, *roles.extra_memory, *roles.expected, *roles.verdict_spills]
    named += [*roles.verdict_resources, *roles.labels, *(c for c in roles.table_cells if c)]
    named += [roles.compiler_occupancy] if roles.compiler_occupancy else []
    columns(" ".join(named))  # raises on a column FIGURES does not declare
    return roles


def wording_for(roles: Iterable[FigureRoles], default: FigureRoles) -> Wording:
    """The words of a report over kernels of these backends: one backend's own, else the mixed ones."""
    present = list({r.backend: r for r in roles}.values())
    if len(present) <= 1:
        return (present or [default])[0].wording
    title = " / ".join(f"{r.wording.register_title} ({r.vendor})" for r in present)
    return Wording(**{**MIXED_WORDING.__dict__, "register_title": title})
