"""NVIDIA cubin (CUDA ELF) parser: architecture and per-kernel resource usage.

Pure: bytes in, frozen dataclasses out. Every malformed input raises ``kdb.errors.ParseError``.

Where each figure lives in a cubin written by ptxas (checked against ``cuobjdump -elf`` and
``cuobjdump --dump-resource-usage`` on Triton 3.4/3.6 caches for sm80..sm120):

- architecture: ``e_flags``. ELF ABI version 7 (CUDA <= 12.x for sm < 100) keeps the SM number in
  bits 7:0, the virtual (PTX) SM in bits 23:16, and the ``a`` (arch-specific) variant in bit 11
  (0x800). ABI version 8 (Blackwell, and everything CUDA 13 writes, sm_90 included) moves the SM to
  bits 15:8; the ``a`` variant is then the ``.nv.compat`` section's ``EICOMPAT_ATTR_CUDA_ACCELERATOR_TARGET``
  (= 1), which is what cuobjdump 13.5 names the cubin by (``sm=100a``), whatever e_flags bit 3 (LLVM's
  ``EF_CUDA_ACCELERATORS``) says: ptxas 13.4 writes 0x09006402 for sm_100a; the virtual SM is the
  ``.note.nv.cuinfo`` note's (e_flags bits 23:16 are 0 there). ``.note.nv.tkinfo`` names the assembler
  and its command line (``ptxas-blackwell``, ``-arch sm_100a``).
- registers per thread: ``EIATTR_REGCOUNT`` in the global ``.nv.info`` section (keyed by the
  function's symbol index), else bits 31:24 of ``sh_info`` of ``.text.<name>``.
- stack/frame per thread: ``EIATTR_FRAME_SIZE`` / ``EIATTR_MIN_STACK_SIZE`` /
  ``EIATTR_MAX_STACK_SIZE`` in ``.nv.info``; register spills land in the frame.
- static shared memory: size of the NOBITS section ``.nv.shared.<name>`` (Triton's shared memory
  is dynamic, so this is normally 0; the JSON ``shared`` is the real footprint).
- constant bank 0: size of ``.nv.constant0.<name>`` (kernel parameters start at 0x160 / 0x210).
- per-kernel attributes: ``.nv.info.<name>``, a sequence of 4-byte-aligned records
  ``fmt:u8 attr:u8`` then, by format, nothing (NVAL, 2 pad bytes), a byte (BVAL), a u16 (HVAL), or
  ``size:u16`` + payload (SVAL).
"""

from __future__ import annotations

import io
import struct
from dataclasses import dataclass, field

from elftools.common.exceptions import ELFError, ELFParseError, ELFRelocationError
from elftools.construct.core import ConstructError
from elftools.elf.elffile import ELFFile
from elftools.elf.sections import SymbolTableSection

from kdb.errors import ParseError

EM_CUDA = 190
# st_other bit 4 marks a kernel entry point (``.entry`` in PTX) as opposed to a ``.func``.
STO_CUDA_ENTRY = 0x10

# EIFMT: how an ``.nv.info`` record carries its value.
EIFMT_NVAL = 1
EIFMT_BVAL = 2
EIFMT_HVAL = 3
EIFMT_SVAL = 4

