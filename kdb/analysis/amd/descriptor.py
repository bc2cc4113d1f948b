"""The AMDHSA kernel descriptor (`<kernel>.kd`, 64 bytes) and the AMDGPU ELF e_flags, each field named once.

Names, byte offsets and bit positions as LLVM declares them (llvm/Support/AMDHSAKernelDescriptor.h,
llvm/BinaryFormat/ELF.h); layout facts in shared/reference/amd-code-objects.md. tests/test_amd_analysis.py
checks the decoded fields against what llvm-objdump prints for every sampled corpus descriptor. Pure.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from kdb.analysis.elf64 import BitField

KERNEL_DESCRIPTOR_SIZE = 64

# COMPUTE_PGM_RSRC1
GRANULATED_WORKITEM_VGPR_COUNT = BitField("COMPUTE_PGM_RSRC1_GRANULATED_WORKITEM_VGPR_COUNT", 0, 6)
GRANULATED_WAVEFRONT_SGPR_COUNT = BitField("COMPUTE_PGM_RSRC1_GRANULATED_WAVEFRONT_SGPR_COUNT", 6, 4)
WGP_MODE = BitField("COMPUTE_PGM_RSRC1_GFX10_PLUS_WGP_MODE", 29, 1)  # reserved before gfx10
# COMPUTE_PGM_RSRC2
ENABLE_PRIVATE_SEGMENT = BitField("COMPUTE_PGM_RSRC2_ENABLE_PRIVATE_SEGMENT", 0, 1)
USER_SGPR_COUNT = BitField("COMPUTE_PGM_RSRC2_USER_SGPR_COUNT", 1, 5)
# COMPUTE_PGM_RSRC3 on gfx90a and later CDNA
ACCUM_OFFSET = BitField("COMPUTE_PGM_RSRC3_GFX90A_ACCUM_OFFSET", 0, 6)
# KERNEL_CODE_PROPERTIES
ENABLE_WAVEFRONT_SIZE32 = BitField("KERNEL_CODE_PROPERTY_ENABLE_WAVEFRONT_SIZE32", 10, 1)
USES_DYNAMIC_STACK = BitField("KERNEL_CODE_PROPERTY_USES_DYNAMIC_STACK", 11, 1)

# ELF e_flags of an AMDGPU object
EF_AMDGPU_MACH = BitField("EF_AMDGPU_MACH", 0, 8)
EF_AMDGPU_FEATURE_XNACK_V3 = BitField("EF_AMDGPU_FEATURE_XNACK_V3", 8, 1)
EF_AMDGPU_FEATURE_SRAMECC_V3 = BitField("EF_AMDGPU_FEATURE_SRAMECC_V3", 9, 1)
# code-object v4+: two bits each, EF_AMDGPU_FEATURE_*_UNSUPPORTED/ANY/OFF/ON_V4 = 0..3
EF_AMDGPU_FEATURE_XNACK_V4 = BitField("EF_AMDGPU_FEATURE_XNACK_V4", 8, 2)
EF_AMDGPU_FEATURE_SRAMECC_V4 = BitField("EF_AMDGPU_FEATURE_SRAMECC_V4", 10, 2)
FEATURE_STATES_V4 = ("unsupported", "any", "off", "on")


@dataclass(frozen=True, slots=True)
class Field:
    name: str
    offset: int  # bytes from the start of the descriptor
    code: str  # struct format letter: its width and signedness


# kernel_descriptor_t; the reserved bytes between fields are skipped
FIELDS = (
    Field("group_segment_fixed_size", 0, "I"),
    Field("private_segment_fixed_size", 4, "I"),
    Field("kernarg_size", 8, "I"),
    Field("kernel_code_entry_byte_offset", 16, "q"),  # signed, from the descriptor to the kernel's code
    Field("compute_pgm_rsrc3", 44, "I"),
    Field("compute_pgm_rsrc1", 48, "I"),
    Field("compute_pgm_rsrc2", 52, "I"),
    Field("kernel_code_properties", 56, "H"),
    Field("kernarg_preload", 58, "H"),
)


def _layout(fields: tuple[Field, ...], size: int) -> struct.Struct:
    code, at = "<", 0
    for f in fields:
        code += f"{f.offset - at}x{f.code}"
        at = f.offset + struct.calcsize("<" + f.code)
    layout = struct.Struct(f"{code}{size - at}x")
    assert layout.size == size  # a field misplaced in FIELDS fails at import, not in a parse
    return layout


_LAYOUT = _layout(FIELDS, KERNEL_DESCRIPTOR_SIZE)


@dataclass(frozen=True, slots=True)
class KernelDescriptor:
    group_segment_fixed_size: int
    private_segment_fixed_size: int
    kernarg_size: int
    kernel_code_entry_byte_offset: int
    compute_pgm_rsrc3: int
    compute_pgm_rsrc1: int
    compute_pgm_rsrc2: int
    kernel_code_properties: int
    kernarg_preload: int


def decode(data: bytes, offset: int) -> KernelDescriptor:
    """The descriptor at OFFSET of DATA (the caller checks that 64 bytes are there)."""
    return KernelDescriptor(**dict(zip((f.name for f in FIELDS), _LAYOUT.unpack_from(data, offset), strict=True)))
