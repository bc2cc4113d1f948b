"""Turn one kernel folder's bytes into catalog rows: Triton JSON, and (per backend) code-object facts.

Called in worker processes during ingest and by `kdb reindex`; it never touches the store or catalog.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kdb.errors import KdbError, ParseError
from kdb.normalize import STAGE_KINDS, metadata_digest, stage_digest
from kdb.parsers.triton_json import KernelMeta, parse_kernel_json, release_family


@dataclass
class FolderFile:
    rel: str
    kind: str
    data: bytes


@dataclass
class FolderAnalysis:
    kernel: dict[str, Any] | None = None  # a kernel_folders row
    rows: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # analysis table -> rows
    problems: list[tuple[str, str, str]] = field(default_factory=list)  # (path, stage, reason)

    def add(self, table: str, **row: Any) -> None:
        self.rows.setdefault(table, []).append(row)


# Tables filled from analysis (columns besides snapshot_id); `kdb reindex` rebuilds exactly these.
ANALYSIS_COLUMNS = [
    "folder_digest", "co_arch", "co_version", "xnack", "sramecc", "vgpr_count", "agpr_count", "sgpr_count",
    "vgpr_spill_count", "sgpr_spill_count", "lds_static", "scratch_bytes", "wavefront_size", "max_workgroup_size",
    "kernarg_size", "dynamic_stack", "code_size", "descriptor", "co_metadata", "registers", "stack_bytes",
    "local_bytes", "const0_bytes", "occupancy_llvm", "occupancy_llvm_limiter", "occupancy", "occupancy_limiter",
    "occupancy_unit", "vgpr_headroom", "asm_occupancy", "kernel_info", "instr_source", "instr_count", "spill_count",
    "reload_count", "scratch_instr_count", "ptx_instr_count", "ttgir_num_warps", "ttgir_num_ctas",
    "threads_per_warp", "ttgir_shared", "layouts", "convert_layout_count", "local_alloc_count", "identity",
    "identity_any_target", "identity_parts", "identity_options", "ttir_digest", "ttgir_digest", "llir_digest", "isa_digest",
    "instr_mix_digest", "instr_groups",
]
TABLE_COLUMNS: dict[str, list[str]] = {
    "kernel_analysis": ANALYSIS_COLUMNS,
    "instr_mix_counts": ["folder_digest", "source", "mnemonic", "grp", "count"],
    "source_line_counts": ["folder_digest", "source", "file", "line", "grp", "count"],
    "analysis_problems": ["folder_digest", "name", "stage", "reason"],
}
ANALYSIS_TABLES: tuple[str, ...] = tuple(TABLE_COLUMNS)

def kernel_row(cache_key: str, folder_digest: str, meta: KernelMeta, file_stem: str | None = None) -> dict[str, Any]:
    from kdb.identity import canonical_kernel_name

    version, source = meta.triton_version, "json"
    if version is None:
        version, source = release_family(cache_key), "folder-name"
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


@dataclass(frozen=True)
class AnalysisOptions:
    # nvdisasm costs ~0.25 s of CPU per cubin, more than the rest of an NVIDIA kernel's analysis; the
    # PTX mix is always recorded, so SASS can be skipped (`kdb ingest --no-sass`) on large caches.
    sass: bool = True


def analyze_folder(cache_key: str, folder_digest: str, json_file: FolderFile, files: list[FolderFile],
                   options: AnalysisOptions = AnalysisOptions()) -> FolderAnalysis:
    """Rows for one kernel folder; problems are (path relative to the cache, stage, reason)."""
    out = FolderAnalysis()
    try:
        meta = parse_kernel_json(json_file.data)
    except ParseError as exc:
        out.problems.append((json_file.rel, "json", str(exc)))
        # Still a kernel folder: keep a row under the file's name so the kernel is listed, facts NULL.
        stem = json_file.rel.rsplit("/", 1)[-1][: -len(".json")]
        family = release_family(cache_key)
        out.kernel = {"folder_digest": folder_digest, "cache_key": cache_key, "name": stem, "triton_version": family,
                      "triton_version_source": "folder-name" if family else None}
    else:
        out.kernel = kernel_row(cache_key, folder_digest, meta, json_file.rel.rsplit("/", 1)[-1][: -len(".json")])
        analyze_kernel(out, folder_digest, meta, files, options)
    prefix = cache_key + "/"
    for path, stage, reason in out.problems:
        out.add("analysis_problems", folder_digest=folder_digest, name=path[len(prefix):] if path.startswith(prefix) else path,
                stage=stage, reason=reason)
    return out


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _text(f: FolderFile | None) -> str | None:
    return None if f is None else f.data.decode("utf-8", "replace")


def _first(files: list[FolderFile], kind: str, name: str) -> FolderFile | None:
    """The folder's file of this kind for kernel NAME (`NAME.kind`), else any of that kind."""
    of_kind = [f for f in files if f.kind == kind]
    for f in of_kind:
        if f.rel.rsplit("/", 1)[-1].rsplit(".", 1)[0] == name:
            return f
    return of_kind[0] if of_kind else None


