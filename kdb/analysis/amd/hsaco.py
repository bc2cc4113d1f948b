"""AMD code objects (HSACO): target, per-kernel metadata note and kernel descriptors.

Layout facts: shared/reference/amd-code-objects.md (checked against LLVM 22's llvm-readelf/objdump).
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from typing import Any

import msgpack

from kdb.analysis import elf64
from kdb.analysis.amd import descriptor as kd
from kdb.analysis.amd.occupancy import ARCH_BY_MACH, arch_spec, processor_name
from kdb.errors import ParseError

EM_AMDGPU = 224
ELFOSABI_AMDGPU_HSA = 64
NT_AMDGPU_METADATA = 32
# e_ident[EI_ABIVERSION] -> code-object version, for OS ABI AMDGPU_HSA.
CODE_OBJECT_VERSIONS = {1: 3, 2: 4, 3: 5, 4: 6}
# gfx10-3-generic, gfx9-4-generic, gfx11-generic
GENERIC_NAME_RE = re.compile(r"^gfx(\d{1,2})-")
# gfx600..gfx950/gfx90a: one digit of generation; gfx1010..gfx1251: two
PROCESSOR_DIGITS_RE = re.compile(r"^gfx(\d{1,2}?)[0-9a-f]{2}$")
# Real notes are a few KB per kernel; refuse anything that would make msgpack build huge objects.
MAX_NOTE_BYTES = 64 * 1024 * 1024
MAX_JSON_DEPTH = 64

# Errors struct and msgpack raise on malformed input; all become ParseError at one place.
_LIBRARY_ERRORS: tuple[type[BaseException], ...] = (
    struct.error,
    ValueError,
    KeyError,
    IndexError,
    TypeError,
    AttributeError,
    OverflowError,
    ZeroDivisionError,
    UnicodeDecodeError,
    RecursionError,
    EOFError,
    msgpack.exceptions.UnpackException,
)


@dataclass(frozen=True)
class KernelObject:
    name: str
    symbol: str  # the descriptor symbol, `<name>.kd`
    metadata: dict[str, Any]  # the whole per-kernel msgpack map, JSON-safe
    vgpr_count: int  # total allocated, AGPRs folded in on gfx90a+
    agpr_count: int | None  # only on matrix-core targets
    sgpr_count: int  # reserved VCC/flat-scratch/XNACK included
    vgpr_spill_count: int
    sgpr_spill_count: int
    group_segment_fixed_size: int  # static LDS; 0 for Triton (its LDS is dynamic)
    private_segment_fixed_size: int  # scratch bytes per work-item
    wavefront_size: int
    max_flat_workgroup_size: int
    kernarg_segment_size: int
    uses_dynamic_stack: bool
    # Kernel descriptor (raw fields, then derived counts)
    granulated_vgpr: int
    granulated_sgpr: int
    accum_offset: int | None  # raw ACCUM_OFFSET field, gfx90a+ only
    wgp_mode: bool | None  # gfx10+ only
    wave32: bool
    private_segment_enabled: bool
    user_sgpr_count: int
    entry_offset: int  # signed, from the descriptor to the code
    descriptor_vgprs: int | None  # rounded-up VGPR(+AGPR) count encoded in the descriptor; None: granule unknown
    descriptor_arch_vgprs: int | None  # architected VGPRs; None on gfx908 (descriptor holds max(VGPR, AGPR))
    descriptor_sgprs: int | None  # gfx6-9 only; gfx10+ writes 0 there
    code_offset: int  # file offset of the first instruction
    code_size: int  # bytes, from the STT_FUNC symbol


@dataclass(frozen=True)
class CodeObject:
    # The processor as the code object names it: its metadata note's `amdhsa.target`, else (a last resort) the
    # ELF e_flags machine number when processors.json knows it, else None (never invented).
    arch: str | None
    arch_source: str | None  # 'amdhsa.target', 'e_flags' or None
    flags_arch: str | None  # what e_flags alone names (None: a machine number the table does not know)
    mach: int
    xnack: str  # 'unsupported' / 'any' / 'off' / 'on'
    sramecc: str
    code_object_version: int | None
    target: str | None  # `amdhsa.target` from the note, e.g. 'amdgcn-amd-amdhsa--gfx942'
    kernels: list[KernelObject]


def parse_hsaco(data: bytes) -> CodeObject:
    """Parse an AMDGPU code object. Raises ParseError for anything that is not a readable v3+ HSACO."""
    try:
        return _parse(bytes(data))
    except ParseError:
        raise
    except _LIBRARY_ERRORS as exc:
        raise ParseError(f"malformed code object: {type(exc).__name__}: {_one_line(exc)}") from exc


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:200]


def _parse(data: bytes) -> CodeObject:
    hdr = elf64.header(data)
    if hdr.machine != EM_AMDGPU:
        raise ParseError(f"not an AMDGPU ELF (e_machine {hdr.machine})")
    if hdr.os_abi != ELFOSABI_AMDGPU_HSA:
        raise ParseError(f"OS ABI {hdr.os_abi} is not AMDGPU HSA")
    version = CODE_OBJECT_VERSIONS.get(hdr.abi_version)
    flags = hdr.flags
    mach = kd.EF_AMDGPU_MACH.get(flags)
    flags_arch = ARCH_BY_MACH.get(mach)
    if version is not None and version >= 4:
        xnack = kd.FEATURE_STATES_V4[kd.EF_AMDGPU_FEATURE_XNACK_V4.get(flags)]
        sramecc = kd.FEATURE_STATES_V4[kd.EF_AMDGPU_FEATURE_SRAMECC_V4.get(flags)]
    else:
        xnack = "on" if kd.EF_AMDGPU_FEATURE_XNACK_V3.is_set(flags) else "off"
        sramecc = "on" if kd.EF_AMDGPU_FEATURE_SRAMECC_V3.is_set(flags) else "off"

    sections = elf64.sections(data, hdr)
    note = _metadata_note(data, sections)
    target = note.get("amdhsa.target")
    target = target if isinstance(target, str) else None
    note_arch = processor_name(target)
    arch, source = (note_arch, "amdhsa.target") if note_arch else (flags_arch, "e_flags" if flags_arch else None)
    kernels_meta = note.get("amdhsa.kernels")
    if not isinstance(kernels_meta, list):
        raise ParseError("metadata note has no amdhsa.kernels list")
    symbols = _symbols(data, sections)
    kernels = [_kernel(meta, arch, symbols, sections, data) for meta in kernels_meta]
    return CodeObject(arch, source, flags_arch, mach, xnack, sramecc, version, target, kernels)


def _metadata_note(data: bytes, sections: list[elf64.Section]) -> dict[str, Any]:
    for sec in sections:
        if sec.type != elf64.SHT_NOTE:
            continue
        body = elf64.section_data(data, sec)
        records, stop = elf64.notes(body)
        if len(body) - stop >= elf64.NOTE_HEADER_SIZE:  # a tail too short for a note header is padding
            raise ParseError("note record runs past its section")
        for note in records:
            if note.owner == b"AMDGPU" and note.type == NT_AMDGPU_METADATA:
                if len(note.desc) > MAX_NOTE_BYTES:
                    raise ParseError("metadata note too large")
                decoded = msgpack.unpackb(note.desc, raw=False, strict_map_key=False)
                if not isinstance(decoded, dict):
                    raise ParseError("metadata note is not a map")
                return _json_safe(decoded, 0)
    raise ParseError("no AMDGPU metadata note (code-object v2 or not a kernel object)")


def _json_safe(value: Any, depth: int) -> Any:
    if depth > MAX_JSON_DEPTH:
        raise ParseError("metadata nested too deeply")
    if isinstance(value, dict):
        return {str(_json_safe(k, depth + 1)): _json_safe(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v, depth + 1) for v in value]
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return repr(value)  # msgpack ExtType and the like: keep something readable


def _symbols(data: bytes, sections: list[elf64.Section]) -> dict[str, elf64.Symbol]:
    """Functions and objects by name (the kernels' code and their `.kd` descriptors)."""
    by_name = {s.name: s for s in sections}
    table = by_name.get(".symtab") or by_name.get(".dynsym")
    if table is None or table.type not in (elf64.SHT_SYMTAB, elf64.SHT_DYNSYM):
        raise ParseError("no symbol table")
    return {
        sym.name: sym
        for sym in elf64.symbols(data, table, sections)
        # SHN_UNDEF/SHN_ABS: the `.num_vgpr`-style helpers
        if sym.shndx not in elf64.NO_SECTION and sym.type in (elf64.STT_FUNC, elf64.STT_OBJECT) and sym.name
    }


def _file_offset(sym: elf64.Symbol, sections: list[elf64.Section], file_size: int, what: str) -> int:
    if not 0 <= sym.shndx < len(sections):
        raise ParseError(f"{what}: symbol in section {sym.shndx} which does not exist")
    sec = sections[sym.shndx]
    offset = sym.value - sec.addr + sec.offset
    if (
        sec.nobits
        or sym.value < sec.addr
        or sym.value + sym.size > sec.addr + sec.size
        or offset + sym.size > file_size
    ):
        raise ParseError(f"{what}: symbol lies outside its section")
    return offset


def _kernel(
    meta: Any, arch: str | None, symbols: dict[str, elf64.Symbol], sections: list[elf64.Section], data: bytes
) -> KernelObject:
    if not isinstance(meta, dict):
        raise ParseError("amdhsa.kernels entry is not a map")
    name = meta.get(".name")
    if not isinstance(name, str):
        raise ParseError("kernel without .name")
    kd_name = meta.get(".symbol")
    if not isinstance(kd_name, str):
        kd_name = name + ".kd"
    kd_sym = symbols.get(kd_name)
    if kd_sym is None or kd_sym.type != elf64.STT_OBJECT:
        raise ParseError(f"kernel {name}: no descriptor symbol {kd_name}")
    func_sym = symbols.get(name)
    if func_sym is None or func_sym.type != elf64.STT_FUNC:
        raise ParseError(f"kernel {name}: no function symbol")
    if kd_sym.size and kd_sym.size < kd.KERNEL_DESCRIPTOR_SIZE:
        raise ParseError(f"kernel {name}: descriptor is {kd_sym.size} bytes")
    kd_offset = _file_offset(kd_sym, sections, len(data), f"kernel {name} descriptor")
    if kd_offset + kd.KERNEL_DESCRIPTOR_SIZE > len(data):
        raise ParseError(f"kernel {name}: descriptor runs past the end of the file")
    code_offset = _file_offset(func_sym, sections, len(data), f"kernel {name} code")

    desc = kd.decode(data, kd_offset)
    rsrc1, rsrc2 = desc.compute_pgm_rsrc1, desc.compute_pgm_rsrc2

    spec = arch_spec(arch)
    generation = spec.generation if spec else _generation_from_name(arch)
    unified = bool(spec and spec.unified_agprs)
    wave32 = kd.ENABLE_WAVEFRONT_SIZE32.is_set(desc.kernel_code_properties)
    granulated_vgpr = kd.GRANULATED_WORKITEM_VGPR_COUNT.get(rsrc1)
    granulated_sgpr = kd.GRANULATED_WAVEFRONT_SGPR_COUNT.get(rsrc1)
    # Encoding granules probed from llvm-mc (processors.json): 4 or 8 VGPRs, 16 on gfx1250; unknown processor: None
    vgpr_unit = spec.descriptor_vgpr_granule(32 if wave32 else 64) if spec else None
    descriptor_vgprs = (granulated_vgpr + 1) * vgpr_unit if vgpr_unit else None
    sgpr_unit = spec.descriptor_sgpr_granule if spec else None
    accum_offset = kd.ACCUM_OFFSET.get(desc.compute_pgm_rsrc3) if unified else None
    if accum_offset is not None:
        descriptor_arch_vgprs: int | None = (accum_offset + 1) * 4
    elif spec is not None and spec.has_agprs:
        descriptor_arch_vgprs = None  # gfx908: the field encodes max(VGPR, AGPR)
    else:
        descriptor_arch_vgprs = descriptor_vgprs

    return KernelObject(
        name=name,
        symbol=kd_name,
        metadata=meta,
        vgpr_count=_int(meta, ".vgpr_count", name),
        agpr_count=_opt_int(meta, ".agpr_count", name),
        sgpr_count=_int(meta, ".sgpr_count", name),
        vgpr_spill_count=_opt_int(meta, ".vgpr_spill_count", name) or 0,
        sgpr_spill_count=_opt_int(meta, ".sgpr_spill_count", name) or 0,
        group_segment_fixed_size=_int(meta, ".group_segment_fixed_size", name),
        private_segment_fixed_size=_int(meta, ".private_segment_fixed_size", name),
        wavefront_size=_int(meta, ".wavefront_size", name),
        max_flat_workgroup_size=_int(meta, ".max_flat_workgroup_size", name),
        kernarg_segment_size=_int(meta, ".kernarg_segment_size", name),
        uses_dynamic_stack=bool(meta.get(".uses_dynamic_stack", False)),
        granulated_vgpr=granulated_vgpr,
        granulated_sgpr=granulated_sgpr,
        accum_offset=accum_offset,
        wgp_mode=kd.WGP_MODE.is_set(rsrc1) if generation is not None and generation >= 10 else None,
        wave32=wave32,
        private_segment_enabled=kd.ENABLE_PRIVATE_SEGMENT.is_set(rsrc2),
        user_sgpr_count=kd.USER_SGPR_COUNT.get(rsrc2),
        entry_offset=desc.kernel_code_entry_byte_offset,
        descriptor_vgprs=descriptor_vgprs,
        descriptor_arch_vgprs=descriptor_arch_vgprs,
        descriptor_sgprs=(granulated_sgpr + 1) * sgpr_unit if sgpr_unit else None,
        code_offset=code_offset,
        code_size=func_sym.size,
    )


def _generation_from_name(arch: str | None) -> int | None:
    # Processors newer than processors.json: 'gfx1300' -> 13, 'gfx950' -> 9, 'gfx13-generic' -> 13.
    match = GENERIC_NAME_RE.match(arch or "") or PROCESSOR_DIGITS_RE.match(arch or "")
    return int(match.group(1)) if match else None


def _int(meta: dict[str, Any], key: str, kernel: str) -> int:
    value = _opt_int(meta, key, kernel)
    if value is None:
        raise ParseError(f"kernel {kernel}: {key} missing")
    return value


def _opt_int(meta: dict[str, Any], key: str, kernel: str) -> int | None:
    value = meta.get(key)
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise ParseError(f"kernel {kernel}: {key} is not an integer")
