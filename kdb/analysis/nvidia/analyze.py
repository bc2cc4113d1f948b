"""NVIDIA analysis of one kernel folder: cubin, occupancy, PTX mix, and (unless --no-sass) the SASS mix."""

from __future__ import annotations

import json
from typing import Any

from kdb.analysis.model import (
    FolderAnalysis,
    FolderFile,
    KernelFolder,
    LaunchShape,
    LoopFacts,
    SassRequest,
    add_mix,
    add_problem,
    add_source_lines,
    clear_loops,
    first_file,
    record_loops,
    text_of,
)
from kdb.analysis.nvidia import occupancy as nv_occupancy
from kdb.analysis.nvidia import tools as nvtools
from kdb.analysis.nvidia.cubin import Cubin, CubinKernel, parse_cubin
from kdb.analysis.nvidia.ptx import opcode_group, parse_ptx
from kdb.errors import KdbError, ParseError, UsageError
from kdb.triton.kernel_json import KernelMeta


def analyze_nvidia(out: FolderAnalysis, row: dict[str, Any], folder: KernelFolder) -> None:
    folder_digest, meta, files, options = folder.digest, folder.meta, folder.files, folder.options
    cubin_file = first_file(files, "cubin", meta.name)
    kernel = None
    if cubin_file is not None:
        try:
            cubin = parse_cubin(cubin_file.data)
            kernel = next((k for k in cubin.kernels if k.name == meta.name), None)
            if kernel is None:
                kernel = next((k for k in cubin.kernels if k.is_entry), None)
            if kernel is None:
                raise ParseError("cubin holds no kernel")
            row.update(
                co_arch=cubin.arch_name,  # as cuobjdump 13 and ptxas (-arch) name it: sm_90a, sm_100a, sm_80
                registers=kernel.registers,
                stack_bytes=kernel.stack_size,
                local_bytes=kernel.local_size or kernel.stack_size,
                lds_static=kernel.static_shared,
                const0_bytes=kernel.const0_size,
                code_size=kernel.code_size,
                max_workgroup_size=(kernel.max_threads or kernel.req_threads or (None,))[0],
                wavefront_size=32,
                occupancy_unit="warps/SM",  # also where the figure is unknown (a problem says why)
                co_metadata=json.dumps(_co_metadata(cubin, kernel), sort_keys=True),
            )
            if meta.arch is not None and nv_occupancy.arch_number(meta.arch) != cubin.arch:
                add_problem(out, cubin_file, "target", f"the JSON names {meta.arch}, the cubin {cubin.arch_name}")
            try:
                warps, limiter, to_cliff, to_gain = kernel_occupancy(cubin, kernel, meta)
                row.update(
                    occupancy=warps,
                    occupancy_limiter=limiter,
                    registers_to_cliff=to_cliff,
                    registers_to_gain=to_gain,
                )
            except KdbError as exc:
                add_problem(out, cubin_file, "occupancy", str(exc))
        except ParseError as exc:
            add_problem(out, cubin_file, "cubin", str(exc))
            kernel = None
    ptx_file = first_file(files, "ptx", meta.name)
    if ptx_file is not None:
        try:
            listing = parse_ptx(text_of(ptx_file))
            fn = next(
                (f for f in listing.functions if f.name == meta.name and f.is_entry),
                next((f for f in listing.functions if f.is_entry), None),
            )
            if fn is None:
                raise ParseError("no .entry function in the PTX")
            row.update(
                ptx_instr_count=fn.total,
                spill_count=sum(n for op, n in fn.opcodes.items() if op.startswith("st.local")),
                reload_count=sum(n for op, n in fn.opcodes.items() if op.startswith("ld.local")),
            )
            add_mix(out, folder_digest, "ptx", ((op, opcode_group(op), n) for op, n in sorted(fn.opcodes.items())))
            add_source_lines(out, folder_digest, "ptx", fn.lines)
            row.update(instr_source="ptx", instr_count=fn.total)
            # local memory (ld.local/st.local) is what PTX spills to: the "scratch" of the loop columns
            loops = LoopFacts("ptx", fn.loops, fn.loop_mix, fn.groups["local"], "local")
            record_loops(out, row, ptx_file, folder_digest, loops)
        except ParseError as exc:
            add_problem(out, ptx_file, "ptx", str(exc))
    if cubin_file is not None and kernel is not None:
        if options.sass:
            # Disassembled later, with other folders' kernels, by kdb.analysis.folder.analyze_folders.
            out.sass = SassRequest(cubin_file.rel, cubin.raw_arch, kernel.code)
        else:
            row["instr_note"] = "no SASS: skipped (--no-sass)"


def _co_metadata(cubin: Cubin, kernel: CubinKernel) -> dict[str, Any]:
    """The kernel's .nv.info attributes, and what the cubin says of its target and assembler."""
    out: dict[str, Any] = {a.name: a.value for a in kernel.attributes}
    out.update({a.name: a.value for a in cubin.compat})
    out.update(
        cubin_arch=cubin.arch_name,
        cubin_virtual_arch=f"sm_{cubin.virtual_arch}" if cubin.virtual_arch else None,
        cubin_abi_version=cubin.abi_version,
    )
    if cubin.tool is not None:
        out.update(assembler=cubin.tool, assembler_version=cubin.tool_version, assembler_arguments=cubin.tool_arguments)
    return out


