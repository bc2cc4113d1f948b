"""Instruction groups of AMDGPU mnemonics: what the asm listing and llvm-objdump's disassembly are counted by.

Groups follow shared/reference/instruction-mix.md (first match wins). Pure.
"""

from __future__ import annotations

import re

# `buffer_store_dword v1, off, s[0:3], 0 offset:4`: MUBUF with no vaddr, addressing the scratch descriptor
MUBUF_SCRATCH_OPERANDS_RE = re.compile(r"^[^,]+,\s*off\s*,\s*s\[")

# buffer_load_dword v1, s[4:7], 0 offen lds      (MUBUF loading straight into LDS: a modifier, not a mnemonic)
LDS_MODIFIER_RE = re.compile(r"\blds\b")

GROUPS = (
    "matrix",
    "agpr_move",
    "scratch",
    "lds_dma",
    "lds",
    "scalar_mem",
    "vmem_load",
    "vmem_store",
    "vmem_atomic",
    "wait",
    "barrier",
    "branch",
    "nop",
    "sched",
    "conversion",
    "transcendental",
    "valu",
    "salu",
    "other",
)

_PREFIX_GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("matrix", ("v_mfma", "v_smfmac", "v_wmma", "v_swmmac")),
    ("agpr_move", ("v_accvgpr_read", "v_accvgpr_write", "v_accvgpr_mov")),
    ("scratch", ("scratch_",)),
    ("lds_dma", ("global_load_lds_",)),
    ("lds", ("ds_",)),
    (
        "scalar_mem",
        (
            "s_load",
            "s_buffer_load",
            "s_store",
            "s_buffer_store",
            "s_dcache",
            "s_memtime",
            "s_prefetch_data",
            "s_atomic",
        ),
    ),
    (
        "vmem_load",
        ("global_load", "buffer_load", "flat_load", "image_load", "image_sample", "image_gather", "tbuffer_load"),
    ),
    ("vmem_store", ("global_store", "buffer_store", "flat_store", "image_store", "tbuffer_store")),
    ("vmem_atomic", ("global_atomic", "buffer_atomic", "flat_atomic", "image_atomic")),
    ("wait", ("s_waitcnt", "s_wait_")),
    ("barrier", ("s_barrier",)),
    ("branch", ("s_branch", "s_cbranch_", "s_setpc", "s_swappc", "s_getpc", "s_call", "s_endpgm", "s_trap")),
    ("nop", ("s_nop", "s_code_end")),
    ("sched", ("s_delay_alu", "s_setprio", "s_sleep", "s_clause", "s_sched_")),
    ("conversion", ("v_cvt_",)),
    (
        "transcendental",
        (
            "v_exp_",
            "v_log_",
            "v_rcp_",
            "v_rsq_",
            "v_sqrt_",
            "v_sin_",
            "v_cos_",
            "v_s_exp_",
            "v_s_log_",
            "v_s_rcp_",
            "v_s_rsq_",
            "v_s_sqrt_",
        ),
    ),
    ("valu", ("v_",)),
    ("salu", ("s_",)),
)


def classify(mnemonic: str, private_segment: bool, operands: str | None = None) -> str:
    """Group of one mnemonic. MUBUF buffer_load/store count as scratch when the kernel has a private
    segment and, if operands are given, they address it with no vaddr (`off, s[..]`); with only a
    mnemonic (disassembler counts) every such MUBUF access of a scratch-using kernel counts as scratch."""
    return mnemonic_group(mnemonic.lower(), private_segment, *operand_flags(operands))


def operand_flags(operands: str | None) -> tuple[bool, bool | None]:
    """(has the `lds` modifier, addresses scratch with no vaddr); None: operands unknown."""
    if operands is None:
        return False, None
    return LDS_MODIFIER_RE.search(operands) is not None, MUBUF_SCRATCH_OPERANDS_RE.match(operands) is not None


def mnemonic_group(mnemonic: str, private_segment: bool, lds_modifier: bool, scratch_operands: bool | None) -> str:
    if mnemonic.startswith("buffer_load") and ("_lds" in mnemonic or lds_modifier):
        return "lds_dma"
    if (
        private_segment
        and mnemonic.startswith(("buffer_load", "buffer_store"))
        and (scratch_operands is None or scratch_operands)
    ):
        return "scratch"
    for group, prefixes in _PREFIX_GROUPS:
        if mnemonic.startswith(prefixes):
            return group
    return "other"
