-- 008: a snapshot's Inductor module rows are stored once per distinct set, as its kernel folders are (003).
--
-- inductor_modules held one row per decorated kernel of every generated module, per snapshot: an
-- unchanged re-ingest of a real TorchInductor cache directory added them all again (H100 resnet18: 304
-- rows with their JSON metadata, ~130 KB a snapshot, most of the catalog's growth). Now a snapshot names
-- a set by digest (snapshots.inductor_module_set); the view inductor_modules keeps the table's columns,
-- so queries written against it keep working.

CREATE TABLE inductor_module_sets (
    set_digest     VARCHAR NOT NULL,  -- sha256 of the set's rows as JSON arrays of text, ordered (writer.py)
    path           VARCHAR NOT NULL,
    kernel_name    VARCHAR NOT NULL,
    heuristic      VARCHAR,
    def_line       INTEGER,
    size_hints     JSON,
    triton_meta    JSON,
    inductor_meta  JSON,
    configs        JSON,
    kernel_perf_ms DOUBLE,
    PRIMARY KEY (set_digest, path, kernel_name)
);

ALTER TABLE snapshots ADD COLUMN inductor_module_set VARCHAR;   -- NULL: a snapshot with no generated module

UPDATE snapshots SET inductor_module_set = d.set_digest
FROM (SELECT snapshot_id,
             sha256(string_agg(to_json([path, kernel_name, heuristic, def_line::VARCHAR, size_hints::VARCHAR,
                                        triton_meta::VARCHAR, inductor_meta::VARCHAR, configs::VARCHAR,
                                        kernel_perf_ms::VARCHAR])::VARCHAR,
                               chr(10) ORDER BY path, kernel_name)) AS set_digest
      FROM inductor_modules GROUP BY snapshot_id) d
WHERE snapshots.snapshot_id = d.snapshot_id;

INSERT INTO inductor_module_sets
SELECT DISTINCT s.inductor_module_set, m.path, m.kernel_name, m.heuristic, m.def_line, m.size_hints, m.triton_meta,
       m.inductor_meta, m.configs, m.kernel_perf_ms
FROM inductor_modules m JOIN snapshots s USING (snapshot_id);

DROP TABLE inductor_modules;   -- the view of the same name: views.sql
