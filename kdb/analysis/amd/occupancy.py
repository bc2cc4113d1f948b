"""AMD occupancy (waves per SIMD) from register and LDS use, and the one table of AMD architecture constants.

Sources: shared/reference/amd-occupancy.md and amd-code-objects.md, which follow LLVM's AMDGPU backend
(AMDGPUBaseInfo.cpp: getVGPRAllocGranule, getTotalNumVGPRs, getMaxWavesPerEU, getOccupancyWithNumSGPRs).
`compiler_occupancy` must reproduce LLVM's `; Occupancy:` comment exactly; `launch_occupancy` is an
estimate that also charges Triton's dynamic LDS and the whole workgroup, never checked on hardware.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kdb.errors import KdbError

KIB = 1024

# `waves_per_eu`: the descriptor allocates more VGPRs than the kernel uses because Triton's `waves_per_eu`
# asked LLVM for that occupancy (shedding VGPRs gains nothing); `vgpr_allocation`: the same without it.
LIMITERS = ("vgpr", "waves_per_eu", "vgpr_allocation", "sgpr", "lds", "workgroup", "max_waves")


@dataclass(frozen=True)
class ArchSpec:
    name: str
    mach: int  # e_flags & 0xff in the code object
    generation: int  # 9 (GCN/CDNA), 10, 11, 12 (RDNA)
    default_wave: int  # the wave size Triton compiles for
    max_waves_per_simd: int
    vgpr_granule_w64: int  # allocation granule, what occupancy rounds up to
    vgpr_granule_w32: int
    vgpr_budget_w64: int  # VGPRs per SIMD lane shared by all resident waves
    vgpr_budget_w32: int
    max_vgprs_per_wave: int  # AGPRs included where the file is unified
    has_agprs: bool  # matrix-core targets: `.agpr_count` exists
    unified_agprs: bool  # gfx90a+: AGPRs live in the VGPR file; the descriptor carries ACCUM_OFFSET
    sgprs_limit_occupancy: bool  # only gfx9 (gfx10+ has enough SGPRs for every wave)
    lds_per_workgroup: int
    lds_per_cu: int  # per CU on gfx9, per WGP on gfx10+ (WGP mode is Triton's default)
    lds_alloc_granule: int
    simds_per_cu: int
    workgroups_per_cu: int  # cap when a workgroup has more than one wave

    def vgpr_granule(self, wave_size: int) -> int:
        return self.vgpr_granule_w32 if wave_size == 32 else self.vgpr_granule_w64

    def vgpr_budget(self, wave_size: int) -> int:
        return self.vgpr_budget_w32 if wave_size == 32 else self.vgpr_budget_w64

    def descriptor_vgpr_granule(self, wave_size: int) -> int:
        # The descriptor's encoding granule differs from the allocation granule on gfx10.3+/gfx11.
        return 8 if self.unified_agprs or wave_size == 32 else 4


def _cdna(
    name: str, mach: int, *, max_waves: int, granule: int, budget: int, max_vgprs: int, unified: bool, lds: int
) -> ArchSpec:
    return ArchSpec(
        name,
        mach,
        9,
        64,
        max_waves,
        granule,
        granule,
        budget,
        budget,
        max_vgprs,
        True,
        unified,
        True,
        lds,
        lds,
        512,
        4,
        16,
    )


def _rdna(name: str, mach: int, *, generation: int, granule_w64: int, budget_w64: int) -> ArchSpec:
    # Wave32 doubles both the granule and the budget; RDNA counts a WGP (4 SIMD32, 128 KiB LDS).
    return ArchSpec(
        name,
        mach,
        generation,
        32,
        16,
        granule_w64,
        granule_w64 * 2,
        budget_w64,
        budget_w64 * 2,
        256,
        False,
        False,
        False,
        64 * KIB,
        128 * KIB,
        1024,
        4,
        32,
    )


# The one table of AMD architecture constants. gfx940/gfx941 are gone from current LLVM; they equal gfx942.
ARCHES: dict[str, ArchSpec] = {
    spec.name: spec
    for spec in (
        # gfx908 has a separate 256-entry AGPR file; `.vgpr_count` is max(VGPR, AGPR) there.
        _cdna("gfx908", 0x30, max_waves=10, granule=4, budget=256, max_vgprs=256, unified=False, lds=64 * KIB),
        _cdna("gfx90a", 0x3F, max_waves=8, granule=8, budget=512, max_vgprs=512, unified=True, lds=64 * KIB),
        _cdna("gfx940", 0x40, max_waves=8, granule=8, budget=512, max_vgprs=512, unified=True, lds=64 * KIB),
        _cdna("gfx941", 0x4B, max_waves=8, granule=8, budget=512, max_vgprs=512, unified=True, lds=64 * KIB),
        _cdna("gfx942", 0x4C, max_waves=8, granule=8, budget=512, max_vgprs=512, unified=True, lds=64 * KIB),
        _cdna("gfx950", 0x4F, max_waves=8, granule=8, budget=512, max_vgprs=512, unified=True, lds=160 * KIB),
        _rdna("gfx1030", 0x36, generation=10, granule_w64=8, budget_w64=512),
        # gfx1100/1101/1151/1200/1201 have the 1.5x VGPR file.
        _rdna("gfx1100", 0x41, generation=11, granule_w64=12, budget_w64=768),
        _rdna("gfx1101", 0x46, generation=11, granule_w64=12, budget_w64=768),
        _rdna("gfx1151", 0x4A, generation=11, granule_w64=12, budget_w64=768),
        _rdna("gfx1200", 0x48, generation=12, granule_w64=12, budget_w64=768),
        _rdna("gfx1201", 0x4E, generation=12, granule_w64=12, budget_w64=768),
        _rdna("gfx1102", 0x47, generation=11, granule_w64=8, budget_w64=512),
        _rdna("gfx1103", 0x44, generation=11, granule_w64=8, budget_w64=512),
        _rdna("gfx1150", 0x43, generation=11, granule_w64=8, budget_w64=512),
    )
}

# Code-object v6 generic targets: names for the ELF processor field only; no occupancy model.
GENERIC_TARGETS: dict[int, str] = {
    0x51: "gfx9-generic",
    0x5F: "gfx9-4-generic",
    0x53: "gfx10-3-generic",
    0x54: "gfx11-generic",
    0x59: "gfx12-generic",
}

ARCH_BY_MACH: dict[int, str] = {spec.mach: name for name, spec in ARCHES.items()} | GENERIC_TARGETS


def arch_spec(arch: str) -> ArchSpec | None:
    """The table entry for 'gfx942' (feature suffixes such as ':sramecc+:xnack-' are ignored), else None."""
    return ARCHES.get(arch.split(":", 1)[0].strip().lower())


def _spec(arch: str) -> ArchSpec:
    spec = arch_spec(arch)
    if spec is None:
        # Generic (v6) targets and processors newer than this table: callers record it as a problem.
        raise KdbError(f"no occupancy model for arch {arch!r}")
    return spec


def waves_by_vgprs(spec: ArchSpec, wave_size: int, vgpr_count: int) -> int:
    granule = spec.vgpr_granule(wave_size)
    if vgpr_count < granule:
        return spec.max_waves_per_simd
    allocated = math.ceil(vgpr_count / granule) * granule
    return min(max(spec.vgpr_budget(wave_size) // allocated, 1), spec.max_waves_per_simd)


def waves_by_sgprs(spec: ArchSpec, sgpr_count: int) -> int:
    if not spec.sgprs_limit_occupancy:
        return spec.max_waves_per_simd
    # gfx9 SGPR file: 800 per SIMD, allocated in steps that give these thresholds.
    waves = 10 if sgpr_count <= 80 else 9 if sgpr_count <= 88 else 8 if sgpr_count <= 100 else 7
    return min(waves, spec.max_waves_per_simd)


def _pick(spec: ArchSpec, bounds: list[tuple[str, int]]) -> tuple[int, str]:
    waves = min([spec.max_waves_per_simd] + [value for _, value in bounds])
    if waves >= spec.max_waves_per_simd:
        return waves, "max_waves"
    return waves, next(name for name, value in bounds if value == waves)


def _register_bounds(
    spec: ArchSpec,
    wave_size: int,
    vgpr_count: int,
    sgpr_count: int,
    allocated_vgprs: int | None,
    waves_per_eu: int | None,
) -> list[tuple[str, int]]:
    """Waves per SIMD allowed by the VGPRs used, by the VGPRs the descriptor allocates (which the hardware
    reserves; `waves_per_eu` makes LLVM allocate up to that occupancy's budget), and by SGPRs."""
    used = waves_by_vgprs(spec, wave_size, vgpr_count)
    bounds = [("vgpr", used)]
    allocated = waves_by_vgprs(spec, wave_size, max(vgpr_count, allocated_vgprs or 0))
    if allocated < used:
        bounds.append(("waves_per_eu" if waves_per_eu else "vgpr_allocation", allocated))
    bounds.append(("sgpr", waves_by_sgprs(spec, sgpr_count)))
    return bounds


def compiler_occupancy(
    arch: str,
    wave_size: int,
    vgpr_count: int,
    sgpr_count: int,
    allocated_vgprs: int | None = None,
    waves_per_eu: int | None = None,
) -> tuple[int, str]:
    """LLVM's `; Occupancy:` figure: waves per SIMD from `.vgpr_count`, the descriptor's VGPR allocation
    (`allocated_vgprs`, when known) and `.sgpr_count`, and its limiter."""
    spec = _spec(arch)
    return _pick(spec, _register_bounds(spec, wave_size, vgpr_count, sgpr_count, allocated_vgprs, waves_per_eu))


def launch_occupancy(
    arch: str,
    wave_size: int,
    vgpr_count: int,
    sgpr_count: int,
    lds_bytes: int,
    num_warps: int,
    allocated_vgprs: int | None = None,
    waves_per_eu: int | None = None,
) -> tuple[int, str]:
    """Launch-time estimate: LLVM's figure, further bounded by LDS (static + Triton's `shared`) and by
    whole workgroups fitting on one CU/WGP. Not checked on hardware; report it beside compiler_occupancy."""
    spec = _spec(arch)
    num_warps = max(num_warps, 1)
    if lds_bytes > spec.lds_per_workgroup:
        return 0, "lds"
    cap = spec.workgroups_per_cu if num_warps > 1 else spec.max_waves_per_simd * spec.simds_per_cu
    by_lds = spec.lds_per_cu // _round_up(lds_bytes, spec.lds_alloc_granule) if lds_bytes > 0 else cap
    workgroups = min(by_lds, cap)
    resident = math.ceil(workgroups * num_warps / spec.simds_per_cu)
    # Name LDS when it is what bounds the workgroup count, else the workgroup cap itself.
    wg_bound = ("lds" if by_lds < cap else "workgroup", resident)
    return _pick(
        spec, _register_bounds(spec, wave_size, vgpr_count, sgpr_count, allocated_vgprs, waves_per_eu) + [wg_bound]
    )


def vgpr_headroom(
    arch: str,
    wave_size: int,
    vgpr_count: int,
    sgpr_count: int,
    allocated_vgprs: int | None = None,
    waves_per_eu: int | None = None,
) -> int | None:
    """How many fewer VGPRs would give one more wave per SIMD (compiler figure); None when already at the
    maximum, or when VGPRs are not what limits it (SGPRs, or a descriptor allocation set by `waves_per_eu`)."""
    spec = _spec(arch)
    current, limiter = compiler_occupancy(arch, wave_size, vgpr_count, sgpr_count, allocated_vgprs, waves_per_eu)
    if limiter != "vgpr":
        return None
    target = current + 1
    if target > spec.max_waves_per_simd or waves_by_sgprs(spec, sgpr_count) < target:
        return None
    granule = spec.vgpr_granule(wave_size)
    fits = spec.vgpr_budget(wave_size) // target // granule * granule
    if fits < 1 or fits >= vgpr_count:
        return None
    return vgpr_count - fits


def _round_up(value: int, granule: int) -> int:
    return -(-value // granule) * granule