# EIATTR numbering as cuobjdump names them (cuobjdump -elf prints "Attribute: EIATTR_...").
# The corpus test checks every id we decode against cuobjdump's own names.
EIATTR_NAMES: dict[int, str] = {
    0x00: "EIATTR_ERROR",
    0x01: "EIATTR_PAD",
    0x02: "EIATTR_IMAGE_SLOT",
    0x03: "EIATTR_JUMPTABLE_RELOCS",
    0x04: "EIATTR_CTAIDZ_USED",
    0x05: "EIATTR_MAX_THREADS",
    0x06: "EIATTR_IMAGE_OFFSET",
    0x07: "EIATTR_IMAGE_SIZE",
    0x08: "EIATTR_TEXTURE_NORMALIZED",
    0x09: "EIATTR_SAMPLER_INIT",
    0x0A: "EIATTR_PARAM_CBANK",
    0x0B: "EIATTR_SMEM_PARAM_OFFSETS",
    0x0C: "EIATTR_CBANK_PARAM_OFFSETS",
    0x0D: "EIATTR_SYNC_STACK",
    0x0E: "EIATTR_TEXID_SAMPID_MAP",
    0x0F: "EIATTR_EXTERNS",
    0x10: "EIATTR_REQNTID",
    0x11: "EIATTR_FRAME_SIZE",
    0x12: "EIATTR_MIN_STACK_SIZE",
    0x13: "EIATTR_SAMPLER_FORCE_UNNORMALIZED",
    0x14: "EIATTR_BINDLESS_IMAGE_OFFSETS",
    0x15: "EIATTR_BINDLESS_TEXTURE_BANK",
    0x16: "EIATTR_BINDLESS_SURFACE_BANK",
    0x17: "EIATTR_KPARAM_INFO",
    0x18: "EIATTR_SMEM_PARAM_SIZE",
    0x19: "EIATTR_CBANK_PARAM_SIZE",
    0x1A: "EIATTR_QUERY_NUMATTRIB",
    0x1B: "EIATTR_MAXREG_COUNT",
    0x1C: "EIATTR_EXIT_INSTR_OFFSETS",
    0x1D: "EIATTR_S2RCTAID_INSTR_OFFSETS",
    0x1E: "EIATTR_CRS_STACK_SIZE",
    0x1F: "EIATTR_NEED_CNP_WRAPPER",
    0x20: "EIATTR_NEED_CNP_PATCH",
    0x21: "EIATTR_EXPLICIT_CACHING",
    0x22: "EIATTR_ISTYPEP_USED",
    0x23: "EIATTR_MAX_STACK_SIZE",
    0x24: "EIATTR_SUQ_USED",
    0x25: "EIATTR_LD_CACHEMOD_INSTR_OFFSETS",
    0x26: "EIATTR_LOAD_CACHE_REQUEST",
    0x27: "EIATTR_ATOM_SYS_INSTR_OFFSETS",
    0x28: "EIATTR_COOP_GROUP_INSTR_OFFSETS",
    0x29: "EIATTR_COOP_GROUP_MASK_REGIDS",
    0x2A: "EIATTR_SW1850030_WAR",
    0x2B: "EIATTR_WMMA_USED",
    0x2C: "EIATTR_HAS_PRE_V10_OBJECT",
    0x2D: "EIATTR_ATOMF16_EMUL_INSTR_OFFSETS",
    0x2E: "EIATTR_ATOM16_EMUL_INSTR_REG_MAP",
    0x2F: "EIATTR_REGCOUNT",
    0x30: "EIATTR_SW2393858_WAR",
    0x31: "EIATTR_INT_WARP_WIDE_INSTR_OFFSETS",
    0x32: "EIATTR_SHARED_SCRATCH",
    0x33: "EIATTR_STATISTICS",
    0x34: "EIATTR_INDIRECT_BRANCH_TARGETS",
    0x35: "EIATTR_SW2861232_WAR",
    0x36: "EIATTR_SW_WAR",
    0x37: "EIATTR_CUDA_API_VERSION",
    0x38: "EIATTR_NUM_MBARRIERS",
    0x39: "EIATTR_MBARRIER_INSTR_OFFSETS",
    0x3A: "EIATTR_COROUTINE_RESUME_ID_OFFSETS",
    0x3B: "EIATTR_SAM_REGION_STACK_SIZE",
    0x3C: "EIATTR_PER_REG_TARGET_PERF_STATS",
    0x3D: "EIATTR_CTA_PER_CLUSTER",
    0x3E: "EIATTR_EXPLICIT_CLUSTER",
    0x3F: "EIATTR_MAX_CLUSTER_RANK",
    0x40: "EIATTR_INSTR_REG_MAP",
    0x41: "EIATTR_RESERVED_SMEM_USED",
    0x42: "EIATTR_RESERVED_SMEM_0_SIZE",
    0x43: "EIATTR_UCODE_SECTION_DATA",
    0x44: "EIATTR_UNUSED_LOAD_BYTE_OFFSET",
    0x45: "EIATTR_KPARAM_INFO_V2",
    0x46: "EIATTR_SYSCALL_OFFSETS",
    0x47: "EIATTR_SW_WAR_MEMBAR_SYS_INSTR_OFFSETS",
    0x48: "EIATTR_GRAPHICS_GLOBAL_CBANK",
    0x49: "EIATTR_SHADER_TYPE",
    0x4A: "EIATTR_VRC_CTA_INIT_COUNT",
    0x4B: "EIATTR_TOOLS_PATCH_FUNC",
    0x4C: "EIATTR_NUM_BARRIERS",
    0x4D: "EIATTR_TEXMODE_INDEPENDENT",
    0x4E: "EIATTR_PERF_STATISTICS",
    # 0x00 and 0x4F-0x6D as cuobjdump 13.5 names them (each id written into a real sm_100a cubin's
    # .nv.info.<kernel> and read back with `cuobjdump -elf`); 0x56, 0x5A, 0x5F, 0x60, 0x63, 0x67 it calls
    # "unknown Attribute" (ptxas 13.4 writes 0x5F).
    0x4F: "EIATTR_AT_ENTRY_FRAGMENTS",
    0x50: "EIATTR_SPARSE_MMA_MASK",
    0x51: "EIATTR_TCGEN05_1CTA_USED",
    0x52: "EIATTR_TCGEN05_2CTA_USED",
    0x53: "EIATTR_GEN_ERRBAR_AT_EXIT",
    0x54: "EIATTR_REG_RECONFIG",
    0x55: "EIATTR_ANNOTATIONS",
    0x57: "EIATTR_STACK_CANARY_TRAP_OFFSETS",
    0x58: "EIATTR_STUB_FUNCTION_KIND",
    0x59: "EIATTR_LOCAL_CTA_ASYNC_STORE_OFFSETS",
    0x5B: "EIATTR_BLOCKS_ARE_CLUSTERS",
    0x5C: "EIATTR_SANITIZE",
    0x5D: "EIATTR_SYSCALLS_FALLBACK",
    0x5E: "EIATTR_CUDA_REQ",
    0x61: "EIATTR_RTCORE_ENTRY",
    0x62: "EIATTR_CLUSTER_LAUNCH_CONTROL_USED",
    0x64: "EIATTR_MIN_PER_CTA_MEMORY_SIZE",
    0x65: "EIATTR_IGNOREOOB_CP_ASYNC_BULK_INSTR_OFFSETS",
    0x66: "EIATTR_LANGUAGE",
    0x68: "EIATTR_GRID_ATTRIBUTES",
    0x69: "EIATTR_STACK_OFFSET",
    0x6A: "EIATTR_RT_LIVESTATE_SASS_MAP",
    0x6B: "EIATTR_NVSAL_SW_WAR",
    0x6C: "EIATTR_INSTR_OFFSETS",
    0x6D: "EIATTR_PREEXIT_USED",
}
_ATTR_ID = {name: i for i, name in EIATTR_NAMES.items()}
EIATTR_MAX_THREADS = _ATTR_ID["EIATTR_MAX_THREADS"]
EIATTR_REQNTID = _ATTR_ID["EIATTR_REQNTID"]
EIATTR_FRAME_SIZE = _ATTR_ID["EIATTR_FRAME_SIZE"]
EIATTR_MIN_STACK_SIZE = _ATTR_ID["EIATTR_MIN_STACK_SIZE"]
EIATTR_MAX_STACK_SIZE = _ATTR_ID["EIATTR_MAX_STACK_SIZE"]
EIATTR_CRS_STACK_SIZE = _ATTR_ID["EIATTR_CRS_STACK_SIZE"]
EIATTR_REGCOUNT = _ATTR_ID["EIATTR_REGCOUNT"]
EIATTR_MAXREG_COUNT = _ATTR_ID["EIATTR_MAXREG_COUNT"]
EIATTR_NUM_MBARRIERS = _ATTR_ID["EIATTR_NUM_MBARRIERS"]
EIATTR_CUDA_API_VERSION = _ATTR_ID["EIATTR_CUDA_API_VERSION"]
EIATTR_NUM_BARRIERS = _ATTR_ID["EIATTR_NUM_BARRIERS"]
EIATTR_VRC_CTA_INIT_COUNT = _ATTR_ID["EIATTR_VRC_CTA_INIT_COUNT"]

