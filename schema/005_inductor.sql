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