def analyze_kernel(out: FolderAnalysis, folder_digest: str, meta: KernelMeta, files: list[FolderFile],
                   options: AnalysisOptions = AnalysisOptions()) -> None:
    row: dict[str, Any] = {"folder_digest": folder_digest}
    _ir_facts(out, row, meta, files)
    if meta.backend == "hip" or _first(files, "hsaco", meta.name):
        _amd(out, row, folder_digest, meta, files)
    elif meta.backend == "cuda" or _first(files, "cubin", meta.name):
        _nvidia(out, row, folder_digest, meta, files, options.sass)
    _mix_summary(out, row)
    out.add("kernel_analysis", **row)


def _mix_summary(out: FolderAnalysis, row: dict[str, Any]) -> None:
    """Digest and group totals of the mix `kdb diff` compares (the instr_source one); migration 004
    computes the same two values in SQL for rows written before it."""
    mix = sorted((r["mnemonic"], r["grp"], r["count"]) for r in out.rows.get("instr_mix_counts", [])
                 if r["source"] == row.get("instr_source"))
    if not mix:
        return
    groups: dict[str, int] = {}
    for _, grp, count in mix:
        groups[grp] = groups.get(grp, 0) + count
    row["instr_mix_digest"] = hashlib.sha256("\n".join(f"{m} {g} {c}" for m, g, c in mix).encode()).hexdigest()
    row["instr_groups"] = json.dumps(groups, sort_keys=True)


def _problem(out: FolderAnalysis, f: FolderFile | None, stage: str, reason: str) -> None:
    out.problems.append((f.rel if f else "", stage, reason))


def _ir_facts(out: FolderAnalysis, row: dict[str, Any], meta: KernelMeta, files: list[FolderFile]) -> None:
    from kdb.identity import kernel_identity
    from kdb.parsers.ttgir import parse_ttgir

    ttgir = _first(files, "ttgir", meta.name)
    if ttgir is not None:
        try:
            facts = parse_ttgir(_text(ttgir))
            row.update(ttgir_num_warps=facts["num_warps"], ttgir_num_ctas=facts["num_ctas"],
                       threads_per_warp=facts["threads_per_warp"], ttgir_shared=facts["shared"],
                       layouts=facts["layouts"], convert_layout_count=facts["convert_layout_count"],
                       local_alloc_count=facts["local_alloc_count"])
        except ParseError as exc:
            _problem(out, ttgir, "ttgir", str(exc))
    for stage, kinds in STAGE_KINDS.items():
        stage_file = next((f for kind in kinds if (f := _first(files, kind, meta.name)) is not None), None)
        if stage_file is not None:
            row[f"{stage}_digest"] = stage_digest(_text(stage_file), stage_file.kind)
    ttir = _first(files, "ttir", meta.name)
    try:
        ident = kernel_identity(_text(ttir), meta, Path(ttir.rel).stem if ttir is not None else None)
    except ParseError as exc:
        _problem(out, ttir, "identity", str(exc))
        ident = None
    if ident is not None:
        row.update(identity=ident["identity"], identity_any_target=ident["identity_any_target"],
                   identity_parts=json.dumps(ident["parts"], sort_keys=True),
                   identity_options=json.dumps(ident["parts"].get("options") or {}, sort_keys=True))


