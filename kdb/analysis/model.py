"""What per-backend analysis works on and returns: a folder's files, the rows for one folder, options, and a
kernel's launch as either vendor's occupancy calculator takes it."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, overload

from kdb.analysis.loops import LoopNest, weight
from kdb.triton.kernel_json import KernelMeta


@dataclass
class FolderFile:
    rel: str
    kind: str
    data: bytes


@dataclass(frozen=True)
class SassRequest:
    """A kernel's SASS, left to be disassembled with other folders' kernels in one nvdisasm process."""

    path: str  # the cubin, relative to the cache
    arch: str  # as `nvdisasm -b` spells it: SM90a
    code: bytes  # the kernel's raw .text section


@dataclass
class FolderAnalysis:
    kernel: dict[str, Any] | None = None  # a kernel_folders row
    rows: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # analysis table -> rows
    problems: list[tuple[str, str, str]] = field(default_factory=list)  # (path, stage, reason)
    sass: SassRequest | None = None  # filled by kdb.analysis.folder.analyze_folders

    def add(self, table: str, **row: Any) -> None:
        self.rows.setdefault(table, []).append(row)


@dataclass(frozen=True)
class LaunchShape:
    """What occupancy depends on, for either vendor: where a kernel runs, how wide its blocks are, and what each
    thread and block holds. The vendors' own extras (AMD: wave size, SGPRs, the descriptor's allocation;
    NVIDIA: barriers, virtual resources) travel beside it."""

    arch: str | int  # AMD 'gfx942'; NVIDIA 90, 'sm_90a'
    num_warps: int  # warps (AMD: wavefronts) per block (AMD: workgroup)
    registers: int  # per thread (AMD: VGPRs per lane, AGPRs folded in)
    static_shared: int = 0  # bytes per block the code object declares (AMD static LDS, NVIDIA .nv.shared.<kernel>)
    dynamic_shared: int = 0  # bytes per block Triton's launcher adds (the kernel JSON's `shared`)

    def with_registers(self, registers: int) -> LaunchShape:
        """The same launch with another register count: what an occupancy cliff is measured along."""
        # built directly: dataclasses.replace costs a few µs a call, and a cliff search calls this once per step
        return LaunchShape(self.arch, self.num_warps, registers, self.static_shared, self.dynamic_shared)


@dataclass(frozen=True)
class AnalysisOptions:
    # nvdisasm costs ~0.25 s of CPU per cubin, more than the rest of an NVIDIA kernel's analysis; the
    # PTX mix is always recorded, so SASS can be skipped (`kdb ingest --no-sass`) on large caches.
    sass: bool = True


DEFAULT_OPTIONS = AnalysisOptions()


@overload
def text_of(f: FolderFile) -> str: ...
@overload
def text_of(f: None) -> None: ...
@overload
def text_of(f: FolderFile | None) -> str | None: ...
def text_of(f: FolderFile | None) -> str | None:
    return None if f is None else f.data.decode("utf-8", "replace")


def first_file(files: list[FolderFile], kind: str, name: str) -> FolderFile | None:
    """The folder's file of this kind for kernel NAME (`NAME.kind`), else any of that kind."""
    of_kind = [f for f in files if f.kind == kind]
    for f in of_kind:
        if f.rel.rsplit("/", 1)[-1].rsplit(".", 1)[0] == name:
            return f
    return of_kind[0] if of_kind else None


def add_problem(out: FolderAnalysis, f: FolderFile | None, stage: str, reason: str) -> None:
    out.problems.append((f.rel if f else "", stage, reason))


def add_mix(out: FolderAnalysis, folder_digest: str, source: str, counts: Iterable[tuple[str, str, int]]) -> None:
    """The instr_mix_counts rows of one instruction source: (mnemonic, group, count), in the order given."""
    for mnemonic, grp, count in counts:
        out.add("instr_mix_counts", folder_digest=folder_digest, source=source, mnemonic=mnemonic, grp=grp, count=count)


def add_source_lines(
    out: FolderAnalysis, folder_digest: str, source: str, lines: dict[tuple[str, int, str], int]
) -> None:
    """The source_line_counts rows of one instruction source: (file, line, group) -> count, sorted."""
    for (file, line, grp), count in sorted(lines.items()):
        out.add(
            "source_line_counts",
            folder_digest=folder_digest,
            source=source,
            file=file,
            line=line,
            grp=grp,
            count=count,
        )


@dataclass(frozen=True)
class KernelFolder:
    """One kernel folder as a backend's analysis receives it (kdb/analysis/registry.py: Backend.analyze)."""

    digest: str  # the folder's content address
    meta: KernelMeta  # its Triton JSON
    files: list[FolderFile]
    options: AnalysisOptions


@dataclass(frozen=True)
class LoopFacts:
    """A kernel's loops as one instruction source shows them, and where its scratch instructions sit in them."""

    source: str  # the instruction source: 'amdgcn', 'llvm-objdump', 'ptx', 'sass'
    nest: LoopNest
    loop_mix: dict[tuple[int, str, str], int]  # (loop depth >= 1, mnemonic, group) -> count
    scratch_total: int  # the kernel's instructions of SCRATCH_GROUP, inside loops or not
    scratch_group: str  # what spills go to in this source: 'scratch' (AMD), 'local' (NVIDIA)


def record_loops(
    out: FolderAnalysis, row: dict[str, Any], f: FolderFile | None, folder_digest: str, facts: LoopFacts
) -> None:
    """Record a kernel's loop facts from its `source` mix (the one that is its instr_source): the kernel_analysis
    columns of migration 010 and the instr_mix_loop_counts rows (depth >= 1). A loop nest built on branches kdb
    could not follow is no figure: the columns stay NULL and a `loops` problem says why (unknown, never a guess)."""
    source, nest = facts.source, facts.nest
    clear_loops(out, row, source)
    if nest.unresolved:
        add_problem(
            out, f, "loops", f"loop depths unknown: {nest.unresolved} branches go where the {source} does not say"
        )
        return
    by_depth: dict[int, int] = {}
    inside = 0
    for (depth, mnemonic, grp), count in sorted(facts.loop_mix.items()):
        out.add(
            "instr_mix_loop_counts",
            folder_digest=folder_digest,
            source=source,
            loop_depth=depth,
            mnemonic=mnemonic,
            grp=grp,
            count=count,
        )
        if grp == facts.scratch_group:
            by_depth[depth] = by_depth.get(depth, 0) + count
            inside += count
    if facts.scratch_total - inside:
        by_depth[0] = facts.scratch_total - inside
    row.update(
        max_loop_depth=nest.max_depth,
        scratch_instr_in_loops=inside,
        loop_weighted_scratch=sum(count * weight(depth) for depth, count in by_depth.items()),
        scratch_by_loop_depth=json.dumps({str(d): n for d, n in sorted(by_depth.items())}),
    )


def clear_loops(out: FolderAnalysis, row: dict[str, Any], source: str | None = None) -> None:
    """Forget loop facts recorded from a source that is no longer the instr_source (or every source)."""
    out.rows["instr_mix_loop_counts"] = [
        r for r in out.rows.get("instr_mix_loop_counts", []) if source is not None and r["source"] != source
    ]
    for name in LOOP_COLUMNS:
        row.pop(name, None)


LOOP_COLUMNS = ("max_loop_depth", "scratch_instr_in_loops", "loop_weighted_scratch", "scratch_by_loop_depth")
