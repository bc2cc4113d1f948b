-- 012: a catalog no bigger than it needs to be (issue 31).
--
-- 1. Instruction-mix, source-line and loop-mix rows become one row per kernel folder and source holding
--    lists (DuckDB LIST columns): a kernel had ~150 such rows, each repeating its 64-character folder
--    digest, and an ingest's parent process staged them one by one. The old names stay as views with
--    the old columns (instr_mix_counts, source_line_counts, instr_mix_loop_counts), so every view built
--    on them and every saved query reads what it read before.
-- 2. The tables keyed by content digests lose their PRIMARY KEY: DuckDB keeps an ART index for each,
--    which was about half of a small catalog's file (gfx942 mlp, 236 kernels: 2.80 MB with them, 1.50 MB
--    without) and is loaded into memory by every insert. Uniqueness is kept by the writers, as on the
--    shared catalog (DuckLake has no such constraints): one writer at a time (write.lock here, the
--    commit row there) and every insert skips what the catalog holds. The key columns stay NOT NULL.

CREATE TABLE instr_mix_lists (
    folder_digest VARCHAR NOT NULL,
    source        VARCHAR NOT NULL,     -- amdgcn, llvm-objdump, ptx, sass
    mnemonics     VARCHAR[] NOT NULL,   -- element i of each list is one former instr_mix_counts row
    grps          VARCHAR[] NOT NULL,
    counts        INTEGER[] NOT NULL
);
INSERT INTO instr_mix_lists
SELECT folder_digest, source, list(mnemonic ORDER BY mnemonic, grp), list(grp ORDER BY mnemonic, grp),
       list(count ORDER BY mnemonic, grp)
FROM instr_mix_counts GROUP BY folder_digest, source;
DROP TABLE instr_mix_counts;   -- the views of the three old names: views.sql

CREATE TABLE source_line_lists (
    folder_digest VARCHAR NOT NULL,
    source        VARCHAR NOT NULL,     -- amdgcn or ptx
    files         VARCHAR[] NOT NULL,
    lines         INTEGER[] NOT NULL,   -- 0: instructions with no source line
    grps          VARCHAR[] NOT NULL,
    counts        INTEGER[] NOT NULL
);
INSERT INTO source_line_lists
SELECT folder_digest, source, list(file ORDER BY file, line, grp), list(line ORDER BY file, line, grp),
       list(grp ORDER BY file, line, grp), list(count ORDER BY file, line, grp)
FROM source_line_counts GROUP BY folder_digest, source;
DROP TABLE source_line_counts;

CREATE TABLE instr_mix_loop_lists (
    folder_digest VARCHAR NOT NULL,
    source        VARCHAR NOT NULL,     -- as instr_mix_lists.source
    loop_depths   INTEGER[] NOT NULL,   -- each >= 1
    mnemonics     VARCHAR[] NOT NULL,
    grps          VARCHAR[] NOT NULL,
    counts        INTEGER[] NOT NULL
);
INSERT INTO instr_mix_loop_lists
SELECT folder_digest, source, list(loop_depth ORDER BY loop_depth, mnemonic, grp),
       list(mnemonic ORDER BY loop_depth, mnemonic, grp), list(grp ORDER BY loop_depth, mnemonic, grp),
       list(count ORDER BY loop_depth, mnemonic, grp)
FROM instr_mix_loop_counts GROUP BY folder_digest, source;
DROP TABLE instr_mix_loop_counts;

-- The digest-keyed tables again, without their PRIMARY KEY (same columns, same order, NOT NULL kept).

CREATE TABLE blobs_012 (
    hash VARCHAR NOT NULL,
    size BIGINT NOT NULL,
    stored_size BIGINT NOT NULL
);
INSERT INTO blobs_012 SELECT * FROM blobs;
DROP TABLE blobs;
ALTER TABLE blobs_012 RENAME TO blobs;

