"""Turn one kernel folder's bytes into catalog rows: Triton JSON, IR facts, and (per backend) code-object facts.

Called in worker processes during ingest and by `kdb reindex`; it never touches the store or catalog.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import PurePosixPath
from typing import Any

from kdb.analysis.model import (
    DEFAULT_OPTIONS,
    AnalysisOptions,
    FolderAnalysis,
    FolderFile,
    KernelFolder,
    add_problem,
    first_file,
    text_of,
)
from kdb.analysis.nvidia import tools as nvtools
from kdb.analysis.nvidia.analyze import apply_sass
from kdb.analysis.registry import backend_for
from kdb.errors import ParseError
from kdb.triton.identity import canonical_kernel_name, kernel_identity
from kdb.triton.inductor import source_location, tensor_shapes
from kdb.triton.kernel_json import KernelMeta, parse_kernel_json, release_family
from kdb.triton.normalize import STAGE_KINDS, metadata_digest, stage_digest
from kdb.triton.ttgir import parse_ttgir

# Tables filled from analysis (columns besides snapshot_id); `kdb reindex` rebuilds exactly these. The last six,
# from max_loop_depth on, came with migration 010 (loops and occupancy cliffs).
# fmt: off
ANALYSIS_COLUMNS = [
    "folder_digest", "co_arch", "co_version", "xnack", "sramecc", "vgpr_count", "agpr_count", "sgpr_count",
    "vgpr_spill_count", "sgpr_spill_count", "lds_static", "scratch_bytes", "wavefront_size", "max_workgroup_size",
    "kernarg_size", "dynamic_stack", "code_size", "descriptor", "co_metadata", "registers", "stack_bytes",
    "local_bytes", "const0_bytes", "occupancy_llvm", "occupancy_llvm_limiter", "occupancy", "occupancy_limiter",
    "occupancy_unit", "vgpr_headroom", "asm_occupancy", "kernel_info", "instr_source", "instr_note", "instr_count",
    "spill_count", "reload_count", "scratch_instr_count", "ptx_instr_count", "ttgir_num_warps", "ttgir_num_ctas",
    "threads_per_warp", "ttgir_shared", "layouts", "convert_layout_count", "local_alloc_count", "identity",
    "identity_any_target", "identity_parts", "identity_options", "ttir_digest", "ttgir_digest", "llir_digest",
    "isa_digest", "instr_mix_digest", "instr_groups", "max_loop_depth", "scratch_instr_in_loops",
    "loop_weighted_scratch", "scratch_by_loop_depth", "registers_to_cliff", "registers_to_gain",
]
# fmt: on
TABLE_COLUMNS: dict[str, list[str]] = {
    "kernel_analysis": ANALYSIS_COLUMNS,
    "instr_mix_counts": ["folder_digest", "source", "mnemonic", "grp", "count"],
    # migration 010: instructions at loop depth >= 1 (depth 0 is the rest of instr_mix_counts)
    "instr_mix_loop_counts": ["folder_digest", "source", "loop_depth", "mnemonic", "grp", "count"],
    "source_line_counts": ["folder_digest", "source", "file", "line", "grp", "count"],
    "analysis_problems": ["folder_digest", "name", "stage", "reason"],
    # migration 005: what links a compiled kernel to the generated module and config it came from
    "kernel_sources": ["folder_digest", "source_file", "source_line", "tensor_shapes"],
}


def kernel_row(cache_key: str, folder_digest: str, meta: KernelMeta, file_stem: str | None = None) -> dict[str, Any]:
    version, source = meta.triton_version, "json"
    if version is None:
        version, source = release_family(cache_key.rsplit("/", 1)[-1]), "folder-name"
    return {
        "folder_digest": folder_digest,
        "cache_key": cache_key,
        "name": canonical_kernel_name(meta.name, file_stem),  # 2.3's mangled name -> the function's
        "backend": meta.backend,
        "arch": meta.arch,
        "warp_size": meta.warp_size,
        "num_warps": meta.num_warps,
        "num_stages": meta.num_stages,
        "num_ctas": meta.num_ctas,
        "waves_per_eu": meta.waves_per_eu,
        "matrix_instr_nonkdim": meta.matrix_instr_nonkdim,
        "kpack": meta.kpack,
        "shared": meta.shared,
        "triton_version": version,
        "triton_version_source": source if version is not None else None,
        "hash": meta.hash,
        "metadata": json.dumps(meta.raw, sort_keys=True),
        "metadata_digest": metadata_digest(meta.raw),
    }


def analyze_folder(
    cache_key: str,
    folder_digest: str,
    json_file: FolderFile,
    files: list[FolderFile],
    options: AnalysisOptions = DEFAULT_OPTIONS,
) -> FolderAnalysis:
    """Rows for one kernel folder; problems are (path relative to the cache, stage, reason)."""
    return analyze_folders([(cache_key, folder_digest, json_file, files)], options)[0]


FolderJob = tuple[str, str, FolderFile, list[FolderFile]]  # cache_key, folder_digest, the JSON, every file


def analyze_folders(jobs: list[FolderJob], options: AnalysisOptions = DEFAULT_OPTIONS) -> list[FolderAnalysis]:
    """Rows for several kernel folders; their kernels' SASS is disassembled together (one nvdisasm
    process per architecture, not one per cubin: its start-up is what costs)."""
    outs = [_analyze_one(cache_key, digest, json_file, files, options) for cache_key, digest, json_file, files in jobs]
    waiting = [(out, job[1]) for out, job in zip(outs, jobs, strict=True) if out.sass is not None]
    if waiting:
        results = nvtools.sass_of_code([(out.sass.arch, out.sass.code) for out, _ in waiting if out.sass])
        for (out, digest), result in zip(waiting, results, strict=True):
            row = out.rows["kernel_analysis"][0]
            apply_sass(out, row, digest, result)
            _mix_summary(out, row)
            out.sass = None  # the code bytes need not travel back from a worker
    for (cache_key, digest, _, _), out in zip(jobs, outs, strict=True):
        prefix = cache_key + "/"
        for path, stage, reason in out.problems:
            out.add(
                "analysis_problems",
                folder_digest=digest,
                name=path[len(prefix) :] if path.startswith(prefix) else path,
                stage=stage,
                reason=reason,
            )
    return outs


def _analyze_one(
    cache_key: str, folder_digest: str, json_file: FolderFile, files: list[FolderFile], options: AnalysisOptions
) -> FolderAnalysis:
    out = FolderAnalysis()
    try:
        meta = parse_kernel_json(json_file.data)
    except ParseError as exc:
        out.problems.append((json_file.rel, "json", str(exc)))
        # Still a kernel folder: keep a row under the file's name so the kernel is listed, facts NULL.
        stem = json_file.rel.rsplit("/", 1)[-1][: -len(".json")]
        family = release_family(cache_key.rsplit("/", 1)[-1])
        out.kernel = {
            "folder_digest": folder_digest,
            "cache_key": cache_key,
            "name": stem,
            "triton_version": family,
            "triton_version_source": "folder-name" if family else None,
        }
    else:
        out.kernel = kernel_row(cache_key, folder_digest, meta, json_file.rel.rsplit("/", 1)[-1][: -len(".json")])
        analyze_kernel(out, folder_digest, meta, files, options)
    return out


def analyze_kernel(
    out: FolderAnalysis,
    folder_digest: str,
    meta: KernelMeta,
    files: list[FolderFile],
    options: AnalysisOptions = DEFAULT_OPTIONS,
) -> None:
    row: dict[str, Any] = {"folder_digest": folder_digest}
    _ir_facts(out, row, meta, files)
    backend = backend_for(meta, files)
    if backend is not None:
        backend.analyze(out, row, KernelFolder(folder_digest, meta, files, options))
    _mix_summary(out, row)
    out.add("kernel_analysis", **row)


def _mix_summary(out: FolderAnalysis, row: dict[str, Any]) -> None:
    """Digest and group totals of the mix `kdb diff` compares (the instr_source one); migration 004
    computes the same two values in SQL for rows written before it."""
    mix = sorted(
        (r["mnemonic"], r["grp"], r["count"])
        for r in out.rows.get("instr_mix_counts", [])
        if r["source"] == row.get("instr_source")
    )
    if not mix:
        return
    groups: dict[str, int] = {}
    for _, grp, count in mix:
        groups[grp] = groups.get(grp, 0) + count
    row["instr_mix_digest"] = hashlib.sha256("\n".join(f"{m} {g} {c}" for m, g, c in mix).encode()).hexdigest()
    row["instr_groups"] = json.dumps(groups, sort_keys=True)


def _ir_facts(out: FolderAnalysis, row: dict[str, Any], meta: KernelMeta, files: list[FolderFile]) -> None:
    ttgir = first_file(files, "ttgir", meta.name)
    if ttgir is not None:
        try:
            facts = parse_ttgir(text_of(ttgir))
            row.update(
                ttgir_num_warps=facts["num_warps"],
                ttgir_num_ctas=facts["num_ctas"],
                threads_per_warp=facts["threads_per_warp"],
                ttgir_shared=facts["shared"],
                layouts=facts["layouts"],
                convert_layout_count=facts["convert_layout_count"],
                local_alloc_count=facts["local_alloc_count"],
            )
        except ParseError as exc:
            add_problem(out, ttgir, "ttgir", str(exc))
    for stage, kinds in STAGE_KINDS.items():
        stage_file = next((f for kind in kinds if (f := first_file(files, kind, meta.name)) is not None), None)
        if stage_file is not None:
            row[f"{stage}_digest"] = stage_digest(text_of(stage_file), stage_file.kind)
    ttir = first_file(files, "ttir", meta.name)
    _source_facts(out, row["folder_digest"], ttir, first_file(files, "source", meta.name))
    try:
        ident = kernel_identity(text_of(ttir), meta, PurePosixPath(ttir.rel).stem if ttir is not None else None)
    except ParseError as exc:
        add_problem(out, ttir, "identity", str(exc))
        ident = None
    if ident is not None:
        row.update(
            identity=ident["identity"],
            identity_any_target=ident["identity_any_target"],
            identity_parts=json.dumps(ident["parts"], sort_keys=True),
            identity_options=json.dumps(ident["parts"].get("options") or {}, sort_keys=True),
        )


def _source_facts(out: FolderAnalysis, folder_digest: str, ttir: FolderFile | None, source: FolderFile | None) -> None:
    """The kernel's Python file and `def` line (from the TTIR locations), and its TTIR tensor shapes."""
    loc = None
    for f in (ttir, source):
        if f is not None and (loc := source_location(text_of(f))) is not None:
            break
    dims = tensor_shapes(text_of(ttir)) if ttir is not None else None
    if loc is None and not dims:
        return
    out.add(
        "kernel_sources",
        folder_digest=folder_digest,
        source_file=loc[0] if loc else None,
        source_line=loc[1] if loc else None,
        tensor_shapes=dims,
    )
