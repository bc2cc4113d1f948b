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

-- the views of the same names: views.sql
DROP TABLE kernel_modules;
DROP TABLE autotune_results;