# `.nv.compat` (SHT 0x70000086, CUDA_COMPAT_INFO) records, same layout as .nv.info; names as cuobjdump 13.5
# prints them for a ptxas 13.4 cubin, in file order.
EICOMPAT_NAMES: dict[int, str] = {
    0x02: "EICOMPAT_ATTR_ISA_CLASS",
    0x03: "EICOMPAT_ATTR_INST_TENSORMAP_V1",
    0x05: "EICOMPAT_ATTR_INST_TCGEN05_MMA",
    0x09: "EICOMPAT_ATTR_CUDA_ACCELERATOR_TARGET",
    0x0B: "EICOMPAT_ATTR_CAN_FASTPATH_FINALIZE",
    0x0C: "EICOMPAT_ATTR_CUDA_INTERNAL_TARGET",
    0x0E: "EICOMPAT_ATTR_FINALIZER_VERSION",
}
EICOMPAT_CUDA_ACCELERATOR_TARGET = 0x09
# Owner of the .note.nv.* notes and their types (cuobjdump: "NVIDIA CUDA Information" / "Toolkit Information").
NV_NOTE_OWNER = b"NVIDIA Corp"
NT_CUDA_INFO = 1000
NT_CUDA_TKINFO = 2000
# Attributes of the global ``.nv.info`` whose SVAL payload is ``symbol index:u32, value:u32``.
_PER_FUNCTION_GLOBAL = frozenset(
    {EIATTR_REGCOUNT, EIATTR_FRAME_SIZE, EIATTR_MIN_STACK_SIZE, EIATTR_MAX_STACK_SIZE, EIATTR_CRS_STACK_SIZE}
)

