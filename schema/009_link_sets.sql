-- 009: a snapshot's Inductor links are stored once per distinct set, as its kernel folders (003) and
-- generated modules (008) are.
--
-- kernel_modules (kernel folder -> generated module) and autotune_results (autotune winners and timed
-- configs, each linked to its folder) held their rows per snapshot: an unchanged re-ingest of a real
-- TorchInductor cache directory wrote them all again (H100 gpt2: 62 + 20 rows, +44 KB a re-ingest on a
-- 2.9 MB store, 1.5%). Now a snapshot names each set by digest (snapshots.kernel_module_set,
-- snapshots.autotune_result_set); the views kernel_modules and autotune_results keep the tables' columns,
-- snapshot_id included, so queries written against them keep working.

CREATE TABLE kernel_module_sets (
    set_digest  VARCHAR NOT NULL,  -- sha256 of the set's rows as JSON arrays of text, ordered (writer.py)
    cache_key   VARCHAR NOT NULL,
    module_path VARCHAR,
    kernel_name VARCHAR,
    link        VARCHAR NOT NULL,
    detail      VARCHAR,
    PRIMARY KEY (set_digest, cache_key)
);

CREATE TABLE autotune_result_sets (
    set_digest         VARCHAR NOT NULL,  -- as kernel_module_sets.set_digest
    source             VARCHAR NOT NULL,
    path               VARCHAR NOT NULL,
    entry              INTEGER NOT NULL,
    kernel_name        VARCHAR,
    module_path        VARCHAR,
    key                JSON,
    config             JSON NOT NULL,
    time_ms            DOUBLE,
    timings            JSON,
    tuning_ms          DOUBLE,
    is_best            BOOLEAN NOT NULL,
    found_by_coordesc  BOOLEAN,
    triton_cache_hash  VARCHAR,
    cache_key          VARCHAR,
    link               VARCHAR NOT NULL,
    link_detail        VARCHAR,
    PRIMARY KEY (set_digest, path, entry)
);

ALTER TABLE snapshots ADD COLUMN kernel_module_set VARCHAR;     -- NULL: no kernel folder linked to a module
ALTER TABLE snapshots ADD COLUMN autotune_result_set VARCHAR;   -- NULL: no autotune result

UPDATE snapshots SET kernel_module_set = d.set_digest
FROM (SELECT snapshot_id,
             sha256(string_agg(to_json([cache_key, module_path, kernel_name, link, detail])::VARCHAR,
                               chr(10) ORDER BY cache_key)) AS set_digest
      FROM kernel_modules GROUP BY snapshot_id) d
WHERE snapshots.snapshot_id = d.snapshot_id;

UPDATE snapshots SET autotune_result_set = d.set_digest
FROM (SELECT snapshot_id,
             sha256(string_agg(to_json([source, path, entry::VARCHAR, kernel_name, module_path, key::VARCHAR,
                                        config::VARCHAR, time_ms::VARCHAR, timings::VARCHAR, tuning_ms::VARCHAR,
                                        is_best::VARCHAR, found_by_coordesc::VARCHAR, triton_cache_hash,
                                        cache_key, link, link_detail])::VARCHAR,
                               chr(10) ORDER BY path, entry)) AS set_digest
      FROM autotune_results GROUP BY snapshot_id) d
WHERE snapshots.snapshot_id = d.snapshot_id;

INSERT INTO kernel_module_sets
SELECT DISTINCT s.kernel_module_set, m.cache_key, m.module_path, m.kernel_name, m.link, m.detail
FROM kernel_modules m JOIN snapshots s USING (snapshot_id);

INSERT INTO autotune_result_sets
SELECT DISTINCT s.autotune_result_set, r.source, r.path, r.entry, r.kernel_name, r.module_path, r.key, r.config,
       r.time_ms, r.timings, r.tuning_ms, r.is_best, r.found_by_coordesc, r.triton_cache_hash, r.cache_key, r.link,
       r.link_detail
FROM autotune_results r JOIN snapshots s USING (snapshot_id);

DROP VIEW kernels;
DROP VIEW inductor_kernels;
DROP VIEW autotune;
DROP TABLE kernel_modules;
DROP TABLE autotune_results;

CREATE VIEW kernel_modules AS
SELECT s.snapshot_id, m.cache_key, m.module_path, m.kernel_name, m.link, m.detail
FROM snapshots s JOIN kernel_module_sets m ON m.set_digest = s.kernel_module_set;

CREATE VIEW autotune_results AS
SELECT s.snapshot_id, r.source, r.path, r.entry, r.kernel_name, r.module_path, r.key, r.config, r.time_ms, r.timings,
       r.tuning_ms, r.is_best, r.found_by_coordesc, r.triton_cache_hash, r.cache_key, r.link, r.link_detail
FROM snapshots s JOIN autotune_result_sets r ON r.set_digest = s.autotune_result_set;

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

CREATE VIEW kernels AS
SELECT
    s.tag, sf.cache_key, k.name, k.backend, k.arch, k.warp_size, k.triton_version, k.num_warps, k.num_stages,
    k.num_ctas, k.waves_per_eu, k.matrix_instr_nonkdim, k.kpack, k.shared,
    a.vgpr_count, a.agpr_count, a.sgpr_count, a.vgpr_spill_count, a.sgpr_spill_count, a.scratch_bytes,
    a.lds_static, a.registers, a.stack_bytes, a.local_bytes, a.lds_static AS static_shared, a.code_size,
    a.occupancy_llvm, a.occupancy_llvm_limiter, a.occupancy, a.occupancy_limiter, a.occupancy_unit,
    a.vgpr_headroom, a.instr_source, a.instr_count, a.spill_count, a.reload_count, a.scratch_instr_count,
    a.ptx_instr_count, a.identity, a.identity_any_target, s.snapshot_id, sf.folder_digest,
    km.module_path AS inductor_module, km.kernel_name AS inductor_kernel, ab.is_best AS is_autotune_best
FROM snapshot_folders sf
JOIN snapshots s USING (snapshot_id)
JOIN kernel_folders k USING (folder_digest)
LEFT JOIN kernel_analysis a USING (folder_digest)
LEFT JOIN kernel_modules km ON km.snapshot_id = sf.snapshot_id AND km.cache_key = sf.cache_key
LEFT JOIN (SELECT snapshot_id, cache_key, bool_or(is_best) AS is_best FROM autotune_results
           WHERE cache_key IS NOT NULL GROUP BY ALL) ab
       ON ab.snapshot_id = sf.snapshot_id AND ab.cache_key = sf.cache_key;
