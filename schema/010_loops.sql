-- 010: where the cost is inside a kernel (issue 28): loop depth of every instruction, scratch inside loops,
-- and how far each kernel sits from an occupancy cliff.
--
-- The loop nest comes from the control-flow graph of the kernel's `instr_source` (the asm, the SASS, or the
-- PTX): natural loops as LLVM's LoopInfo counts them (kdb/analysis/loops.py). Rows written before this
-- migration have NULL in the new columns and no loop rows: `kdb reindex` computes them from the stored blobs.

ALTER TABLE kernel_analysis ADD COLUMN max_loop_depth INTEGER;          -- deepest loop nesting of any instruction (0: no loop)
ALTER TABLE kernel_analysis ADD COLUMN scratch_instr_in_loops INTEGER;  -- scratch (AMD) / local-memory (NVIDIA) instructions at loop depth >= 1
ALTER TABLE kernel_analysis ADD COLUMN loop_weighted_scratch BIGINT;    -- the same instructions, each weighted 32^depth (kdb/analysis/loops.py)
ALTER TABLE kernel_analysis ADD COLUMN scratch_by_loop_depth JSON;      -- {"depth": scratch instructions} of the instr_source mix
ALTER TABLE kernel_analysis ADD COLUMN registers_to_cliff INTEGER;      -- registers it can gain before losing a wave (AMD) / block (NVIDIA)
ALTER TABLE kernel_analysis ADD COLUMN registers_to_gain INTEGER;       -- registers it must shed to gain one (NULL: no register count would)

-- Instructions at loop depth >= 1, per source and depth; depth 0 is the rest of instr_mix_counts (the view
-- instr_mix_by_loop derives it), so a kernel without loops costs no row here.
CREATE TABLE instr_mix_loop_counts (
    folder_digest VARCHAR NOT NULL,
    source        VARCHAR NOT NULL,   -- as instr_mix_counts.source
    loop_depth    INTEGER NOT NULL,   -- >= 1
    mnemonic      VARCHAR NOT NULL,
    grp           VARCHAR NOT NULL,
    count         INTEGER NOT NULL,
    PRIMARY KEY (folder_digest, source, loop_depth, mnemonic, grp)
);

DROP VIEW kernels;

CREATE VIEW kernels AS
SELECT
    s.tag, sf.cache_key, k.name, k.backend, k.arch, k.warp_size, k.triton_version, k.num_warps, k.num_stages,
    k.num_ctas, k.waves_per_eu, k.matrix_instr_nonkdim, k.kpack, k.shared,
    a.vgpr_count, a.agpr_count, a.sgpr_count, a.vgpr_spill_count, a.sgpr_spill_count, a.scratch_bytes,
    a.lds_static, a.registers, a.stack_bytes, a.local_bytes, a.lds_static AS static_shared, a.code_size,
    a.occupancy_llvm, a.occupancy_llvm_limiter, a.occupancy, a.occupancy_limiter, a.occupancy_unit,
    a.vgpr_headroom, a.instr_source, a.instr_count, a.spill_count, a.reload_count, a.scratch_instr_count,
    a.ptx_instr_count, a.identity, a.identity_any_target, s.snapshot_id, sf.folder_digest,
    km.module_path AS inductor_module, km.kernel_name AS inductor_kernel, ab.is_best AS is_autotune_best,
    a.max_loop_depth, a.scratch_instr_in_loops, a.loop_weighted_scratch, a.scratch_by_loop_depth,
    a.registers_to_cliff, a.registers_to_gain
FROM snapshot_folders sf
JOIN snapshots s USING (snapshot_id)
JOIN kernel_folders k USING (folder_digest)
LEFT JOIN kernel_analysis a USING (folder_digest)
LEFT JOIN kernel_modules km ON km.snapshot_id = sf.snapshot_id AND km.cache_key = sf.cache_key
LEFT JOIN (SELECT snapshot_id, cache_key, bool_or(is_best) AS is_best FROM autotune_results
           WHERE cache_key IS NOT NULL GROUP BY ALL) ab
       ON ab.snapshot_id = sf.snapshot_id AND ab.cache_key = sf.cache_key;

-- The kernel's instr_source mix per loop depth: depth >= 1 from instr_mix_loop_counts, depth 0 the rest.
-- Only kernels whose loop nest is known (max_loop_depth not NULL).
CREATE VIEW instr_mix_by_loop AS
WITH known AS (
    SELECT k.tag, k.cache_key, k.folder_digest, k.instr_source
    FROM kernels k
    WHERE k.max_loop_depth IS NOT NULL AND k.instr_source IS NOT NULL
),
inside AS (
    SELECT n.tag, n.cache_key, l.loop_depth, l.grp, l.mnemonic, l.count
    FROM known n
    JOIN instr_mix_loop_counts l ON l.folder_digest = n.folder_digest AND l.source = n.instr_source
),
outside AS (
    SELECT n.tag, n.cache_key, 0 AS loop_depth, m.grp, m.mnemonic,
           m.count - coalesce((SELECT sum(l.count) FROM instr_mix_loop_counts l
                               WHERE l.folder_digest = m.folder_digest AND l.source = m.source
                                 AND l.mnemonic = m.mnemonic AND l.grp = m.grp), 0) AS count
    FROM known n
    JOIN instr_mix_counts m ON m.folder_digest = n.folder_digest AND m.source = n.instr_source
)
SELECT tag, cache_key, loop_depth, grp AS "group", mnemonic, CAST(count AS INTEGER) AS count FROM inside
UNION ALL
SELECT tag, cache_key, loop_depth, grp AS "group", mnemonic, CAST(count AS INTEGER) AS count FROM outside
WHERE count > 0;