def _amd(out: FolderAnalysis, row: dict[str, Any], folder_digest: str, meta: KernelMeta, files: list[FolderFile]) -> None:
    from kdb import occupancy
    from kdb.disasm import disassemble_mnemonics
    from kdb.parsers.amdgcn import classify, parse_amdgcn
    from kdb.parsers.hsaco import parse_hsaco

    hsaco = _first(files, "hsaco", meta.name)
    kernel = None
    arch = meta.arch
    if hsaco is None:
        _problem(out, None, "hsaco", "no code object (.hsaco) in the kernel folder")
    else:
        try:
            co = parse_hsaco(hsaco.data)
            kernel = next((k for k in co.kernels if k.name == meta.name), co.kernels[0] if co.kernels else None)
            if kernel is None:
                raise ParseError("code object holds no kernel")
            arch = co.arch
            row.update(co_arch=co.arch, co_version=co.code_object_version, xnack=co.xnack, sramecc=co.sramecc,
                       vgpr_count=kernel.vgpr_count, agpr_count=kernel.agpr_count, sgpr_count=kernel.sgpr_count,
                       vgpr_spill_count=kernel.vgpr_spill_count, sgpr_spill_count=kernel.sgpr_spill_count,
                       lds_static=kernel.group_segment_fixed_size, scratch_bytes=kernel.private_segment_fixed_size,
                       wavefront_size=kernel.wavefront_size, max_workgroup_size=kernel.max_flat_workgroup_size,
                       kernarg_size=kernel.kernarg_segment_size, dynamic_stack=kernel.uses_dynamic_stack,
                       code_size=kernel.code_size, registers=kernel.vgpr_count,
                       stack_bytes=kernel.private_segment_fixed_size, local_bytes=kernel.private_segment_fixed_size,
                       co_metadata=json.dumps(kernel.metadata, sort_keys=True),
                       descriptor=json.dumps(_descriptor(kernel), sort_keys=True))
        except ParseError as exc:
            _problem(out, hsaco, "hsaco", str(exc))
            kernel = None
    if kernel is not None:
        try:
            wave = kernel.wavefront_size
            # The hardware reserves what the descriptor allocates, which `waves_per_eu` can raise above use.
            registers = (wave, kernel.vgpr_count, kernel.sgpr_count)
            alloc = {"allocated_vgprs": kernel.descriptor_vgprs, "waves_per_eu": _int_or_none(meta.raw.get("waves_per_eu"))}
            occ, lim = occupancy.compiler_occupancy(arch, *registers, **alloc)
            lds = kernel.group_segment_fixed_size + (meta.shared or 0)
            launch, launch_lim = occupancy.launch_occupancy(arch, *registers, lds, meta.num_warps or 1, **alloc)
            headroom = occupancy.vgpr_headroom(arch, *registers, **alloc) if launch_lim == "vgpr" else None
            row.update(occupancy_llvm=occ, occupancy_llvm_limiter=lim, occupancy=launch, occupancy_limiter=launch_lim,
                       occupancy_unit="waves/SIMD", vgpr_headroom=headroom)
        except KdbError as exc:
            _problem(out, hsaco, "occupancy", str(exc))

    asm_file = _first(files, "amdgcn", meta.name)
    private = bool(kernel and kernel.private_segment_fixed_size)
    if asm_file is not None:
        try:
            listing = parse_amdgcn(_text(asm_file))
            asm = next((k for k in listing.kernels if k.name == meta.name), listing.kernels[0] if listing.kernels else None)
            if asm is None:
                raise ParseError("no kernel function in the asm")
            info_occ = asm.kernel_info.get("Occupancy")
            row.update(asm_occupancy=info_occ if isinstance(info_occ, int) else None,
                       kernel_info=json.dumps(asm.kernel_info, sort_keys=True) if asm.kernel_info else None,
                       instr_source="amdgcn", instr_count=asm.instruction_count, spill_count=asm.spill_count,
                       reload_count=asm.reload_count, scratch_instr_count=asm.scratch_instructions)
            # asm.mix classifies with operands (a MUBUF load is scratch only when it addresses scratch)
            for (mnemonic, grp), count in sorted(asm.mix.items()):
                out.add("instr_mix_counts", folder_digest=folder_digest, source="amdgcn", mnemonic=mnemonic, grp=grp,
                        count=count)
            for (file, line, grp), count in sorted(asm.lines.items()):
                out.add("source_line_counts", folder_digest=folder_digest, source="amdgcn", file=file, line=line, grp=grp,
                        count=count)
            return
        except ParseError as exc:
            _problem(out, asm_file, "amdgcn", str(exc))
    if hsaco is not None and kernel is not None:
        counts = disassemble_mnemonics(hsaco.data, arch, kernel.name)
        if counts is None:
            return
        groups = {m: classify(m, private) for m in counts}
        row.update(instr_source="llvm-objdump", instr_count=sum(counts.values()),
                   scratch_instr_count=sum(n for m, n in counts.items() if groups[m] == "scratch"))
        for mnemonic, count in sorted(counts.items()):
            out.add("instr_mix_counts", folder_digest=folder_digest, source="llvm-objdump", mnemonic=mnemonic,
                    grp=groups[mnemonic], count=count)