# The exceptions pyelftools and struct can raise on a damaged file; all become ParseError.
_ELF_ERRORS = (
    ELFError,
    ELFParseError,
    ELFRelocationError,
    ConstructError,
    struct.error,
    IndexError,
    KeyError,
    ValueError,
    TypeError,
    AttributeError,
    AssertionError,
    ZeroDivisionError,
    OverflowError,
    UnicodeDecodeError,
    RecursionError,
)


@dataclass(frozen=True)
class NvInfoAttr:
    """One ``.nv.info`` record. ``value`` is the BVAL/HVAL value, or for an SVAL of 4 bytes its u32."""

    attr: int
    name: str  # EIATTR_* name, or "EIATTR_UNKNOWN_0x.." for ids newer than the table
    fmt: int
    value: int | None
    payload: bytes  # SVAL payload (empty for other formats)


@dataclass(frozen=True)
class CubinKernel:
    name: str
    is_entry: bool  # a kernel (.entry) rather than a device function (.func)
    registers: int  # per thread
    frame_size: int  # bytes per thread: local variables and register spills
    min_stack_size: int  # bytes per thread
    max_stack_size: int | None  # bytes per thread, call-graph depth included; only when present
    stack_size: int  # what cuobjdump reports as STACK: max(frame, min stack, max stack)
    local_size: int  # size of .nv.local.<name> (cuobjdump LOCAL); 0 for ptxas output
    static_shared: int  # bytes, .nv.shared.<name>
    const0_size: int  # bytes, .nv.constant0.<name>
    code_size: int  # bytes of SASS in .text.<name>
    barriers: int  # named barriers used: sh_flags bits 26:20 of .text.<name>
    max_threads: tuple[int, int, int] | None  # EIATTR_MAX_THREADS (.maxntid)
    req_threads: tuple[int, int, int] | None  # EIATTR_REQNTID (.reqntid)
    max_reg_count: int | None  # EIATTR_MAXREG_COUNT (.maxnreg), 0xff when unset
    num_mbarriers: int | None  # EIATTR_NUM_MBARRIERS (sm90 TMA/wgmma pipelines)
    attributes: tuple[NvInfoAttr, ...]  # .nv.info.<name>, in file order
    code: bytes = field(default=b"", repr=False, compare=False)  # the raw .text.<name> section (SASS encodings)


@dataclass(frozen=True)
class Cubin:
    arch: int  # SM number: 80, 86, 89, 90, 100, 120 ...
    arch_name: str  # cuobjdump's spelling: "sm_90a", "sm_80", "sm_100a"
    arch_specific: bool  # the "a" variant (sm_90a, sm_100a): features that run on this SM only
    virtual_arch: int | None  # PTX target SM: e_flags (ABI 7) or the .note.nv.cuinfo note (ABI 8); None if neither
    abi_version: int  # EI_ABIVERSION: 7 (old layout) or 8 (Blackwell / CUDA 13 layout)
    toolkit_version: int  # e_version, e.g. 128 for CUDA 12.8 ("toolkit=128" in cuobjdump -elf)
    kernels: tuple[CubinKernel, ...]  # sorted by name
    compat: tuple[NvInfoAttr, ...] = ()  # the .nv.compat records (ABI 8), in file order
    tool: str | None = None  # .note.nv.tkinfo: the assembler ("ptxas-blackwell")
    tool_version: str | None = None  # "Cuda compilation tools, release 13.4, V13.4.59"
    tool_arguments: str | None = None  # its command line ("-v  -lineinfo  -arch sm_100a")

    @property
    def raw_arch(self) -> str:
        """The architecture as ``nvdisasm -b`` spells it: ``SM90a``, ``SM80``."""
        return f"SM{self.arch}{'a' if self.arch_specific else ''}"


