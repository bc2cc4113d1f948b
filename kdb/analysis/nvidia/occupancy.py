"""Theoretical occupancy of NVIDIA kernels, as ``cudaOccupancyMaxActiveBlocksPerMultiprocessor`` computes it.

Limits per architecture come from NVIDIA's CUDA C++ Programming Guide ("Technical Specifications per
Compute Capability" and the per-architecture "Shared Memory" sections listing the carve-out
choices) and from the granularities in the toolkit's ``cuda_occupancy.h``
(``cudaOccSMemAllocationGranularity`` 128 B and ``cudaOccRegAllocationGranularity`` 256 registers
per warp for compute major 8/9; ``cudaOccSubPartitionsPerMultiprocessor`` 4).

The calculation follows ``cuda_occupancy.h``:

- warps: ``max_warps_per_sm // warps_per_block``;
- blocks: the architecture's resident-block limit;
- registers: registers are allocated per warp, rounded up to 256, inside each of the 4 SM
  sub-partitions (16384 registers each), so ``(16384 // regs_per_warp) * 4`` warps fit. A block whose
  warps, rounded up to a multiple of 4, would need more than 65536 registers cannot launch;
- shared memory: ``static + dynamic`` plus the 1 KiB the driver reserves per block on sm80+, rounded
  up to 128 B, divided into the largest carve-out. Triton raises the kernel's max-dynamic-shared
  attribute to its whole footprint and leaves the carve-out preference at its default, so the
  driver may pick the largest carve-out; a footprint above the opt-in per-block maximum runs
  0 blocks.

``tests/nvidia_fixtures/occupancy_sm90.json`` holds the driver's own answers measured on an H100;
the test suite compares this module against it.
"""

from __future__ import annotations

from dataclasses import dataclass

from kdb.errors import UsageError

KIB = 1024
LIMITERS = ("registers", "shared", "warps", "blocks")


@dataclass(frozen=True)
class SmLimits:
    arch: int  # SM number, e.g. 90
    max_warps_per_sm: int
    max_blocks_per_sm: int
    max_threads_per_block: int
    registers_per_sm: int
    registers_per_block: int
    max_registers_per_thread: int
    register_alloc_unit: int  # registers, allocated per warp
    sub_partitions: int  # register file banks per SM
    shared_per_sm: int  # bytes, largest carve-out
    shared_per_block_optin: int  # bytes a block may opt in to (cudaDevAttrMaxSharedMemoryPerBlockOptin)
    shared_per_block_default: int  # bytes without opting in (48 KiB)
    shared_alloc_unit: int  # bytes
    shared_reserved_per_block: int  # bytes the driver keeps per block (cudaDevAttrReservedSharedMemoryPerBlock)
    carveouts_kib: tuple[int, ...]  # shared-memory capacities the L1/shared split can be set to


_COMMON: dict[str, int] = {
    "max_threads_per_block": 1024,
    "registers_per_sm": 64 * KIB,
    "registers_per_block": 64 * KIB,
    "max_registers_per_thread": 255,
    "register_alloc_unit": 256,
    "sub_partitions": 4,
    "shared_per_block_default": 48 * KIB,
    "shared_alloc_unit": 128,
    "shared_reserved_per_block": 1 * KIB,
}