def _descriptor(kernel: Any) -> dict[str, Any]:
    names = ("granulated_vgpr", "granulated_sgpr", "accum_offset", "wgp_mode", "wave32", "private_segment_enabled",
             "user_sgpr_count", "entry_offset", "descriptor_vgprs", "descriptor_arch_vgprs", "descriptor_sgprs")
    return {n: getattr(kernel, n, None) for n in names}


def _nvidia(out: FolderAnalysis, row: dict[str, Any], folder_digest: str, meta: KernelMeta, files: list[FolderFile],
            sass: bool) -> None:
    from kdb import nv_occupancy, nvtools
    from kdb.parsers.cubin import parse_cubin
    from kdb.parsers.ptx import parse_ptx

    cubin_file = _first(files, "cubin", meta.name)
    kernel = None
    if cubin_file is not None:
        try:
            cubin = parse_cubin(cubin_file.data)
            kernel = next((k for k in cubin.kernels if k.name == meta.name), None)
            if kernel is None:
                kernel = next((k for k in cubin.kernels if k.is_entry), None)
            if kernel is None:
                raise ParseError("cubin holds no kernel")
            row.update(co_arch=f"sm{cubin.arch}", registers=kernel.registers, stack_bytes=kernel.stack_size,
                       local_bytes=kernel.local_size or kernel.stack_size, lds_static=kernel.static_shared,
                       const0_bytes=kernel.const0_size, code_size=kernel.code_size,
                       max_workgroup_size=(kernel.max_threads or kernel.req_threads or (None,))[0],
                       wavefront_size=32,
                       co_metadata=json.dumps({a.name: a.value for a in kernel.attributes}, sort_keys=True))
            try:
                warps, _blocks, limiter = nv_occupancy.occupancy(cubin.arch, meta.num_warps or 4, kernel.registers,
                                                                 kernel.static_shared, meta.shared or 0)
                row.update(occupancy=warps, occupancy_limiter=limiter, occupancy_unit="warps/SM")
            except KdbError as exc:
                _problem(out, cubin_file, "occupancy", str(exc))
        except ParseError as exc:
            _problem(out, cubin_file, "cubin", str(exc))
            kernel = None
    ptx_file = _first(files, "ptx", meta.name)
    if ptx_file is not None:
        try:
            listing = parse_ptx(_text(ptx_file))
            fn = next((f for f in listing.functions if f.name == meta.name and f.is_entry),
                      next((f for f in listing.functions if f.is_entry), None))
            if fn is None:
                raise ParseError("no .entry function in the PTX")
            row.update(ptx_instr_count=fn.total,
                       spill_count=sum(n for op, n in fn.opcodes.items() if op.startswith("st.local")),
                       reload_count=sum(n for op, n in fn.opcodes.items() if op.startswith("ld.local")))
            from kdb.parsers.ptx import opcode_group

            for op, count in sorted(fn.opcodes.items()):
                out.add("instr_mix_counts", folder_digest=folder_digest, source="ptx", mnemonic=op, grp=opcode_group(op),
                        count=count)
            for (file, line, grp), count in sorted(fn.lines.items()):
                out.add("source_line_counts", folder_digest=folder_digest, source="ptx", file=file, line=line, grp=grp,
                        count=count)
            row.update(instr_source="ptx", instr_count=fn.total)
        except ParseError as exc:
            _problem(out, ptx_file, "ptx", str(exc))
    if sass and cubin_file is not None and kernel is not None:
        try:
            sass = nvtools.sass_by_kernel(cubin_file.data)
        except ParseError as exc:
            _problem(out, cubin_file, "sass", str(exc))
            sass = None
        counts = (sass or {}).get(kernel.name)
        if counts:
            row.update(instr_source="sass", instr_count=sum(counts.values()))
            for op, count in sorted(counts.items()):
                out.add("instr_mix_counts", folder_digest=folder_digest, source="sass", mnemonic=op, grp=nvtools.sass_group(op),
                        count=count)