def decode_arch(e_flags: int, abi_version: int) -> tuple[int, bool, int | None]:
    """(sm, arch_specific, virtual_sm) from the ELF header.

    ABI 7: SM in bits 7:0, virtual SM in 23:16, ``a`` in bit 11 (sm_90a: 0x5a0d5a).
    ABI 8: SM in bits 15:8, ``a`` in bit 3 (sm_100a: 0x0900640a).
    """
    if abi_version >= 8:
        virtual = (e_flags >> 16) & 0xFF
        return (e_flags >> 8) & 0xFF, bool(e_flags & 0x8), virtual or None
    return e_flags & 0xFF, bool(e_flags & 0x800), ((e_flags >> 16) & 0xFF) or None


def decode_nv_info(data: bytes, names: dict[int, str] | None = None) -> tuple[NvInfoAttr, ...]:
    """Decode one ``.nv.info*`` (or ``.nv.compat``) section body. Each iteration consumes >= 4 bytes, so it ends."""
    names = EIATTR_NAMES if names is None else names
    unknown = "EIATTR_UNKNOWN_0x" if names is EIATTR_NAMES else "EICOMPAT_UNKNOWN_0x"
    out: list[NvInfoAttr] = []
    pos = 0
    n = len(data)
    while pos < n:
        if n - pos < 4:
            raise ParseError(f"truncated .nv.info record at offset {pos}")
        fmt, attr, short = struct.unpack_from("<BBH", data, pos)
        pos += 4
        name = names.get(attr, f"{unknown}{attr:02x}")
        if fmt == EIFMT_SVAL:
            end = pos + short
            if end > n:
                raise ParseError(f".nv.info record {name} overruns its section")
            payload = bytes(data[pos:end])
            value = struct.unpack("<I", payload)[0] if len(payload) == 4 else None
            out.append(NvInfoAttr(attr, name, fmt, value, payload))
            # Records stay 4-byte aligned.
            pos = (end + 3) & ~3
        elif fmt == EIFMT_NVAL:
            out.append(NvInfoAttr(attr, name, fmt, None, b""))
        elif fmt == EIFMT_BVAL:
            out.append(NvInfoAttr(attr, name, fmt, short & 0xFF, b""))
        elif fmt == EIFMT_HVAL:
            out.append(NvInfoAttr(attr, name, fmt, short, b""))
        else:
            raise ParseError(f"unknown .nv.info record format {fmt} at offset {pos - 4}")
    return tuple(out)


def decode_notes(data: bytes) -> list[tuple[bytes, int, bytes]]:
    """(owner, type, descriptor) of each ELF note in a SHT_NOTE section body (4-byte aligned fields)."""
    out = []
    pos, n = 0, len(data)
    while pos < n:
        if n - pos < 12:
            raise ParseError(f"truncated ELF note at offset {pos}")
        namesz, descsz, kind = struct.unpack_from("<III", data, pos)
        name_end = pos + 12 + namesz
        desc_at = pos + 12 + ((namesz + 3) & ~3)
        desc_end = desc_at + descsz
        if desc_end > n:
            raise ParseError(f"ELF note at offset {pos} overruns its section")
        out.append((bytes(data[pos + 12 : name_end]).rstrip(b"\0"), kind, bytes(data[desc_at:desc_end])))
        pos = desc_at + ((descsz + 3) & ~3)
    return out