# Programming Guide, Technical Specifications (CUDA 12.x): compute capability 8.0 (A100),
# 8.6 (GA10x), 8.9 (AD10x), 9.0 (H100/H200).
SM_LIMITS: dict[int, SmLimits] = {
    80: SmLimits(
        arch=80,
        max_warps_per_sm=64,
        max_blocks_per_sm=32,
        shared_per_sm=164 * KIB,
        shared_per_block_optin=163 * KIB,
        carveouts_kib=(0, 8, 16, 32, 64, 100, 132, 164),
        **_COMMON,
    ),
    86: SmLimits(
        arch=86,
        max_warps_per_sm=48,
        max_blocks_per_sm=16,
        shared_per_sm=100 * KIB,
        shared_per_block_optin=99 * KIB,
        carveouts_kib=(0, 8, 16, 32, 64, 100),
        **_COMMON,
    ),
    89: SmLimits(
        arch=89,
        max_warps_per_sm=48,
        max_blocks_per_sm=24,
        shared_per_sm=100 * KIB,
        shared_per_block_optin=99 * KIB,
        carveouts_kib=(0, 8, 16, 32, 64, 100),
        **_COMMON,
    ),
    90: SmLimits(
        arch=90,
        max_warps_per_sm=64,
        max_blocks_per_sm=32,
        shared_per_sm=228 * KIB,
        shared_per_block_optin=227 * KIB,
        carveouts_kib=(0, 8, 16, 32, 64, 100, 132, 164, 196, 228),
        **_COMMON,
    ),
}


def _round_up(value: int, unit: int) -> int:
    return -(-value // unit) * unit


def limits_for(arch: int | str) -> SmLimits:
    """Limits for 90, "90", "sm_90" or "sm_90a" (the ``a`` variant has the same resources)."""
    key = str(arch).lower().removeprefix("sm_").rstrip("af")
    try:
        return SM_LIMITS[int(key)]
    except (ValueError, KeyError):
        known = ", ".join(f"sm_{a}" for a in SM_LIMITS)
        raise UsageError(f"no occupancy table for architecture {arch!r} (known: {known})") from None


def block_limits(
    arch: int | str, num_warps: int, regs_per_thread: int, static_shared: int, dynamic_shared: int
) -> dict[str, int]:
    """Resident blocks per SM allowed by each resource alone, keyed by LIMITERS."""
    lim = limits_for(arch)
    if num_warps <= 0 or regs_per_thread < 0 or static_shared < 0 or dynamic_shared < 0:
        raise UsageError("occupancy needs num_warps > 0 and non-negative registers and shared sizes")
    out: dict[str, int] = {}

    regs_per_warp = _round_up(regs_per_thread * 32, lim.register_alloc_unit)
    hw_check = regs_per_warp * _round_up(num_warps, lim.sub_partitions)
    if regs_per_thread > lim.max_registers_per_thread or hw_check > lim.registers_per_block:
        out["registers"] = 0
    elif regs_per_warp == 0:
        out["registers"] = lim.max_blocks_per_sm
    else:
        warps_per_partition = (lim.registers_per_sm // lim.sub_partitions) // regs_per_warp
        out["registers"] = warps_per_partition * lim.sub_partitions // num_warps

    # Measured on an H200 (tests/nvidia_fixtures/occupancy_sm90.json, 349 of 349 agree): the 1 KiB
    # `.nv.shared.<kernel>` of Triton's sm90 cubins (cuobjdump's SHARED) is not charged on top of the
    # 1 KiB the driver reserves per block (the driver reports 0 static bytes for it), so static shared
    # counts only beyond the reservation. The corpus has static sizes 0 and 1 KiB only.
    footprint = dynamic_shared + max(static_shared - lim.shared_reserved_per_block, 0)
    per_block = _round_up(footprint + lim.shared_reserved_per_block, lim.shared_alloc_unit)
    if footprint > lim.shared_per_block_optin:
        out["shared"] = 0
    else:
        out["shared"] = lim.shared_per_sm // per_block

    out["warps"] = 0 if num_warps * 32 > lim.max_threads_per_block else lim.max_warps_per_sm // num_warps
    out["blocks"] = lim.max_blocks_per_sm
    return out


def occupancy(
    arch: int | str, num_warps: int, regs_per_thread: int, static_shared: int = 0, dynamic_shared: int = 0
) -> tuple[int, int, str]:
    """(warps_per_sm, blocks_per_sm, limiter). On a tie the limiter is the first in LIMITERS."""
    per_resource = block_limits(arch, num_warps, regs_per_thread, static_shared, dynamic_shared)
    blocks = min(per_resource.values())
    limiter = next(name for name in LIMITERS if per_resource[name] == blocks)
    return blocks * num_warps, blocks, limiter
