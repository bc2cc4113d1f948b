"""What each figure means on AMD (backend `hip`): the roles of kdb/figures.py, in AMD's words."""

from kdb.figures import FigureRoles, Wording

AMD_ROLES = FigureRoles(
    backend="hip",
    vendor="AMD",
    registers="vgpr_count",  # AGPRs already folded in on gfx90a+ (max(VGPR, AGPR) on gfx908)
    register_rules=("vgpr", "sgpr", "agpr", "registers"),
    spill_counts=("vgpr_spill_count", "sgpr_spill_count"),
    spill_memory=(),
    scratch=("scratch_bytes",),
    memory_spill="scratch_bytes",
    extra_memory=(),
    launch_occupancy="occupancy",
    compiler_occupancy="occupancy_llvm",
    expected=("occupancy", "occupancy_llvm", "vgpr_count", "sgpr_count", "vgpr_spill_count", "scratch_bytes"),
    table_cells=("vgpr_count", "agpr_count", "sgpr_count", "vgpr_spill_count", "sgpr_spill_count", "scratch_bytes"),
    shared_listed="lds_static",
    verdict_spills=("vgpr_spill_count", "scratch_bytes"),
    # vgpr_count already holds AGPRs: AGPRs are not added again.
    verdict_resources=("vgpr_count", "shared", "sgpr_spill_count"),
    labels={"shared": "LDS"},
    register_word="VGPR",
    register_abbrev="VGPRs",
    memory_abbrev="scratch",
    occupancy_step="wave",
    wording=Wording(
        register_title="VGPRs",
        occupancy_unit="waves per SIMD",
        scratch_title="scratch bytes",
        scratch_word="scratch",
        spill_title="spill and scratch changes (B − A)",
    ),
)
