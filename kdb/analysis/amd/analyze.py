"""AMD analysis of one kernel folder: code object (.hsaco), occupancy, asm listing or llvm-objdump mix."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from kdb.analysis.amd import occupancy
from kdb.analysis.amd.amdgcn import AsmKernel, AsmListing, parse_amdgcn
from kdb.analysis.amd.disasm import disassemble
from kdb.analysis.amd.groups import classify
from kdb.analysis.amd.hsaco import CodeObject, KernelObject, parse_hsaco
from kdb.analysis.amd.occupancy import ARCH_BY_MACH, processor_name, processor_table
from kdb.analysis.model import (
    FolderAnalysis,
    FolderFile,
    KernelFolder,
    LaunchShape,
    LoopFacts,
    add_mix,
    add_problem,
    add_source_lines,
    first_file,
    record_loops,
    text_of,
)
from kdb.errors import KdbError, ParseError
from kdb.triton.kernel_json import KernelMeta


def analyze_amd(out: FolderAnalysis, row: dict[str, Any], folder: KernelFolder) -> None:
    folder_digest, meta, files = folder.digest, folder.meta, folder.files
    hsaco = first_file(files, "hsaco", meta.name)
    asm_file = first_file(files, "amdgcn", meta.name)
    listing, asm_error = _listing(asm_file)
    co = kernel = None
    if hsaco is None:
        add_problem(out, None, "hsaco", "no code object (.hsaco) in the kernel folder")
    else:
        try:
            co = parse_hsaco(hsaco.data)
            kernel = next((k for k in co.kernels if k.name == meta.name), co.kernels[0] if co.kernels else None)
            if kernel is None:
                raise ParseError("code object holds no kernel")
        except ParseError as exc:
            add_problem(out, hsaco, "hsaco", str(exc))
            co = kernel = None
    arch = _processor(out, hsaco, co, meta, listing)
    if co is not None and kernel is not None:
        row.update(
            co_arch=arch,
            co_version=co.code_object_version,
            xnack=co.xnack,
            sramecc=co.sramecc,
            vgpr_count=kernel.vgpr_count,
            agpr_count=kernel.agpr_count,
            sgpr_count=kernel.sgpr_count,
            vgpr_spill_count=kernel.vgpr_spill_count,
            sgpr_spill_count=kernel.sgpr_spill_count,
            lds_static=kernel.group_segment_fixed_size,
            scratch_bytes=kernel.private_segment_fixed_size,
            wavefront_size=kernel.wavefront_size,
            max_workgroup_size=kernel.max_flat_workgroup_size,
            kernarg_size=kernel.kernarg_segment_size,
            dynamic_stack=kernel.uses_dynamic_stack,
            code_size=kernel.code_size,
            registers=kernel.vgpr_count,
            stack_bytes=kernel.private_segment_fixed_size,
            local_bytes=kernel.private_segment_fixed_size,
            co_metadata=json.dumps(kernel.metadata, sort_keys=True),
            descriptor=json.dumps(_descriptor(kernel), sort_keys=True),
        )
        asm_kernel = _asm_kernel(listing, meta.name)
        facts, problem = _occupancy(arch, kernel, meta, asm_kernel.occupancy if asm_kernel is not None else None)
        row.update(facts)
        if problem is not None:
            add_problem(out, hsaco, "occupancy", problem)

    if listing is not None and (asm := _asm_kernel(listing, meta.name)) is not None:
        _asm_facts(out, row, folder_digest, asm, asm_file)
        return
    if asm_file is not None:
        add_problem(out, asm_file, "amdgcn", asm_error or "no kernel function in the asm")
    if hsaco is not None and kernel is not None:
        if arch is None:
            add_problem(out, hsaco, "disasm", "no llvm-objdump mix: the processor is unknown")
            return
        _objdump_mix(out, row, folder_digest, hsaco, arch, kernel)


def _listing(asm_file: FolderFile | None) -> tuple[AsmListing | None, str | None]:
    if asm_file is None:
        return None, None
    try:
        return parse_amdgcn(text_of(asm_file)), None
    except ParseError as exc:
        return None, str(exc)


def _asm_kernel(listing: AsmListing | None, name: str) -> AsmKernel | None:
    if listing is None:
        return None
    return next((k for k in listing.kernels if k.name == name), listing.kernels[0] if listing.kernels else None)


def _processor(
    out: FolderAnalysis, hsaco: FolderFile | None, co: CodeObject | None, meta: KernelMeta, listing: AsmListing | None
) -> str | None:
    """The processor as the compiler named it: the code object's `amdhsa.target`, then Triton's JSON target, then
    the asm's `.amdgcn_target`, and the ELF e_flags machine number only as a last resort. None (with a problem
    recorded) when nothing names it; a problem too when the sources disagree."""
    named = [
        ("amdhsa.target", processor_name(co.target) if co else None),
        ("Triton JSON target", processor_name(meta.arch)),
        (".amdgcn_target", processor_name(listing.target) if listing else None),
        ("ELF e_flags", co.flags_arch if co else None),
    ]
    present = [(source, name) for source, name in named if name]
    if not present:
        mach = f"machine 0x{co.mach:02x}" if co else "no code object"
        add_problem(
            out,
            hsaco,
            "target",
            f"no source names the processor (amdhsa.target, Triton JSON target, .amdgcn_target; e_flags {mach} is "
            f"not one of the {len(ARCH_BY_MACH)} processors LLVM {processor_table().get('llvm_version', '?')} knows)",
        )
        return None
    source, arch = present[0]
    others = sorted({f"{s} names {n}" for s, n in present[1:] if n != arch})
    if others:
        add_problem(out, hsaco, "target", f"{source} names {arch}, but " + "; ".join(others))
    return arch


def _occupancy(
    arch: str | None, kernel: KernelObject, meta: KernelMeta, llvm_comment: int | None
) -> tuple[dict[str, Any], str | None]:
    """The kernel's occupancy columns, and a problem when the figure is unknown or LLVM's comment (the asm's
    `; Occupancy:`, LLVM_COMMENT) is all there is."""
    # The hardware reserves what the descriptor allocates, which `waves_per_eu` can raise above use.
    wave = occupancy.WaveResources(
        kernel.wavefront_size,
        kernel.sgpr_count,
        kernel.descriptor_vgprs,
        _int_or_none(meta.raw.get("waves_per_eu")),
    )
    try:
        if arch is None:
            raise KdbError("the processor is unknown")
        occ, lim = occupancy.compiler_occupancy(arch, kernel.vgpr_count, wave)
        shape = LaunchShape(
            arch, meta.num_warps or 1, kernel.vgpr_count, kernel.group_segment_fixed_size, meta.shared or 0
        )
        launch, launch_lim = occupancy.launch_occupancy(shape, wave)
        # How far the launch figure is from a cliff either way, in VGPRs (a waves_per_eu floor held: see there).
        to_cliff, to_gain = occupancy.register_cliffs(shape, wave)
        # Headroom only where VGPRs are what limits the launch: elsewhere fewer VGPRs gain nothing.
        headroom = occupancy.vgpr_headroom(arch, kernel.vgpr_count, wave) if launch_lim == "vgpr" else None
    except KdbError as exc:
        if llvm_comment is None:
            return {}, f"occupancy unknown: {exc}"
        # LLVM states its own figure in the asm: kept, and said to be LLVM's alone (no limiter, no launch figure).
        return (
            {"occupancy_llvm": llvm_comment, "occupancy_unit": "waves/SIMD"},
            f"{arch or 'unknown processor'}: occupancy from LLVM's comment only ({exc})",
        )
    return {
        "occupancy_llvm": occ,
        "occupancy_llvm_limiter": lim,
        "occupancy": launch,
        "occupancy_limiter": launch_lim,
        "occupancy_unit": "waves/SIMD",
        "vgpr_headroom": headroom,
        "registers_to_cliff": to_cliff,
        "registers_to_gain": to_gain,
    }, None


def _asm_facts(
    out: FolderAnalysis, row: dict[str, Any], folder_digest: str, asm: AsmKernel, asm_file: FolderFile | None
) -> None:
    info_occ = asm.kernel_info.get("Occupancy")
    row.update(
        asm_occupancy=info_occ if isinstance(info_occ, int) else None,
        kernel_info=json.dumps(asm.kernel_info, sort_keys=True) if asm.kernel_info else None,
        instr_source="amdgcn",
        instr_count=asm.instruction_count,
        spill_count=asm.spill_count,
        reload_count=asm.reload_count,
        scratch_instr_count=asm.scratch_instructions,
    )
    loops = LoopFacts("amdgcn", asm.loops, asm.loop_mix, asm.scratch_instructions, "scratch")
    record_loops(out, row, asm_file, folder_digest, loops)
    # asm.mix classifies with operands (a MUBUF load is scratch only when it addresses scratch)
    add_mix(out, folder_digest, "amdgcn", ((mnemonic, grp, n) for (mnemonic, grp), n in sorted(asm.mix.items())))
    add_source_lines(out, folder_digest, "amdgcn", asm.lines)


def _objdump_mix(
    out: FolderAnalysis,
    row: dict[str, Any],
    folder_digest: str,
    hsaco: FolderFile,
    arch: str,
    kernel: KernelObject,
) -> None:
    found = disassemble(hsaco.data, arch, kernel.name)
    if found is None:
        return
    counts = found.counts
    private = bool(kernel.private_segment_fixed_size)
    groups = {m: classify(m, private) for m in counts}
    scratch = sum(n for m, n in counts.items() if groups[m] == "scratch")
    row.update(instr_source="llvm-objdump", instr_count=sum(counts.values()), scratch_instr_count=scratch)
    add_mix(out, folder_digest, "llvm-objdump", ((m, groups[m], n) for m, n in sorted(counts.items())))
    nest = found.loops()
    if nest is None:
        add_problem(out, hsaco, "loops", "loop depths unknown: llvm-objdump could not decode every word")
        return
    loop_mix: Counter[tuple[int, str, str]] = Counter()
    for depth, mnemonic in zip(nest.depths, found.mnemonics, strict=True):
        if depth:
            loop_mix[(depth, mnemonic, groups[mnemonic])] += 1
    record_loops(out, row, hsaco, folder_digest, LoopFacts("llvm-objdump", nest, dict(loop_mix), scratch, "scratch"))


def _descriptor(kernel: Any) -> dict[str, Any]:
    names = (
        "granulated_vgpr",
        "granulated_sgpr",
        "accum_offset",
        "wgp_mode",
        "wave32",
        "private_segment_enabled",
        "user_sgpr_count",
        "entry_offset",
        "descriptor_vgprs",
        "descriptor_arch_vgprs",
        "descriptor_sgprs",
    )
    return {n: getattr(kernel, n, None) for n in names}


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
