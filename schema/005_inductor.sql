-- 005: TorchInductor caches. A snapshot may be a whole Inductor cache directory (or any directory
-- holding Triton caches): its generated kernel modules, autotune winners (`*.best_config`), benchmark
-- timings (`*.kernel_perf`) and Triton's `*.autotune.json` are parsed at ingest and linked to the kernel
-- folders compiled from them. Links are per snapshot (they depend on which files sit beside each other);
-- `kernel_sources` is derived per folder like kernel_analysis (`kdb reindex` rebuilds it).

CREATE TABLE kernel_sources (
    folder_digest VARCHAR PRIMARY KEY,
    source_file   VARCHAR,      -- the Python file of the kernel's `def`, from the TTIR locations (as compiled: absolute)
    source_line   INTEGER,      -- the `def` line
    tensor_shapes VARCHAR[]     -- every distinct tensor shape of the TTIR ('8x16'): where block sizes show
);

CREATE TABLE inductor_modules (       -- one row per heuristics-decorated kernel of a generated module
    snapshot_id    INTEGER NOT NULL,
    path           VARCHAR NOT NULL,  -- the module, relative to the ingested directory
    kernel_name    VARCHAR NOT NULL,  -- the Python function (= Triton kernel) name
    heuristic      VARCHAR,           -- pointwise, reduction, persistent_reduction, template, …
    def_line       INTEGER,
    size_hints     JSON,
    triton_meta    JSON,
    inductor_meta  JSON,
    configs        JSON,              -- candidate configs where the module writes them literally
    kernel_perf_ms DOUBLE,            -- the module's `.kernel_perf` benchmark time, when present
    PRIMARY KEY (snapshot_id, path, kernel_name)
);

CREATE TABLE kernel_modules (         -- kernel folder -> the generated module it was compiled from
    snapshot_id INTEGER NOT NULL,
    cache_key   VARCHAR NOT NULL,
    module_path VARCHAR,              -- NULL unless link is 'source_file' or 'kernel_name'
    kernel_name VARCHAR,
    link        VARCHAR NOT NULL,     -- source_file, kernel_name, ambiguous, missing
    detail      VARCHAR,
    PRIMARY KEY (snapshot_id, cache_key)
);

CREATE TABLE autotune_results (       -- one row per autotune winner (best_config) or per timed config (autotune_json)
    snapshot_id        INTEGER NOT NULL,
    source             VARCHAR NOT NULL,  -- best_config, autotune_json
    path               VARCHAR NOT NULL,  -- the file, relative to the ingested directory
    entry              INTEGER NOT NULL,  -- position in the file (0 for a best_config)
    kernel_name        VARCHAR,
    module_path        VARCHAR,           -- best_config: the generated module it tunes
    key                JSON,              -- autotune_json: the autotuner's key (sizes, dtypes)
    config             JSON NOT NULL,     -- {"kwargs": {...}, "num_warps": …, "num_stages": …}
    time_ms            DOUBLE,            -- autotune_json: the config's median time; best_config: the module's kernel_perf
    timings            JSON,              -- autotune_json: every quantile as written
    tuning_ms          DOUBLE,            -- best_config: time_taken_ms (how long autotuning took)
    is_best            BOOLEAN NOT NULL,
    found_by_coordesc  BOOLEAN,
    triton_cache_hash  VARCHAR,
    cache_key          VARCHAR,           -- the kernel folder compiled for this config (NULL unless linked)
    link               VARCHAR NOT NULL,  -- hash, config, ambiguous, missing
    link_detail        VARCHAR,
    PRIMARY KEY (snapshot_id, path, entry)
);

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
    km.module_path AS inductor_module, km.kernel_name AS inductor_kernel, ab.is_best AS is_autotune_best
FROM snapshot_folders sf
JOIN snapshots s USING (snapshot_id)
JOIN kernel_folders k USING (folder_digest)
LEFT JOIN kernel_analysis a USING (folder_digest)
LEFT JOIN kernel_modules km ON km.snapshot_id = sf.snapshot_id AND km.cache_key = sf.cache_key
LEFT JOIN (SELECT snapshot_id, cache_key, bool_or(is_best) AS is_best FROM autotune_results
           WHERE cache_key IS NOT NULL GROUP BY ALL) ab
       ON ab.snapshot_id = sf.snapshot_id AND ab.cache_key = sf.cache_key;