def _attribute(kernel: CubinKernel, name: str) -> int | None:
    return next((a.value for a in kernel.attributes if a.name == name), None)


def kernel_occupancy(cubin: Cubin, kernel: CubinKernel, meta: KernelMeta) -> tuple[int, str, int, int | None]:
    """(warps per SM, limiter, registers_to_cliff, registers_to_gain) from NVIDIA's calculator
    (kdb.analysis.nvidia.occupancy: `occupancy`, `register_cliffs`); raises UsageError with the reason when the
    figure cannot be known.

    The calculator takes two inputs a cubin states but ``cudaFuncAttributes`` does not carry: block barriers
    (``EIATTR_NUM_BARRIERS``, or sh_flags bits 26:20 of ``.text.<kernel>``) and virtual resources
    (``cudaOccFuncAttributes.virtualResourceCount``, limited to 128 per SM on compute capability 10-12; ptxas
    13.4 writes ``EIATTR_VRC_CTA_INIT_COUNT`` = 128 into every tcgen05 kernel). Whether the driver charges
    these attributes could not be measured (no Blackwell GPU), so the occupancy is computed both ways, with
    the calculator's defaults for a ``cudaFuncAttributes`` (one barrier, no virtual resource) and with the
    cubin's declarations, and is recorded only when both agree. The register distances are computed both
    ways too: where the occupancy agrees, more registers lose a block at the same count either way (barriers
    and virtual resources do not depend on registers); fewer registers may gain a block one way only (the
    other resource binding as well), and registers_to_gain is then None.
    """
    num_warps = meta.num_warps
    if num_warps is None:
        bound = kernel.req_threads or kernel.max_threads
        if bound is None or bound[0] % 32:
            raise UsageError("no num_warps in the JSON and no launch bound in the cubin")
        num_warps = bound[0] // 32
    if meta.shared is None:
        raise UsageError("no 'shared' (dynamic shared memory) in the JSON")
    shape = LaunchShape(cubin.arch, num_warps, kernel.registers, kernel.static_shared, meta.shared)
    warps, blocks, limiter = nv_occupancy.occupancy(shape)
    # ptxas 13 declares named barriers in EIATTR_NUM_BARRIERS, ptxas 12 in the .text section's sh_flags
    barriers = _attribute(kernel, "EIATTR_NUM_BARRIERS") or kernel.barriers
    vrc = _attribute(kernel, "EIATTR_VRC_CTA_INIT_COUNT") or 0
    declared = nv_occupancy.FuncAttributes(barriers, vrc)
    d_warps, d_blocks, d_limiter = nv_occupancy.occupancy(shape, declared)
    if (d_warps, d_limiter) != (warps, limiter):
        raise UsageError(
            f"{cubin.arch_name}: {blocks} blocks/SM ({limiter}) by the calculator's defaults, {d_blocks} ({d_limiter}) "
            f"if the driver charges the cubin's EIATTR_NUM_BARRIERS={barriers} and EIATTR_VRC_CTA_INIT_COUNT={vrc}; "
            "not measured on this architecture"
        )
    to_cliff, to_gain = nv_occupancy.register_cliffs(shape)
    d_cliff, d_gain = nv_occupancy.register_cliffs(shape, declared)
    if d_cliff != to_cliff:  # cannot happen where the occupancy agrees (see above); never recorded half-known
        raise UsageError(f"{cubin.arch_name}: {to_cliff} or {d_cliff} registers to the next occupancy cliff")
    return warps, limiter, to_cliff, to_gain if d_gain == to_gain else None


def apply_sass(out: FolderAnalysis, row: dict[str, Any], folder_digest: str, result: nvtools.SassResult) -> None:
    """Record a kernel's SASS mix (it becomes the instr_source), or why it has none (``instr_note``)."""
    if result.counts is None:
        row["instr_note"] = f"no SASS: {result.reason}"
        if result.error and out.sass is not None:
            out.problems.append((out.sass.path, "sass", result.reason or "nvdisasm failed"))
        return
    row.update(instr_source="sass", instr_count=sum(result.counts.values()), instr_note=None)
    add_mix(out, folder_digest, "sass", ((op, nvtools.sass_group(op), n) for op, n in sorted(result.counts.items())))
    # The loop facts follow the instr_source: the PTX ones give way to the SASS ones (LDL/STL are its "scratch").
    clear_loops(out, row, "ptx")
    if result.loops is not None:
        local = sum(n for op, n in result.counts.items() if nvtools.sass_group(op) == "local")
        cubin_file = FolderFile(out.sass.path, "cubin", b"") if out.sass is not None else None
        record_loops(
            out, row, cubin_file, folder_digest, LoopFacts("sass", result.loops, result.loop_mix, local, "local")
        )