def _tkinfo(desc: bytes) -> tuple[str, str, str]:
    """(tool, version, arguments) of a .note.nv.tkinfo descriptor: version:u32, 0:u32, then four u32 offsets
    (name, version, branch, arguments) into the NUL-terminated strings that follow (checked against
    cuobjdump 13.5's reading of ptxas 13.4 cubins)."""
    if len(desc) < 24:
        raise ParseError(f".note.nv.tkinfo descriptor of {len(desc)} bytes, expected at least 24")
    offsets = struct.unpack_from("<4I", desc, 8)
    strings = desc[24:]

    def at(offset: int) -> str:
        if offset >= len(strings):
            raise ParseError(f".note.nv.tkinfo string offset {offset} outside its {len(strings)} bytes")
        end = strings.find(b"\0", offset)
        return strings[offset : end if end >= 0 else len(strings)].decode("utf-8", "replace").strip()

    return at(offsets[0]), at(offsets[1]), at(offsets[3])


def _dim3(attrs: dict[int, NvInfoAttr], attr: int) -> tuple[int, int, int] | None:
    rec = attrs.get(attr)
    if rec is None:
        return None
    if len(rec.payload) != 12:
        raise ParseError(f"{rec.name} payload is {len(rec.payload)} bytes, expected 12")
    x, y, z = struct.unpack("<III", rec.payload)
    return (x, y, z)


def _check_layout(data: bytes) -> None:
    """Reject headers pyelftools would accept but then read nonsense from."""
    if len(data) < 64 or data[:4] != b"\x7fELF":
        raise ParseError("not an ELF file")
    if data[4] != 2 or data[5] != 1:
        raise ParseError("cubin is not a 64-bit little-endian ELF")
    (machine,) = struct.unpack_from("<H", data, 18)
    if machine != EM_CUDA:
        raise ParseError(f"ELF machine {machine} is not EM_CUDA (190)")
    (shoff,) = struct.unpack_from("<Q", data, 40)
    shentsize, shnum = struct.unpack_from("<HH", data, 58)
    if shnum == 0 or shentsize != 64 or shoff + shnum * 64 > len(data):
        raise ParseError("section header table missing or outside the file")
    (phoff,) = struct.unpack_from("<Q", data, 32)
    phentsize, phnum = struct.unpack_from("<HH", data, 54)
    if phnum and (phentsize != 56 or phoff + phnum * 56 > len(data)):
        raise ParseError("program header table outside the file (truncated?)")