CREATE TABLE folders_012 (
    folder_digest VARCHAR NOT NULL,
    cache_key VARCHAR NOT NULL,
    file_count INTEGER NOT NULL,
    bytes BIGINT NOT NULL
);
INSERT INTO folders_012 SELECT * FROM folders;
DROP TABLE folders;
ALTER TABLE folders_012 RENAME TO folders;

CREATE TABLE folder_files_012 (
    folder_digest VARCHAR NOT NULL,
    "name" VARCHAR NOT NULL,
    hash VARCHAR NOT NULL,
    size BIGINT NOT NULL,
    kind VARCHAR NOT NULL
);
INSERT INTO folder_files_012 SELECT * FROM folder_files;
DROP TABLE folder_files;
ALTER TABLE folder_files_012 RENAME TO folder_files;

CREATE TABLE folder_sets_012 (
    set_digest VARCHAR NOT NULL,
    cache_key VARCHAR NOT NULL,
    folder_digest VARCHAR NOT NULL
);
INSERT INTO folder_sets_012 SELECT * FROM folder_sets;
DROP TABLE folder_sets;
ALTER TABLE folder_sets_012 RENAME TO folder_sets;

CREATE TABLE file_stats_012 (
    host VARCHAR NOT NULL,
    source_path VARCHAR NOT NULL,
    path VARCHAR NOT NULL,
    size BIGINT NOT NULL,
    mtime_ns BIGINT NOT NULL,
    ino BIGINT NOT NULL,
    hash VARCHAR NOT NULL
);
INSERT INTO file_stats_012 SELECT * FROM file_stats;
DROP TABLE file_stats;
ALTER TABLE file_stats_012 RENAME TO file_stats;

CREATE TABLE top_files_012 (
    snapshot_id INTEGER NOT NULL,
    path VARCHAR NOT NULL,
    hash VARCHAR NOT NULL,
    size BIGINT NOT NULL,
    kind VARCHAR NOT NULL
);
INSERT INTO top_files_012 SELECT * FROM top_files;
DROP TABLE top_files;
ALTER TABLE top_files_012 RENAME TO top_files;

CREATE TABLE kernel_folders_012 (
    folder_digest VARCHAR NOT NULL,
    cache_key VARCHAR NOT NULL,
    "name" VARCHAR NOT NULL,
    backend VARCHAR,
    arch VARCHAR,
    warp_size INTEGER,
    num_warps INTEGER,
    num_stages INTEGER,
    num_ctas INTEGER,
    waves_per_eu INTEGER,
    matrix_instr_nonkdim INTEGER,
    kpack INTEGER,
    shared BIGINT,
    triton_version VARCHAR,
    triton_version_source VARCHAR,
    hash VARCHAR,
    metadata JSON,
    metadata_digest VARCHAR
);
INSERT INTO kernel_folders_012 SELECT * FROM kernel_folders;
DROP TABLE kernel_folders;
ALTER TABLE kernel_folders_012 RENAME TO kernel_folders;

