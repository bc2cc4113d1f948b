"""``.nv.info`` records of a cubin (and ``.nv.compat``, same layout): the EIATTR/EICOMPAT names and the decoder.

A section body is a sequence of 4-byte-aligned records ``fmt:u8 attr:u8`` then, by format, nothing (NVAL,
2 pad bytes), a byte (BVAL), a u16 (HVAL), or ``size:u16`` + payload (SVAL). Pure: bytes in, records out;
malformed input raises ParseError.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from kdb.errors import ParseError

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


@dataclass(frozen=True)
class NvInfoAttr:
    """One ``.nv.info`` record. ``value`` is the BVAL/HVAL value, or for an SVAL of 4 bytes its u32."""

    attr: int
    name: str  # EIATTR_* name, or "EIATTR_UNKNOWN_0x.." for ids newer than the table
    fmt: int
    value: int | None
    payload: bytes  # SVAL payload (empty for other formats)


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