def parse_cubin(data: bytes) -> Cubin:
    """Parse a cubin. Raises ParseError on anything that is not a well-formed CUDA ELF."""
    _check_layout(data)
    try:
        return _parse(data)
    except ParseError:
        raise
    except _ELF_ERRORS as exc:
        raise ParseError(
            f"malformed cubin: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        ) from exc


def _parse(data: bytes) -> Cubin:  # noqa: C901 (one ELF walk: sections, symbols, .nv.info per kernel)
    elf = ELFFile(io.BytesIO(data))
    hdr = elf.header
    abi_version = hdr["e_ident"]["EI_ABIVERSION"]
    if not isinstance(abi_version, int):
        raise ParseError(f"unexpected EI_ABIVERSION {abi_version!r}")
    sm, specific, virtual = decode_arch(hdr["e_flags"], abi_version)
    if sm == 0:
        raise ParseError(f"e_flags 0x{hdr['e_flags']:x} name no SM architecture")

    sections = {}
    symtab = None
    for sec in elf.iter_sections():
        if sec["sh_type"] != "SHT_NOBITS" and sec["sh_offset"] + sec["sh_size"] > len(data):
            raise ParseError(f"section {sec.name!r} extends past the end of the file (truncated?)")
        name = sec.name
        if name in sections:
            raise ParseError(f"duplicate section {name}")
        sections[name] = sec
        if sec["sh_type"] == "SHT_SYMTAB":
            symtab = sec
    if not isinstance(symtab, SymbolTableSection):
        raise ParseError("cubin has no symbol table")
    if symtab["sh_entsize"] != 24:
        raise ParseError("symbol table is malformed")

    # Global .nv.info: per-function figures keyed by symbol index.
    per_symbol: dict[int, dict[int, int]] = {}
    glob = sections.get(".nv.info")
    if glob is not None:
        for rec in decode_nv_info(glob.data()):
            if rec.attr in _PER_FUNCTION_GLOBAL and rec.fmt == EIFMT_SVAL:
                if len(rec.payload) != 8:
                    raise ParseError(f"{rec.name} payload is {len(rec.payload)} bytes, expected 8")
                sym_index, value = struct.unpack("<II", rec.payload)
                per_symbol.setdefault(sym_index, {})[rec.attr] = value

    kernels: list[CubinKernel] = []
    for index, sym in enumerate(symtab.iter_symbols()):
        if sym["st_info"]["type"] != "STT_FUNC":
            continue
        name = sym.name
        text = sections.get(f".text.{name}")
        if text is None:
            # An external (undefined) function such as vprintf has no body here.
            continue
        # pyelftools folds st_other into ELF visibility; the CUDA entry bit is read from the raw entry.
        raw_other = data[symtab["sh_offset"] + index * 24 + 5]
        is_entry = bool(raw_other & STO_CUDA_ENTRY)

        info_sec = sections.get(f".nv.info.{name}")
        attrs = decode_nv_info(info_sec.data()) if info_sec is not None else ()
        by_id: dict[int, NvInfoAttr] = {}
        for rec in attrs:
            by_id.setdefault(rec.attr, rec)
        glob_vals = per_symbol.get(index, {})

        regs = glob_vals.get(EIATTR_REGCOUNT)
        if regs is None:
            regs = (text["sh_info"] >> 24) & 0xFF
        frame = glob_vals.get(EIATTR_FRAME_SIZE, 0)
        min_stack = glob_vals.get(EIATTR_MIN_STACK_SIZE, 0)
        max_stack = glob_vals.get(EIATTR_MAX_STACK_SIZE)
        shared = sections.get(f".nv.shared.{name}")
        const0 = sections.get(f".nv.constant0.{name}")
        local_sec = sections.get(f".nv.local.{name}")
        maxreg = by_id.get(EIATTR_MAXREG_COUNT)
        mbar = by_id.get(EIATTR_NUM_MBARRIERS)
        kernels.append(
            CubinKernel(
                name=name,
                is_entry=is_entry,
                registers=regs,
                frame_size=frame,
                min_stack_size=min_stack,
                max_stack_size=max_stack,
                stack_size=max(frame, min_stack, max_stack or 0),
                local_size=local_sec["sh_size"] if local_sec is not None else 0,
                static_shared=shared["sh_size"] if shared is not None else 0,
                const0_size=const0["sh_size"] if const0 is not None else 0,
                code_size=text["sh_size"],
                barriers=(text["sh_flags"] >> 20) & 0x7F,
                max_threads=_dim3(by_id, EIATTR_MAX_THREADS),
                req_threads=_dim3(by_id, EIATTR_REQNTID),
                max_reg_count=maxreg.value if maxreg is not None else None,
                num_mbarriers=mbar.value if mbar is not None else None,
                attributes=attrs,
                code=text.data(),
            )
        )
    kernels.sort(key=lambda k: k.name)

    compat_sec = sections.get(".nv.compat")
    compat = decode_nv_info(compat_sec.data(), EICOMPAT_NAMES) if compat_sec is not None else ()
    accelerator = next((a.value for a in compat if a.attr == EICOMPAT_CUDA_ACCELERATOR_TARGET), None)
    if abi_version >= 8 and accelerator is not None:
        specific = accelerator == 1
    tool = tool_version = tool_arguments = None
    for note_name in (".note.nv.cuinfo", ".note.nv.tkinfo"):
        note_sec = sections.get(note_name)
        if note_sec is None or note_sec["sh_type"] != "SHT_NOTE":
            continue
        for owner, kind, desc in decode_notes(note_sec.data()):
            if owner != NV_NOTE_OWNER:
                continue
            if kind == NT_CUDA_INFO and len(desc) >= 4 and virtual is None:
                # version:u16, virtual SM:u16, toolkit:u32 ("CUDA Virtual SM: sm_100", "CUDA Tool Kit Version: 13.4")
                virtual = struct.unpack_from("<H", desc, 2)[0] or None
            elif kind == NT_CUDA_TKINFO:
                tool, tool_version, tool_arguments = _tkinfo(desc)
    arch_name = f"sm_{sm}{'a' if specific else ''}"
    return Cubin(
        arch=sm,
        arch_name=arch_name,
        arch_specific=specific,
        virtual_arch=virtual,
        abi_version=abi_version,
        toolkit_version=hdr["e_version"] if isinstance(hdr["e_version"], int) else 0,
        kernels=tuple(kernels),
        compat=compat,
        tool=tool,
        tool_version=tool_version,
        tool_arguments=tool_arguments,
    )
