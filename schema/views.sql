-- Every view of the catalog, declared once: a view change is an edit here, never a copy in a migration.
--
-- Tables and their data belong to the numbered migrations (NNN_*.sql, append-only); the views here are
-- dropped and created again by a writing kdb command, after the migrations, whenever this file differs
-- from the copy the catalog recorded (schema_views.digest: its SHA-256). A reader of a catalog whose
-- views are older is told to run a writing command. Order matters: a view is created after the views
-- it reads (DuckDB binds a view's columns when it is created).

-- A snapshot's kernel folders (a table until 003; its rows now live once per folder set).
CREATE VIEW snapshot_folders AS
SELECT s.snapshot_id, f.cache_key, f.folder_digest
FROM snapshots s JOIN folder_sets f ON f.set_digest = s.folder_set;

-- Every file of every snapshot.
CREATE VIEW files AS
SELECT sf.snapshot_id, sf.cache_key || '/' || ff.name AS path, ff.hash, ff.size, ff.kind, sf.cache_key
FROM snapshot_folders sf JOIN folder_files ff USING (folder_digest)
UNION ALL
SELECT snapshot_id, path, hash, size, kind, NULL AS cache_key FROM top_files;

-- The per-row names over the list tables of 012 (tables until then), with their old columns.
CREATE VIEW instr_mix_counts AS
SELECT folder_digest, source, unnest(mnemonics) AS mnemonic, unnest(grps) AS grp, unnest(counts) AS count
FROM instr_mix_lists;

CREATE VIEW source_line_counts AS
SELECT folder_digest, source, unnest(files) AS file, unnest(lines) AS line, unnest(grps) AS grp,
       unnest(counts) AS count
FROM source_line_lists;

CREATE VIEW instr_mix_loop_counts AS
SELECT folder_digest, source, unnest(loop_depths) AS loop_depth, unnest(mnemonics) AS mnemonic,
       unnest(grps) AS grp, unnest(counts) AS count
FROM instr_mix_loop_lists;

-- Per-snapshot names over the set tables of 008 and 009 (tables until then), with their old columns.
CREATE VIEW inductor_modules AS
SELECT s.snapshot_id, m.path, m.kernel_name, m.heuristic, m.def_line, m.size_hints, m.triton_meta, m.inductor_meta,
       m.configs, m.kernel_perf_ms
FROM snapshots s JOIN inductor_module_sets m ON m.set_digest = s.inductor_module_set;

CREATE VIEW kernel_modules AS
SELECT s.snapshot_id, m.cache_key, m.module_path, m.kernel_name, m.link, m.detail
FROM snapshots s JOIN kernel_module_sets m ON m.set_digest = s.kernel_module_set;

CREATE VIEW autotune_results AS
SELECT s.snapshot_id, r.source, r.path, r.entry, r.kernel_name, r.module_path, r.key, r.config, r.time_ms, r.timings,
       r.tuning_ms, r.is_best, r.found_by_coordesc, r.triton_cache_hash, r.cache_key, r.link, r.link_detail
FROM snapshots s JOIN autotune_result_sets r ON r.set_digest = s.autotune_result_set;

-- What users query, and what the diff reads (diff_queries selects k.*): columns are added at the end.
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

CREATE VIEW instr_mix AS
SELECT s.tag, sf.cache_key, m.mnemonic, m.grp, m.count, m.source
FROM snapshot_folders sf
JOIN snapshots s USING (snapshot_id)
JOIN kernel_analysis a USING (folder_digest)
JOIN instr_mix_counts m USING (folder_digest)
WHERE m.source = a.instr_source;

CREATE VIEW ptx_mix AS
SELECT s.tag, sf.cache_key, m.mnemonic, m.grp, m.count
FROM snapshot_folders sf JOIN snapshots s USING (snapshot_id) JOIN instr_mix_counts m USING (folder_digest)
WHERE m.source = 'ptx';

CREATE VIEW source_lines AS
SELECT s.tag, sf.cache_key, l.file, l.line, l.grp, l.count, l.source
FROM snapshot_folders sf JOIN snapshots s USING (snapshot_id) JOIN source_line_counts l USING (folder_digest);

CREATE VIEW problems AS
SELECT s.tag, p.cache_key, p.path, p.stage, p.reason
FROM file_problems p JOIN snapshots s USING (snapshot_id)
UNION ALL
SELECT s.tag, sf.cache_key, CASE WHEN p.name = '' THEN sf.cache_key ELSE sf.cache_key || '/' || p.name END,
       p.stage, p.reason
FROM snapshot_folders sf JOIN snapshots s USING (snapshot_id) JOIN analysis_problems p USING (folder_digest);

CREATE VIEW snapshot_files AS
SELECT s.tag, f.path, f.kind, f.size, f.hash, f.cache_key
FROM files f JOIN snapshots s USING (snapshot_id);

CREATE VIEW autotune AS
SELECT s.tag, r.cache_key, r.kernel_name, r.config, r.time_ms, r.is_best, r.source, r.path, r.entry,
       r.module_path, r.key, r.timings, r.tuning_ms, r.found_by_coordesc, r.triton_cache_hash, r.link,
       r.link_detail, s.snapshot_id
FROM autotune_results r JOIN snapshots s USING (snapshot_id);

CREATE VIEW inductor_kernels AS
SELECT s.tag, km.cache_key, km.kernel_name, km.module_path, km.link, km.detail, m.heuristic, m.size_hints,
       m.inductor_meta, m.triton_meta, m.kernel_perf_ms, s.snapshot_id
FROM kernel_modules km
JOIN snapshots s USING (snapshot_id)
LEFT JOIN inductor_modules m
       ON m.snapshot_id = km.snapshot_id AND m.path = km.module_path AND m.kernel_name = km.kernel_name;

-- The kernel's instr_source mix per loop depth: depth >= 1 from instr_mix_loop_counts, depth 0 the rest.
-- Only kernels whose loop nest is known (max_loop_depth not NULL). The instruction group is grp, as in every
-- other view; "group" (its name until issue 40, a reserved word) is kept last as a deprecated copy of grp.
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
SELECT tag, cache_key, loop_depth, grp, mnemonic, CAST(count AS INTEGER) AS count, grp AS "group" FROM inside
UNION ALL
SELECT tag, cache_key, loop_depth, grp, mnemonic, CAST(count AS INTEGER) AS count, grp AS "group" FROM outside
WHERE count > 0;

-- Per kernel folder of a snapshot: its launches and time over every profile imported under the tag. share is the
-- folder's time over the snapshot's whole GPU kernel time: every kernel launch of the same profiles, linked or
-- not, Triton or not (cuBLAS, cuDNN, aten…).
CREATE VIEW kernel_times AS
SELECT s.tag, t.cache_key, t.kernel_name, sum(t.launches)::BIGINT AS launches, sum(t.total_ns)::BIGINT AS total_ns,
       sum(t.total_ns) / sum(t.launches) AS mean_ns, sum(t.total_ns) / any_value(g.total_ns) AS share, s.snapshot_id
FROM profile_kernel_times t
JOIN snapshots s USING (snapshot_id)
JOIN (SELECT snapshot_id, sum(total_ns) AS total_ns FROM profile_files GROUP BY snapshot_id) g USING (snapshot_id)
GROUP BY s.tag, t.cache_key, t.kernel_name, s.snapshot_id;

-- Per snapshot and reason: the launches no folder was linked to.
CREATE VIEW profile_unlinked_counts AS
SELECT s.tag, u.reason, count(DISTINCT u.kernel_name) AS kernels, sum(u.launches)::BIGINT AS launches,
       sum(u.total_ns)::BIGINT AS total_ns, s.snapshot_id
FROM profile_unlinked u JOIN snapshots s USING (snapshot_id)
GROUP BY s.tag, u.reason, s.snapshot_id;
