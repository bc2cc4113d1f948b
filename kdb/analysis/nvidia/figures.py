"""What each figure means on NVIDIA (backend `cuda`): the roles of kdb/figures.py, in NVIDIA's words."""

from kdb.figures import FigureRoles, Wording

NVIDIA_ROLES = FigureRoles(
    backend="cuda",
    vendor="NVIDIA",
    registers="registers",  # per thread
    register_rules=("registers",),  # no separate VGPR/SGPR/AGPR files
    spill_counts=(),  # ptxas reports spill stores/loads only in its log; local memory is what the cubin says
    spill_memory=("local_bytes",),
    scratch=("stack_bytes", "local_bytes"),
    memory_spill="local_bytes",
    extra_memory=("stack_bytes",),
    launch_occupancy="occupancy",
    compiler_occupancy=None,
    expected=("occupancy", "registers", "local_bytes"),
    table_cells=("registers", None, None, None, None, "local_bytes"),
    shared_listed="shared",
    verdict_spills=("local_bytes", "stack_bytes"),
    verdict_resources=("registers", "shared"),
    labels={},
    register_word="register",
    register_abbrev="regs",
    memory_abbrev="local",
    occupancy_step="block",
    wording=Wording(
        register_title="registers per thread",
        occupancy_unit="warps per SM",
        scratch_title="local memory bytes",
        scratch_word="local-memory",
        spill_title="spill / local memory changes (B − A)",
        headers={"VGPRs": "registers", "scratch": "local", "LDS": "shared"},
    ),
)