CREATE TABLE kernel_analysis_012 (
    folder_digest VARCHAR NOT NULL,
    co_arch VARCHAR,
    co_version INTEGER,
    xnack VARCHAR,
    sramecc VARCHAR,
    vgpr_count INTEGER,
    agpr_count INTEGER,
    sgpr_count INTEGER,
    vgpr_spill_count INTEGER,
    sgpr_spill_count INTEGER,
    lds_static BIGINT,
    scratch_bytes BIGINT,
    wavefront_size INTEGER,
    max_workgroup_size INTEGER,
    kernarg_size INTEGER,
    dynamic_stack BOOLEAN,
    code_size BIGINT,
    descriptor JSON,
    co_metadata JSON,
    registers INTEGER,
    stack_bytes BIGINT,
    local_bytes BIGINT,
    const0_bytes BIGINT,
    occupancy_llvm INTEGER,
    occupancy_llvm_limiter VARCHAR,
    occupancy INTEGER,
    occupancy_limiter VARCHAR,
    occupancy_unit VARCHAR,
    vgpr_headroom INTEGER,
    asm_occupancy INTEGER,
    kernel_info JSON,
    instr_source VARCHAR,
    instr_count INTEGER,
    spill_count INTEGER,
    reload_count INTEGER,
    scratch_instr_count INTEGER,
    ptx_instr_count INTEGER,
    ttgir_num_warps INTEGER,
    ttgir_num_ctas INTEGER,
    threads_per_warp INTEGER,
    ttgir_shared BIGINT,
    layouts VARCHAR[],
    convert_layout_count INTEGER,
    local_alloc_count INTEGER,
    "identity" VARCHAR,
    identity_any_target VARCHAR,
    identity_parts JSON,
    identity_options JSON,
    ttir_digest VARCHAR,
    ttgir_digest VARCHAR,
    llir_digest VARCHAR,
    isa_digest VARCHAR,
    instr_mix_digest VARCHAR,
    instr_groups JSON,
    instr_note VARCHAR,
    max_loop_depth INTEGER,
    scratch_instr_in_loops INTEGER,
    loop_weighted_scratch BIGINT,
    scratch_by_loop_depth JSON,
    registers_to_cliff INTEGER,
    registers_to_gain INTEGER
);
INSERT INTO kernel_analysis_012 SELECT * FROM kernel_analysis;
DROP TABLE kernel_analysis;
ALTER TABLE kernel_analysis_012 RENAME TO kernel_analysis;

CREATE TABLE kernel_sources_012 (
    folder_digest VARCHAR NOT NULL,
    source_file VARCHAR,
    source_line INTEGER,
    tensor_shapes VARCHAR[]
);
INSERT INTO kernel_sources_012 SELECT * FROM kernel_sources;
DROP TABLE kernel_sources;
ALTER TABLE kernel_sources_012 RENAME TO kernel_sources;

CREATE TABLE kernel_module_sets_012 (
    set_digest VARCHAR NOT NULL,
    cache_key VARCHAR NOT NULL,
    module_path VARCHAR,
    kernel_name VARCHAR,
    link VARCHAR NOT NULL,
    detail VARCHAR
);
INSERT INTO kernel_module_sets_012 SELECT * FROM kernel_module_sets;
DROP TABLE kernel_module_sets;
ALTER TABLE kernel_module_sets_012 RENAME TO kernel_module_sets;

CREATE TABLE inductor_module_sets_012 (
    set_digest VARCHAR NOT NULL,
    path VARCHAR NOT NULL,
    kernel_name VARCHAR NOT NULL,
    heuristic VARCHAR,
    def_line INTEGER,
    size_hints JSON,
    triton_meta JSON,
    inductor_meta JSON,
    configs JSON,
    kernel_perf_ms DOUBLE
);
INSERT INTO inductor_module_sets_012 SELECT * FROM inductor_module_sets;
DROP TABLE inductor_module_sets;
ALTER TABLE inductor_module_sets_012 RENAME TO inductor_module_sets;

CREATE TABLE autotune_result_sets_012 (
    set_digest VARCHAR NOT NULL,
    "source" VARCHAR NOT NULL,
    path VARCHAR NOT NULL,
    entry INTEGER NOT NULL,
    kernel_name VARCHAR,
    module_path VARCHAR,
    "key" JSON,
    config JSON NOT NULL,
    time_ms DOUBLE,
    timings JSON,
    tuning_ms DOUBLE,
    is_best BOOLEAN NOT NULL,
    found_by_coordesc BOOLEAN,
    triton_cache_hash VARCHAR,
    cache_key VARCHAR,
    link VARCHAR NOT NULL,
    link_detail VARCHAR
);
INSERT INTO autotune_result_sets_012 SELECT * FROM autotune_result_sets;
DROP TABLE autotune_result_sets;
ALTER TABLE autotune_result_sets_012 RENAME TO autotune_result_sets;
