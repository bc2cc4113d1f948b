-- Per-kernel analysis (AMD code objects and asm, NVIDIA cubins and PTX, TTGIR facts, identity),
-- instruction mix, source-line attribution (the public views users query over them: views.sql).
-- Everything here is derived from stored blobs: `kdb reindex` rebuilds these tables.

-- Keyed by folder_digest (see folders in 001): the analysis of a folder's content, shared by every
-- snapshot that holds that folder.
CREATE TABLE kernel_analysis (
    folder_digest          VARCHAR PRIMARY KEY,
    -- code object (AMD HSACO / NVIDIA cubin)
    co_arch                VARCHAR,     -- from ELF e_flags
    co_version             INTEGER,     -- AMD code-object version (4, 5, ...)
    xnack                  VARCHAR,
    sramecc                VARCHAR,
    vgpr_count             INTEGER,     -- AMD: .vgpr_count (AGPRs folded in on gfx90a+)
    agpr_count             INTEGER,
    sgpr_count             INTEGER,
    vgpr_spill_count       INTEGER,
    sgpr_spill_count       INTEGER,
    lds_static             BIGINT,      -- AMD .group_segment_fixed_size / NVIDIA .nv.shared size
    scratch_bytes          BIGINT,      -- AMD .private_segment_fixed_size (per work-item)
    wavefront_size         INTEGER,
    max_workgroup_size     INTEGER,
    kernarg_size           INTEGER,
    dynamic_stack          BOOLEAN,
    code_size              BIGINT,      -- bytes of machine code (symbol size)
    descriptor             JSON,        -- AMD kernel descriptor fields
    co_metadata            JSON,        -- AMD: the whole metadata-note map of the kernel; NVIDIA: .nv.info attributes
    -- NVIDIA
    registers              INTEGER,     -- vendor-neutral: VGPRs on AMD, registers per thread on NVIDIA
    stack_bytes            BIGINT,      -- vendor-neutral: AMD scratch per work-item, NVIDIA stack per thread
    local_bytes            BIGINT,      -- NVIDIA local memory per thread; AMD scratch
    const0_bytes           BIGINT,      -- NVIDIA constant bank 0
    -- occupancy
    occupancy_llvm         INTEGER,     -- AMD: the compiler's figure (= `; Occupancy:` in the asm)
    occupancy_llvm_limiter VARCHAR,
    occupancy              INTEGER,     -- launch-time estimate: waves per SIMD (AMD) / warps per SM (NVIDIA)
    occupancy_limiter      VARCHAR,
    occupancy_unit         VARCHAR,     -- 'waves/SIMD' or 'warps/SM'
    vgpr_headroom          INTEGER,     -- VGPRs fewer that would gain one more wave (NULL: none would)
    asm_occupancy          INTEGER,     -- the `; Occupancy:` comment itself, where the asm has one
    kernel_info            JSON,        -- the asm `; Kernel info` block as written (Triton 3.2+)
    -- instruction mix summary
    instr_source           VARCHAR,     -- amdgcn, llvm-objdump, sass, ptx; NULL when none was available
    instr_count            INTEGER,
    spill_count            INTEGER,     -- AMD: `Folded Spill` stores; NVIDIA: st.local in PTX
    reload_count           INTEGER,
    scratch_instr_count    INTEGER,
    ptx_instr_count        INTEGER,
    -- TTGIR facts
    ttgir_num_warps        INTEGER,
    ttgir_num_ctas         INTEGER,
    threads_per_warp       INTEGER,
    ttgir_shared           BIGINT,
    layouts                VARCHAR[],
    convert_layout_count   INTEGER,
    local_alloc_count      INTEGER,
    -- identity across compiler releases (see kdb/identity.py)
    identity               VARCHAR,     -- hash of identity_parts, with the target
    identity_any_target    VARCHAR,     -- the same without the target, for --across-targets
    identity_parts         JSON,
    identity_options       JSON,        -- identity_parts.options: what matching compares beside the identity
    -- SHA-256 of each stage's normalised text (kdb/normalize.py): `kdb diff` finds the first stage that
    -- changed by comparing these, without reading any IR
    ttir_digest            VARCHAR,
    ttgir_digest           VARCHAR,
    llir_digest            VARCHAR,
    isa_digest             VARCHAR
);

CREATE TABLE instr_mix_counts (
    folder_digest VARCHAR NOT NULL,
    source      VARCHAR NOT NULL,   -- amdgcn, llvm-objdump, ptx, sass
    mnemonic    VARCHAR NOT NULL,
    grp         VARCHAR NOT NULL,
    count       INTEGER NOT NULL
);

CREATE TABLE source_line_counts (
    folder_digest VARCHAR NOT NULL,
    source      VARCHAR NOT NULL,   -- amdgcn or ptx
    file        VARCHAR NOT NULL,
    line        INTEGER NOT NULL,   -- 0: instructions with no source line
    grp         VARCHAR NOT NULL,
    count       INTEGER NOT NULL
);

CREATE TABLE analysis_problems (          -- files of a folder that could not be parsed
    folder_digest VARCHAR NOT NULL,
    name          VARCHAR NOT NULL,   -- file name within the folder ('' for the folder as a whole)
    stage         VARCHAR NOT NULL,   -- json, hsaco, amdgcn, cubin, ptx, sass, ttgir, identity, occupancy
    reason        VARCHAR NOT NULL
);
